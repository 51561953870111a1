"""`nsprof results` ranks a stored tune from that tune's own rows: of run N and the runs before it, of the
target's own file (not another copy whose source fingerprint is the same), and of the configs and shapes its
latest tune listed (real nsprof runs under the stand-in profilers, tests/standins.py)."""

from __future__ import annotations

import json
import sqlite3
from functools import partial

from conftest import run_nsprof

_nsprof = partial(run_nsprof, in_process=True)  # nothing here crosses a process: no interpreter to start

QUICK = ["--mode", "direct", "--no-explain", "--budget-s", "0", "--no-feed-back", "--no-tuner-pick"]
TUNE = ["--backend", "ncu", *QUICK, "--store", "s.sqlite"]
STORED = [*QUICK, "--reps", "3", "--json", "--store", "s.sqlite"]
TWO_TRUTHS = ["--truth", "ncu,nsys", "--deploy", "ncu", *QUICK, "--json", "--store", "s.sqlite"]


def _ranked(done) -> list[tuple[int, float]]:
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    return [(r["config_id"], r["value_ns"]) for r in document["ranked"]]


def _truths(done) -> dict:
    """{truth: [(config id, value ns, reps)]} of a tune's --json, best first."""
    assert done.returncode == 0, done.stderr
    return {t["truth"]: [(r["config_id"], r["value_ns"], r["reps"]) for r in t["ranked"]]
            for t in json.loads(done.stdout)["truths"]}  # fmt: skip


def _truth_values(done) -> dict:
    return {truth: [(c, v) for c, v, _ in rows] for truth, rows in _truths(done).items()}


def test_results_by_run_ranks_that_runs_rows_not_a_later_runs(tmp_path):
    """`results --run 1` ranks "the stored tune of this run": a later tune of the same target under the
    same key (run 2, here with more reps, whose extra reps measure config 0 slower) must not replace
    run 1's numbers."""
    (tmp_path / "target.py").write_text(
        "import nsprof.space\n"
        "configs = [{'b': 0, 'ns_reps': [1000, 1000, 1000, 9000, 9000, 9000]}, {'b': 1, 'ns': 3000}]\n"
        "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
    )
    first = _nsprof("tune", "target.py:space", *TUNE, "--reps", "3", "--json", cwd=tmp_path, standins=True)
    assert _ranked(first) == [(0, 1000.0), (1, 3000.0)]
    second = _nsprof("tune", "target.py:space", *TUNE, "--reps", "6", "--json", cwd=tmp_path, standins=True)
    assert _ranked(second) == [(1, 3000.0), (0, 5000.0)]
    again = _nsprof("results", "s.sqlite", "--run", "1", "--json", cwd=tmp_path)
    assert _ranked(again) == [(0, 1000.0), (1, 3000.0)], json.loads(again.stdout)["notes"]


DATA_TARGET = """
import json, os
import nsprof.space
with open(os.path.join(os.path.dirname(__file__), "configs.json")) as file:
    configs = json.load(file)
space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
"""


def test_results_of_a_target_never_ranks_another_targets_rows(tmp_path):
    """Two projects whose target files are the same text (their configs read from a data file beside
    each, as the nsprof.space_view docstring allows) share a source fingerprint; `results --target a`
    must rank a's configs as a's tune measured them, never b's."""
    for name, configs in (("a", [{"b": 1, "ns": 1000}, {"b": 2, "ns": 2000}]),
                          ("b", [{"b": 7, "ns": 5000}, {"b": 8, "ns": 500}])):  # fmt: skip
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.py").write_text(DATA_TARGET)
        (tmp_path / name / "configs.json").write_text(json.dumps(configs))
    a = _nsprof("tune", "a/t.py:space", *TUNE, "--reps", "3", "--json", cwd=tmp_path, standins=True)
    assert _ranked(a) == [(0, 1000.0), (1, 2000.0)]
    b = _nsprof("tune", "b/t.py:space", *TUNE, "--reps", "3", "--json", cwd=tmp_path, standins=True)
    assert _ranked(b) == [(1, 500.0), (0, 5000.0)]
    again = _nsprof("results", "s.sqlite", "--target", "a/t.py:space", "--json", cwd=tmp_path)
    assert _ranked(again) == [(0, 1000.0), (1, 2000.0)], json.loads(again.stdout)["notes"]


def test_results_of_a_target_ranks_no_config_its_latest_tune_no_longer_lists(tmp_path):
    """A target's configs read from a data file (its source fingerprint unchanged by an edit of it): the
    user drops config 2 and replaces config 1, and `tune --resume` ranks the two configs the target lists
    (config 0 best). `results --target` ranks "the target's latest stored tune again": it must not name
    as the winner a config that tune no longer lists (a stale config 2, measured under the old file)."""
    (tmp_path / "t.py").write_text(DATA_TARGET)
    data = tmp_path / "configs.json"
    data.write_text(json.dumps([{"b": 1, "ns": 2000}, {"b": 2, "ns": 3000}, {"b": 3, "ns": 500}]))
    first = _nsprof("tune", "t.py:space", *TUNE, "--reps", "3", "--json", cwd=tmp_path, standins=True)
    assert _ranked(first)[0] == (2, 500.0)
    data.write_text(json.dumps([{"b": 1, "ns": 2000}, {"b": 4, "ns": 2500}]))
    resumed = _nsprof(
        "tune", "t.py:space", *TUNE, "--reps", "3", "--resume", "--json", cwd=tmp_path, standins=True
    )
    assert _ranked(resumed) == [(0, 2000.0), (1, 2500.0)]
    again = _nsprof("results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path)
    assert _ranked(again) == [(0, 2000.0), (1, 2500.0)], json.loads(again.stdout)["notes"]


PLAIN = (
    "import nsprof.space\n"
    "configs = [{'b': 0, 'ns': 1000}, {'b': 1, 'ns': 2000}]\n"
    "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
)


def test_results_by_run_of_a_two_truth_tunes_second_truth_ranks_that_tunes_first_truth(tmp_path):
    """`results --run 2` (tune 1's nsys run) ranks tune 1's ncu rows, not those of tune 2 (run 3)."""
    (tmp_path / "target.py").write_text(
        "import nsprof.space\n"
        "configs = [{'b': 0, 'ns_reps': [1000, 1000, 1000, 9000, 9000, 9000], 'ns_at': {'none-none': 500}},\n"
        "           {'b': 1, 'ns': 3000, 'ns_at': {'none-none': 2000}}]\n"
        "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
    )
    first = _nsprof("tune", "target.py:space", *TWO_TRUTHS, "--reps", "3", cwd=tmp_path, standins=True)
    assert _ranked(first) == [(0, 1000.0), (1, 3000.0)]
    second = _nsprof("tune", "target.py:space", *TWO_TRUTHS, "--reps", "6", cwd=tmp_path, standins=True)
    assert _ranked(second) == [(1, 3000.0), (0, 5000.0)]
    again = _nsprof("results", "s.sqlite", "--run", "2", "--json", cwd=tmp_path)  # run 2: tune 1's nsys
    assert _truths(again)["ncu"] == [(0, 1000.0, 3), (1, 3000.0, 3)], json.loads(again.stdout)["notes"]


def test_results_of_a_resume_by_absolute_path_from_elsewhere_keeps_the_runs_it_resumed(tmp_path):
    """A tune of `t.py:space` (config 0) from its folder, resumed as /abs/t.py:space from another folder (config
    1): one target (each run recorded the same file), so `results --run 2` from there ranks both configs."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "else").mkdir()
    (tmp_path / "proj" / "t.py").write_text(PLAIN)
    store = str(tmp_path / "s.sqlite")
    opts = ["--backend", "ncu", *QUICK, "--json", "--reps", "3", "--store", store]
    part = _nsprof("tune", "t.py:space", *opts, "--configs", "0", cwd=tmp_path / "proj", standins=True)
    assert _ranked(part) == [(0, 1000.0)]
    target = f"{tmp_path / 'proj' / 't.py'}:space"
    resumed = _nsprof("tune", target, *opts, "--resume", cwd=tmp_path / "else", standins=True)
    assert _ranked(resumed) == [(0, 1000.0), (1, 2000.0)]
    again = _nsprof("results", store, "--run", "2", "--json", cwd=tmp_path / "else")
    assert _ranked(again) == [(0, 1000.0), (1, 2000.0)], json.loads(again.stdout)["notes"]


def test_results_run_of_a_two_truth_tune_ignores_a_later_tune_under_its_second_truth_only(tmp_path):
    """Tune 1: --truth ncu,nsys (runs 1 ncu, 2 nsys). The data file changes (same fingerprint) and tune 2 is
    --backend nsys alone (run 3). `results --run 2` is tune 1's: its nsys ranking is run 2's numbers, a second
    nsys first pass being another tune's."""
    (tmp_path / "t.py").write_text(DATA_TARGET)
    data = tmp_path / "configs.json"
    data.write_text(json.dumps([{"b": 0, "ns": 1000, "ns_at": {"none-none": 500}},
                                {"b": 1, "ns": 3000, "ns_at": {"none-none": 2000}}]))  # fmt: skip
    first = _nsprof("tune", "t.py:space", *TWO_TRUTHS, "--reps", "3", cwd=tmp_path, standins=True)
    assert _truth_values(first)["nsys"] == [(0, 500.0), (1, 2000.0)]
    data.write_text(json.dumps([{"b": 0, "ns": 1000, "ns_at": {"none-none": 4000}},
                                {"b": 1, "ns": 3000, "ns_at": {"none-none": 100}}]))  # fmt: skip
    second = _nsprof("tune", "t.py:space", "--backend", "nsys", *STORED, cwd=tmp_path, standins=True)
    assert _ranked(second) == [(1, 100.0), (0, 4000.0)]
    again = _nsprof("results", "s.sqlite", "--run", "2", "--json", cwd=tmp_path)
    assert _truth_values(again)["nsys"] == [(0, 500.0), (1, 2000.0)], json.loads(again.stdout)["notes"]


def _as_older_nsprof_wrote(store, run_id: int) -> None:
    """Run `run_id` as an nsprof before target_place wrote it (its settings without that key)."""
    with sqlite3.connect(store) as db:
        (text,) = db.execute("SELECT settings_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        settings = json.loads(text)
        assert settings.pop("target_place")
        db.execute("UPDATE runs SET settings_json = ? WHERE id = ?", (json.dumps(settings), run_id))


def test_results_of_a_target_never_ranks_an_older_nsprofs_run_of_another_copy(tmp_path):
    """a/t.py and b/t.py: the same text (configs from a data file beside each), one source fingerprint. b was
    tuned by an older nsprof (run 1, no target_place); a by this one, config 0 only (run 2). `results --target
    a/t.py:space` ranks no config of b's: a run without a recorded place is matched by the target's text."""
    for name, configs in (("a", [{"b": 1, "ns": 1000}, {"b": 2, "ns": 2000}]),
                          ("b", [{"b": 7, "ns": 5000}, {"b": 8, "ns": 500}])):  # fmt: skip
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.py").write_text(DATA_TARGET)
        (tmp_path / name / "configs.json").write_text(json.dumps(configs))
    b = _nsprof("tune", "b/t.py:space", "--backend", "ncu", *STORED, cwd=tmp_path, standins=True)
    assert _ranked(b) == [(1, 500.0), (0, 5000.0)]
    if "target_place" in (tmp_path / "s.sqlite").read_bytes().decode("latin-1"):
        _as_older_nsprof_wrote(tmp_path / "s.sqlite", 1)
    a = _nsprof(
        "tune", "a/t.py:space", "--backend", "ncu", "--configs", "0", *STORED, cwd=tmp_path, standins=True
    )
    assert _ranked(a) == [(0, 1000.0)]
    again = _nsprof("results", "s.sqlite", "--target", "a/t.py:space", "--json", cwd=tmp_path)
    assert _ranked(again) == [(0, 1000.0)], json.loads(again.stdout)["notes"]


def test_results_by_target_from_another_folder_finds_the_runs_by_their_recorded_place(tmp_path):
    """A tune of `t.py:space` from its folder records target_place /abs/proj/t.py:space: `results STORE
    --target /abs/proj/t.py:space` from another folder names that very file, and finds its runs."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "else").mkdir()
    (tmp_path / "proj" / "t.py").write_text(PLAIN)
    store = str(tmp_path / "s.sqlite")
    opts = [o if o != "s.sqlite" else store for o in STORED]
    done = _nsprof("tune", "t.py:space", "--backend", "ncu", *opts, cwd=tmp_path / "proj", standins=True)
    assert _ranked(done) == [(0, 1000.0), (1, 2000.0)]
    target = f"{tmp_path / 'proj' / 't.py'}:space"
    again = _nsprof("results", store, "--target", target, "--json", cwd=tmp_path / "else")
    assert again.returncode == 0, again.stderr
    assert _ranked(again) == [(0, 1000.0), (1, 2000.0)]


PLAIN_TWO = (
    "import nsprof.space\n"
    "configs = [{'b': 0, 'ns': 1000, 'ns_at': {'none-none': 500}}, {'b': 1, 'ns': 3000, 'ns_at': {'none-none': 2000}}]\n"
    "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
)


def test_results_run_of_a_second_two_truth_tunes_first_run_ranks_that_tunes_second_truth(tmp_path):
    """Tune 1 --truth ncu,nsys --reps 3 (runs 1 ncu, 2 nsys); tune 2, the same with --reps 6 (runs 3 ncu,
    4 nsys). `results --run 3` and `--run 4` are tune 2's: its nsys ranking is run 4's (6 reps), not tune 1's
    run 2 (3 reps)."""
    (tmp_path / "target.py").write_text(PLAIN_TWO)
    first = _nsprof("tune", "target.py:space", *TWO_TRUTHS, "--reps", "3", cwd=tmp_path, standins=True)
    assert _truths(first)["nsys"] == [(0, 500.0, 3), (1, 2000.0, 3)]
    second = _nsprof("tune", "target.py:space", *TWO_TRUTHS, "--reps", "6", cwd=tmp_path, standins=True)
    assert _truths(second)["nsys"] == [(0, 500.0, 6), (1, 2000.0, 6)]
    listed = _nsprof("results", "s.sqlite", cwd=tmp_path).stdout
    assert [line.split()[3] for line in listed.splitlines()[2:]] == ["ncu", "nsys", "ncu", "nsys"], listed
    four = _nsprof("results", "s.sqlite", "--run", "4", "--json", cwd=tmp_path)
    assert _truths(four)["nsys"] == [(0, 500.0, 6), (1, 2000.0, 6)]
    three = _nsprof("results", "s.sqlite", "--run", "3", "--json", cwd=tmp_path)
    assert _truths(three)["nsys"] == [(0, 500.0, 6), (1, 2000.0, 6)], json.loads(three.stdout)["truths"][1][
        "notes"
    ]


def test_results_run_of_a_resumes_first_truth_ranks_the_resumes_second_truth(tmp_path):
    """Tune 1 --truth ncu,nsys --configs 0 (runs 1 ncu, 2 nsys); tune 2 the same with --resume over both
    configs (runs 3 ncu, 4 nsys: config 1 each). `results --run 3` is tune 2's: both truths rank both
    configs (run 4 is tune 2's nsys first pass, run 2 tune 1's)."""
    (tmp_path / "target.py").write_text(PLAIN_TWO)
    part = _nsprof(
        "tune", "target.py:space", *TWO_TRUTHS, "--reps", "3", "--configs", "0", cwd=tmp_path, standins=True
    )
    assert _truths(part)["nsys"] == [(0, 500.0, 3)]
    whole = _nsprof(
        "tune", "target.py:space", *TWO_TRUTHS, "--reps", "3", "--resume", cwd=tmp_path, standins=True
    )
    assert _truths(whole)["nsys"] == [(0, 500.0, 3), (1, 2000.0, 3)]
    listed = _nsprof("results", "s.sqlite", cwd=tmp_path).stdout
    assert [line.split()[3] for line in listed.splitlines()[2:]] == ["ncu", "nsys", "ncu", "nsys"], listed
    three = _nsprof("results", "s.sqlite", "--run", "3", "--json", cwd=tmp_path)
    assert _truths(three)["nsys"] == [(0, 500.0, 3), (1, 2000.0, 3)], json.loads(three.stdout)["notes"]


def test_results_target_of_a_moved_project_never_falls_back_to_another_projects_runs(tmp_path):
    """a/t.py and b/t.py (different sources, so fingerprints) each tuned from its own folder as `t.py:space`
    (b last); a is then moved to c. `results --target t.py:space` from c ranks c's own configs (found by
    the target's text and its source's fingerprint) or none, never b's."""
    store = str(tmp_path / "s.sqlite")
    opts = ["--backend", "ncu", *[o if o != "s.sqlite" else store for o in STORED]]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "t.py").write_text(
        "import nsprof.space\nconfigs = [{'b': 0, 'ns': 1000}, {'b': 1, 'ns': 2000}]\n"
        "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
    )
    (tmp_path / "b" / "t.py").write_text(
        "import nsprof.space\nconfigs = [{'b': 7, 'ns': 9000}, {'b': 8, 'ns': 100}, {'b': 9, 'ns': 50}]\n"
        "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
    )
    for name in ("a", "b"):
        done = _nsprof("tune", "t.py:space", *opts, cwd=tmp_path / name, standins=True)
        assert done.returncode == 0, done.stderr
    (tmp_path / "a").rename(tmp_path / "c")
    again = _nsprof("results", store, "--target", "t.py:space", "--json", cwd=tmp_path / "c")
    ranked = [] if again.returncode else [r["config_id"] for r in json.loads(again.stdout)["ranked"]]
    assert ranked in ([], [0, 1]), again.stdout[-1500:]


RESUMED = (
    "import nsprof.space\n"
    "configs = [{'b': 0, 'ns_reps': [1000, 1100, 900] + [5000] * 30},\n"
    "           {'b': 1, 'ns_reps': [1000, 1050, 950] + [1000] * 30}, {'b': 2, 'ns': 9000}]\n"
    "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
)
RESUMED_TUNE = ["--mode", "direct", "--no-explain", "--no-feed-back", "--no-tuner-pick", "--store", "s.sqlite",
                "--json", "--reps", "3"]  # fmt: skip


def test_results_by_run_leaves_out_the_adaptive_reps_of_a_later_resume_that_measured_nothing_first(tmp_path):
    """A later `tune --resume` that finds every config stored stores no first pass, but its adaptive reps are
    a run of their own: they are that resume's, and `results --run 1` ranks tune 1 as it ranked itself."""
    (tmp_path / "t.py").write_text(RESUMED)
    tune = ["tune", "t.py:space", "--backend", "ncu", *RESUMED_TUNE]
    first = _nsprof(*tune, "--budget-s", "0", cwd=tmp_path, standins=True)
    assert [(c, v) for c, v, _ in _truths(first)["ncu"]] == [(0, 1000.0), (1, 1000.0), (2, 9000.0)]
    later = _nsprof(*tune, "--budget-s", "600", "--resume", cwd=tmp_path, standins=True)
    assert _truths(later)["ncu"][0][0] == 1  # its adaptive reps (a run of their own) turned the order
    again = _nsprof("results", "s.sqlite", "--run", "1", "--json", cwd=tmp_path)
    assert _truths(again)["ncu"] == _truths(first)["ncu"], json.loads(again.stdout)["notes"]
    # the target's latest tune is the resume: its adaptive reps are in it
    latest = _nsprof("results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path)
    assert _truths(latest)["ncu"] == _truths(later)["ncu"]


def _stored_runs(tmp_path) -> list[tuple]:
    """(id, backend, tune_id, adaptive session number) of every stored run."""
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        return db.execute(
            "SELECT id, backend, json_extract(settings_json, '$.tune_id'), "
            "json_extract(settings_json, '$.adaptive_session') FROM runs ORDER BY id"
        ).fetchall()


def test_results_by_run_of_a_resumes_run_keeps_that_resumes_own_later_first_pass(tmp_path):
    (tmp_path / "t.py").write_text(RESUMED)
    tune = ["tune", "t.py:space", *RESUMED_TUNE]
    _nsprof(*tune, "--truth", "ncu", "--budget-s", "0", cwd=tmp_path, standins=True)  # run 1
    _nsprof(
        *tune, "--truth", "nsys", "--configs", "0,1", "--budget-s", "0", cwd=tmp_path, standins=True
    )  # run 2
    # the resume: ncu has every config (its adaptive reps: run 3), nsys lacks config 2 (its first pass: run 4)
    resumed = _nsprof(*tune, "--truth", "ncu,nsys", "--deploy", "ncu", "--budget-s", "600", "--resume",
                      cwd=tmp_path, standins=True)  # fmt: skip
    runs = _stored_runs(tmp_path)
    assert runs[2][1] == "ncu" and runs[2][3] is not None and runs[3][1] == "nsys" and runs[3][3] is None, (
        runs
    )
    assert runs[2][2] == runs[3][2], runs  # one call of tune stored both
    again = _nsprof("results", "s.sqlite", "--run", "3", "--json", cwd=tmp_path)
    assert _truths(again)["nsys"] == _truths(resumed)["nsys"], (runs, json.loads(again.stdout)["notes"])


def test_results_by_run_of_a_run_stored_before_tune_ids_leaves_out_a_later_resumes_adaptive_reps(tmp_path):
    # run 1 as an nsprof that recorded no tune_id stored it; then a resume by this one
    (tmp_path / "t.py").write_text(RESUMED)
    tune = ["tune", "t.py:space", "--backend", "ncu", *RESUMED_TUNE]
    first = _nsprof(*tune, "--budget-s", "0", cwd=tmp_path, standins=True)
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        db.execute("UPDATE runs SET settings_json = json_remove(settings_json, '$.tune_id')")
    later = _nsprof(*tune, "--budget-s", "600", "--resume", cwd=tmp_path, standins=True)
    assert (
        _truths(later)["ncu"][0][0] == 1
    )  # its adaptive reps (a run of their own, with a tune_id) turned the order
    again = _nsprof("results", "s.sqlite", "--run", "1", "--json", cwd=tmp_path)
    assert _truths(again)["ncu"] == _truths(first)["ncu"], (
        _stored_runs(tmp_path),
        json.loads(again.stdout)["notes"],
    )


SUBSET = (
    "import nsprof.space\n"
    "configs = [{'b': 0, 'ns': 2000}, {'b': 1, 'ns': 3000}, {'b': 2, 'ns': 1000}]\n"
    "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
)


def test_a_reread_of_a_tune_of_some_configs_ranks_only_those_it_measured(tmp_path):
    """Tune 1 measures configs 0, 1, 2 (config 2 best); tune 2, no --resume, only 0 and 1 (`--configs 0,1`; a
    --prescreen that sends config 2 on nowhere does the same) and names config 0. `results --run 2` re-ranks tune
    2: config 2, which it never ranked, is not in it (its numbers are tune 1's); a --resume of configs 0 and 1
    ranks those two too, from the rows before it."""
    (tmp_path / "target.py").write_text(SUBSET)
    first = _nsprof("tune", "target.py:space", *TUNE, "--reps", "3", "--json", cwd=tmp_path, standins=True)
    assert _ranked(first)[0] == (2, 1000.0)
    some = ["--reps", "3", "--configs", "0,1", "--json"]
    subset = _nsprof("tune", "target.py:space", *TUNE, *some, cwd=tmp_path, standins=True)
    assert _ranked(subset) == [(0, 2000.0), (1, 3000.0)]
    for again in (
        _nsprof("results", "s.sqlite", "--run", "2", "--json", cwd=tmp_path),
        _nsprof("results", "s.sqlite", "--target", "target.py:space", "--json", cwd=tmp_path),
    ):
        assert _ranked(again) == [(0, 2000.0), (1, 3000.0)], json.loads(again.stdout)["notes"]
    assert _ranked(_nsprof("results", "s.sqlite", "--run", "1", "--json", cwd=tmp_path))[0] == (2, 1000.0)
    resumed = _nsprof("tune", "target.py:space", *TUNE, *some, "--resume", cwd=tmp_path, standins=True)
    assert _ranked(resumed) == [(0, 2000.0), (1, 3000.0)]
    again = _nsprof("results", "s.sqlite", "--target", "target.py:space", "--json", cwd=tmp_path)
    assert _ranked(again) == [(0, 2000.0), (1, 3000.0)]
