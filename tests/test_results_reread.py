"""Re-reading a saved run: `nsprof results STORE --target T` ranks what the results store
holds as tune ranks it, per truth, and draws it (--plot, --html), and `tune --resume` over a store
that holds every config measures nothing: both with no GPU and no profiler on PATH.

The store is written by a real `nsprof tune` under the stand-in profilers (tests/standins.py); the
re-reading runs the real `python -m nsprof` in a child process whose PATH is an empty folder, and
its numbers are checked against an independent read of the store with sqlite3.
"""

from __future__ import annotations

import html
import json
import shutil
import sqlite3
import statistics
import subprocess
from pathlib import Path

import pytest
from conftest import run_nsprof
from test_shapes import shaped  # noqa: F401, F811 - the fixture

# Per config: ncu's reps (ns_reps), and what nsys measures (ns_at: its conditions are clocks free,
# L2 warm), so that the two truths rank the configs differently.
NCU_REPS = [[3000, 3030, 2970], [2000, 2020, 1980], [1000, 1010, 990], [1500, 1515, 1485]]
NSYS_NS = [900, 2500, 1800, 1200]
TARGET = f"""
import nsprof.space
NCU_REPS = {NCU_REPS!r}
NSYS_NS = {NSYS_NS!r}
configs = [{{"block": 16 * (i + 1), "ns_reps": ns, "ns_at": {{"none-none": NSYS_NS[i]}}}}
           for i, ns in enumerate(NCU_REPS)]
space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
"""
pytestmark = pytest.mark.xdist_group("results_reread")  # one worker: its one tune (`tuned_once`) made once
TUNE = ["--truth", "ncu,nsys", "--no-explain", "--mode", "direct", "--reps", "3", "--budget-s", "0"]
TUNE += ["--no-feed-back", "--no-tuner-pick"]


@pytest.fixture(scope="module")
def tuned_once(tmp_path_factory):
    """A store written by a real tune of a 4-config target under ncu and nsys (stand-ins)."""
    folder = tmp_path_factory.mktemp("tuned")
    (folder / "target.py").write_text(TARGET)
    done = run_nsprof(
        "tune", "target.py:space", *TUNE, "--store", "s.sqlite", cwd=folder, standins=True, in_process=True
    )
    assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture
def tuned(tuned_once, tmp_path):
    """A copy of that tune's folder of the test's own (tests change the store and the target)."""
    shutil.copytree(tuned_once, tmp_path / "tuned")
    return tmp_path / "tuned"


def no_tools(tmp_path: Path) -> dict:
    """An environment whose PATH holds no ncu, nsys or nvidia-smi (an empty folder)."""
    bare = tmp_path / "bare-path"
    bare.mkdir(exist_ok=True)
    assert shutil.which("ncu", path=str(bare)) is None and shutil.which("nsys", path=str(bare)) is None
    return {"PATH": str(bare), "NSPROF_NCU": None, "NSPROF_NSYS": None}


def independent_ranking(store: Path, backend: str, run_id: int | None = None) -> list[tuple[int, float]]:
    """(config_id, median ns) best first, read with sqlite3: each rep's kernels summed, the median
    over reps (of one run's rows, given `run_id`)."""
    with sqlite3.connect(store) as db:
        rows = db.execute(
            "SELECT config_id, rep, SUM(duration_ns) FROM measurements "
            "WHERE backend = ? AND error IS NULL AND (? IS NULL OR run_id = ?) GROUP BY config_id, rep",
            (backend, run_id, run_id),
        ).fetchall()
    reps: dict[int, list[float]] = {}
    for config_id, _rep, total in rows:
        reps.setdefault(config_id, []).append(total)
    medians = {c: statistics.median(v) for c, v in reps.items()}
    return sorted(medians.items(), key=lambda item: (item[1], item[0]))


def test_results_ranks_a_stored_tune_per_truth_and_draws_it_without_a_tool_or_the_target(tuned):
    # The target is gone: the ranking is made from the store alone (its configs' JSON).
    (tuned / "target.py").unlink()
    store = tuned / "s.sqlite"
    args = ["results", str(store), "--target", "target.py:space"]
    done = run_nsprof(
        *args, "--plot", "p.png", "--html", "p.html", cwd=tuned, env=no_tools(tuned), in_process=True
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert (tuned / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    as_json = run_nsprof(*args, "--json", cwd=tuned, env=no_tools(tuned), in_process=True)
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    rankings = {truth["truth"]: truth for truth in document["truths"]}
    assert set(rankings) == {"ncu", "nsys"}
    for truth, backend in (("ncu", "ncu"), ("nsys", "nsys")):
        expected = independent_ranking(store, backend)
        ranked = [(r["config_id"], r["value_ns"]) for r in rankings[truth]["ranked"]]
        assert ranked == [(c, pytest.approx(v)) for c, v in expected]
    assert [c for c, _ in independent_ranking(store, "ncu")][0] == 2
    assert [c for c, _ in independent_ranking(store, "nsys")][0] == 0  # the truths disagree
    assert document["best_config_id"] == 2  # the deploy truth (ncu, the first) decides

    # The terminal's winner lines, each on the page too.
    winners = [line for line in done.stdout.splitlines() if "is the winner" in line]
    assert any(line.startswith("note: config 2 is the winner") for line in winners)
    assert any(line.startswith("note: config 0 is the winner") for line in winners)
    page = html.unescape((tuned / "p.html").read_text())
    for line in winners:
        assert line.removeprefix("note: ") in page
    assert "<img" in page


def test_results_by_run_id_and_the_runs_list_stay(tuned):
    store = tuned / "s.sqlite"
    listed = run_nsprof("results", str(store), cwd=tuned, env=no_tools(tuned), in_process=True)
    assert listed.returncode == 0, listed.stderr
    assert "target.py:space" in listed.stdout and "nsys" in listed.stdout
    by_run = run_nsprof(
        "results", str(store), "--run", "2", "--json", cwd=tuned, env=no_tools(tuned), in_process=True
    )
    assert by_run.returncode == 0, by_run.stderr
    document = json.loads(by_run.stdout)
    assert [t["truth"] for t in document["truths"]] == ["ncu", "nsys"]  # run 2's tune ranked both


def test_results_by_run_id_ranks_the_other_truth_as_measured_on_that_runs_gpu(tuned):
    """A later tune on another GPU measured the other truth too: run 1 is still read beside the nsys run
    of its own GPU, not beside the other GPU's (whose numbers rank the configs the other way)."""
    store = tuned / "s.sqlite"
    with sqlite3.connect(store) as db:
        (nsys_run,) = db.execute("SELECT id FROM runs WHERE backend = 'nsys'").fetchone()
        columns = [row[1] for row in db.execute("PRAGMA table_info(runs)") if row[1] != "id"]
        picked = ", ".join("'NVIDIA B200 GPU-other'" if c == "gpu" else "'GPU-other'" if c == "gpu_uuid" else c
                           for c in columns)  # fmt: skip
        db.execute(
            f"INSERT INTO runs ({', '.join(columns)}) SELECT {picked} FROM runs WHERE id = ?", (nsys_run,)
        )
        (other_run,) = db.execute("SELECT MAX(id) FROM runs").fetchone()
        columns = [row[1] for row in db.execute("PRAGMA table_info(measurements)") if row[1] != "id"]
        new = {
            "run_id": str(other_run),
            "gpu": "'NVIDIA B200 GPU-other'",
            "duration_ns": "100000 - duration_ns",
        }
        picked = ", ".join(new.get(c, c) for c in columns)
        db.execute(
            f"INSERT INTO measurements ({', '.join(columns)}) SELECT {picked} FROM measurements WHERE run_id = ?",
            (nsys_run,),
        )
    assert (
        independent_ranking(store, "nsys", other_run)[0][0]
        != independent_ranking(store, "nsys", nsys_run)[0][0]
    )
    by_run = run_nsprof(
        "results", str(store), "--run", "1", "--json", cwd=tuned, env=no_tools(tuned), in_process=True
    )
    assert by_run.returncode == 0, by_run.stderr
    nsys = next(t for t in json.loads(by_run.stdout)["truths"] if t["truth"] == "nsys")
    ranked = [(r["config_id"], r["value_ns"]) for r in nsys["ranked"]]
    assert ranked == [(c, pytest.approx(v)) for c, v in independent_ranking(store, "nsys", nsys_run)]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--target", "nothere.py:space"], "no run of target nothere.py:space"),
        (["--run", "99"], "no run 99"),
        (["--plot", "p.png"], "--plot needs --target or --run"),
        (["--target", "target.py:space", "--run", "1"], "--target or --run, not both"),
        (["--store", "other.sqlite"], "two results stores given"),
        (["--run", "1", "--export", "x.csv"], "it takes no --target or --run"),
    ],
)
def test_results_bad_selection_is_one_line(tuned, args, words):
    done = run_nsprof(
        "results", str(tuned / "s.sqlite"), *args, cwd=tuned, env=no_tools(tuned), in_process=True
    )
    assert done.returncode != 0
    assert words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_tune_resume_with_every_config_stored_needs_no_tool(tuned):
    resume = ["tune", "target.py:space", *TUNE, "--store", "s.sqlite", "--resume", "--html", "r.html"]
    done = run_nsprof(*resume, cwd=tuned, env=no_tools(tuned), in_process=True)
    assert done.returncode == 0, done.stderr
    assert "resumed: 4 of 4 configs came from the results store" in done.stdout
    with sqlite3.connect(tuned / "s.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (2,)  # nothing measured
    page = html.unescape((tuned / "r.html").read_text())
    assert "config 2 is the winner" in page


def test_tune_resume_with_a_config_missing_and_no_tool_fails_in_one_line(tuned):
    with sqlite3.connect(tuned / "s.sqlite") as db:
        db.execute("DELETE FROM measurements WHERE backend = 'ncu' AND config_id = 1")
    resume = ["tune", "target.py:space", *TUNE, "--store", "s.sqlite", "--resume"]
    done = run_nsprof(*resume, cwd=tuned, env=no_tools(tuned), in_process=True)
    assert done.returncode != 0
    # one line says why (beside it only the progress bar's label, printed as the stage began)
    said = [line for line in done.stderr.splitlines() if line.startswith("nsprof:")]
    assert len(said) == 1 and "ncu" in said[0] and "not found" in said[0], done.stderr
    assert "Traceback" not in done.stderr
    with sqlite3.connect(tuned / "s.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (2,)  # no run started


def test_reread_ranks_each_shape_as_tune_did(shaped, tmp_path):  # noqa: F811
    """A target with shapes (tests/test_shapes.py's, under its stand-in driver): each shape's
    re-read ranking is tune's, and the store's medians per (shape, config)."""
    from test_shapes import NS, WINNERS
    from test_shapes import _settings as shaped_settings

    from nsprof.render.tune_tables import describe_decision, format_tune
    from nsprof.store import ResultStore
    from nsprof.tune import tune
    from nsprof.tune.saved import reread

    tuned = tune(shaped + ":space", shaped_settings(tmp_path, feed_back=False))
    with ResultStore(tmp_path / "results.sqlite") as store:
        again = reread(store, target=shaped + ":space")
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        stored = db.execute(
            "SELECT shape, config_id, rep, SUM(duration_ns) FROM measurements WHERE error IS NULL "
            "GROUP BY shape, config_id, rep"
        ).fetchall()
    reps: dict[tuple[int, int], list[float]] = {}
    for shape, config_id, _rep, total in stored:
        reps.setdefault((shape, config_id), []).append(total)
    assert [s.shape for s in again.shapes] == [0, 1, 2]
    assert [s.shape_value for s in again.shapes] == [{"M": 1}, {"M": 16}, {"M": 128}]
    for before, after in zip(tuned.shapes, again.shapes):
        medians = {c: statistics.median(v) for (s, c), v in reps.items() if s == after.shape}
        order = sorted(medians, key=lambda c: (medians[c], c))
        assert (
            after.ranking.table["config_id"].tolist() == order == before.ranking.table["config_id"].tolist()
        )
        assert after.ranking.table["value_ns"].tolist() == pytest.approx([medians[c] for c in order])
        assert after.ranking.table["value_ns"].tolist() == pytest.approx(sorted(NS[after.shape]))
        assert after.ranking.best_config_id == WINNERS[after.shape]
        assert describe_decision(after.ranking) == describe_decision(before.ranking)
    assert "per shape" in format_tune(again)


def test_a_resume_with_more_reps_labels_its_ranking_with_the_reps_it_holds(tuned):
    """The store holds 3 reps of every config; a resume asking 7 measures nothing (the reps are not
    part of the key), and its ranking says what it stands on: 3 reps, not 7."""
    tune = [*TUNE[: TUNE.index("--reps")], *TUNE[TUNE.index("--reps") + 2 :]]
    resumed = run_nsprof(
        "tune", "target.py:space", *tune, "--reps", "7", "--resume", "--store", "s.sqlite", "--json",
        cwd=tuned, standins=True, in_process=True
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    document = json.loads(resumed.stdout)
    assert all(row["reps"] == 3 for row in document["ranked"] if row.get("reps") is not None)
    assert "of 3 reps" in document["label"] and "7 reps" not in document["label"], document["label"]


@pytest.mark.parametrize("field", ["reps", "config_id"])
def test_a_saved_tune_with_a_number_too_large_for_its_column_is_one_line(tuned, field):
    done = run_nsprof(
        "results", "s.sqlite", "--target", "target.py:space", "--json", cwd=tuned, in_process=True
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    shape = (document.get("shapes") or [document])[0]
    shape["truths"][0]["ranked"][0][field] = 10**30
    (tuned / "bad.json").write_text(json.dumps(document))
    again = run_nsprof("results", "bad.json", cwd=tuned, in_process=True)
    assert again.returncode == 2, again.stderr
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "a saved tune that cannot be read" in lines[0], again.stderr


def test_a_saved_tune_whose_ranked_lists_are_empty_is_one_line_and_exit_2(tuned):
    """A saved tune of a target without shapes that ranks no config (edited, or of a tune that measured
    nothing) is refused as tune refuses a run that measured nothing: one line naming the file, status 2."""
    done = run_nsprof(
        "results", "s.sqlite", "--target", "target.py:space", "--json", cwd=tuned, in_process=True
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert "shapes" not in document and [t["truth"] for t in document["truths"]] == ["ncu", "nsys"]
    document["ranked"] = []
    for ranking in document["truths"]:
        ranking["ranked"] = []
    (tuned / "empty.json").write_text(json.dumps(document))
    again = run_nsprof("results", "empty.json", in_process=True, cwd=tuned)
    lines = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(lines) == 1 and again.stdout == "", again.stderr
    assert lines[0].startswith(
        "nsprof: error: empty.json: nothing ranked under ncu or nsys: no config was measured"
    )


FAILING = """
import nsprof.space
def build(config, shape=None):
    if shape is not None and shape["M"] != 16:
        return lambda: None
    raise RuntimeError(f"no kernel for block {config['block']}")
space = nsprof.space.Space(configs=[{"block": 16 * (i + 1)} for i in range(%d)],%s
                           build=build, device="cpu")
"""


def _failing_tune(folder: Path, n_configs: int, shapes: str = "") -> subprocess.CompletedProcess:
    """A real tune (stand-ins) into folder/s.sqlite of a target whose build fails (at every shape, or at
    M=16 only when `shapes` gives it shapes)."""
    folder.mkdir()
    (folder / "target.py").write_text(FAILING % (n_configs, shapes))
    return run_nsprof(
        "tune", "target.py:space", *TUNE, "--store", "s.sqlite", cwd=folder, standins=True, in_process=True
    )


def test_a_stored_tune_whose_every_config_failed_is_one_line_and_exit_2(tmp_path):
    """A tune whose every config fails stops with one line and exit status 2, its failures stored; its
    re-read from the store is refused alike, naming the store and the target, and the first failure."""
    tuned = _failing_tune(tmp_path / "t", 3)
    assert tuned.returncode == 2 and "no config was measured: all 3 failed (config 0: " in tuned.stderr
    with sqlite3.connect(tmp_path / "t" / "s.sqlite") as db:
        stored = db.execute(
            "SELECT DISTINCT config_id, error FROM measurements WHERE backend = 'ncu' ORDER BY config_id"
        ).fetchall()
    assert [c for c, _ in stored] == [0, 1, 2] and "no kernel for block 16" in stored[0][1], stored
    for more in ([], ["--json"], ["--html", "p.html"]):
        again = run_nsprof(
            "results", "s.sqlite", "--target", "target.py:space", *more, in_process=True, cwd=tmp_path / "t"
        )
        lines = again.stderr.strip().splitlines()
        assert again.returncode == 2 and len(lines) == 1 and again.stdout == "", again.stderr
        assert lines[0].startswith(
            "nsprof: error: results store s.sqlite, target.py:space: nothing ranked under ncu: "
        )
        assert (
            "no config was measured: all 3 failed (config 0: " in lines[0]
            and "no kernel for block 16" in lines[0]
        )
    assert not (tmp_path / "t" / "p.html").exists()


def test_a_stored_tune_with_one_shape_measured_at_no_config_still_reads_back(tmp_path):
    """Every config failing at one shape leaves a tune standing (exit 0): so does its re-read from the
    store, the other shape ranked as the store's numbers rank it, that shape's rows nothing measured."""
    tuned = _failing_tune(tmp_path / "t", 2, ' shapes=[{"M": 1}, {"M": 16}],')
    assert tuned.returncode == 0, tuned.stderr
    with sqlite3.connect(tmp_path / "t" / "s.sqlite") as db:
        failed = db.execute(
            "SELECT DISTINCT backend, config_id FROM measurements WHERE shape = 1 AND error IS NOT NULL"
        ).fetchall()
    assert sorted(failed) == [("ncu", 0), ("ncu", 1), ("nsys", 0), ("nsys", 1)], failed
    again = run_nsprof(
        "results", "s.sqlite", "--target", "target.py:space", in_process=True, cwd=tmp_path / "t"
    )
    assert again.returncode == 0 and again.stderr == "", again.stderr
    rows = [line.split() for line in again.stdout.splitlines() if line[:2] in ("0 ", "1 ")]
    for backend, row in zip(("ncu", "nsys"), [row for row in rows if row[1] == "M=1"], strict=True):
        with sqlite3.connect(tmp_path / "t" / "s.sqlite") as db:
            sums = db.execute(
                "SELECT config_id, SUM(duration_ns) FROM measurements WHERE backend = ? AND shape = 0 "
                "AND error IS NULL GROUP BY config_id, rep",
                (backend,),
            ).fetchall()
        medians = {c: statistics.median(t for k, t in sums if k == c) for c in {c for c, _ in sums}}
        assert row[2] == str(min(medians, key=lambda c: (medians[c], c))), again.stdout
    assert [row[-2:] for row in rows if row[1] == "M=16"] == [["nothing", "measured"]] * 2, again.stdout
    # the note the tune gave that shape, once, as tune gave it
    assert tuned.stdout.count("note: shape 1: no config was measured at shape 1 (M=16)") == 1, tuned.stdout
    assert again.stdout.count("note: shape 1: no config was measured at shape 1 (M=16)") == 1, again.stdout


SHAPES_FROM_ENV = """
import json, os
import nsprof.space
configs = [{"i": 0, "ns_shapes": [3000.0, 900.0]}, {"i": 1, "ns_shapes": [1000.0, 4000.0]},
           {"i": 2, "ns_shapes": [2000.0, 500.0]}]
space = nsprof.space.Space(configs=configs, shapes=json.loads(os.environ["SHAPES"]),
                           build=lambda c, s: (lambda: None), device="cpu")
"""


def test_a_reread_ranks_each_shape_by_its_value_when_the_target_reordered_its_shapes(tmp_path):
    """The same file lists its shapes in another order between two tunes (read from the environment): a
    shape's index then means another shape in each run. The re-read ranks each shape's own rows, by its
    value, as the store's latest run of that shape measured them."""
    (tmp_path / "target.py").write_text(SHAPES_FROM_ENV)
    for shapes in ('[{"M": 1}, {"M": 16}]', '[{"M": 16}, {"M": 1}]'):
        done = run_nsprof(
            "tune", "target.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "3", "--store",
            "s.sqlite", "--no-tuner-pick", "--no-feed-back", "--budget-s", "0",
            env={"SHAPES": shapes}, cwd=tmp_path, standins=True, in_process=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        rows = db.execute(
            "SELECT run_id, shape, shape_json, config_id, rep, SUM(duration_ns) FROM measurements "
            "WHERE error IS NULL GROUP BY run_id, shape_json, config_id, rep"
        ).fetchall()
    latest = {text: max(r for r, _, t, *_ in rows if t == text) for text in {t for _, _, t, *_ in rows}}
    expected = {}
    for text, run in latest.items():
        reps: dict[int, list[float]] = {}
        for _r, shape, _t, config, _rep, total in (r for r in rows if r[0] == run and r[2] == text):
            reps.setdefault(config, []).append(total)
            index = shape
        medians = {c: statistics.median(v) for c, v in reps.items()}
        expected[index] = (json.loads(text), min(medians, key=lambda c: (medians[c], c)))
    again = run_nsprof(
        "results", "s.sqlite", "--target", "target.py:space", "--json", in_process=True, cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    got = {s["shape"]: (s["shape_value"], s["best_config_id"]) for s in json.loads(again.stdout)["shapes"]}
    assert got == expected == {0: ({"M": 16}, 1), 1: ({"M": 1}, 2)}


@pytest.mark.parametrize("more", [(), ("--export", "out.csv")])
def test_results_of_an_empty_file_is_one_line_and_leaves_it_empty(tmp_path, more):
    empty = tmp_path / "empty.csv"
    empty.touch()
    done = run_nsprof("results", str(empty), *more, cwd=tmp_path, in_process=True)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "empty" in done.stderr and "not a results store" in done.stderr, done.stderr
    assert empty.stat().st_size == 0 and not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE measurements SET config_json = '{bad' WHERE config_id = 0",
        "UPDATE measurements SET config_id = -1 WHERE config_id = 2",
        """UPDATE runs SET settings_json = '{"truths": 5}'""",
        """UPDATE runs SET settings_json = '{"reps": "x"}'""",
        "UPDATE meta SET value = '\u00b2' WHERE key = 'schema_version'",
    ],
)
def test_a_store_edited_by_hand_is_one_line_when_read_back(tuned, edit):
    store = tuned / "s.sqlite"
    with sqlite3.connect(store) as db:
        db.execute(edit)
    done = run_nsprof("results", str(store), "--target", "target.py:space", cwd=tuned, in_process=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert "internal error" not in lines[0] and str(store) in lines[0], lines[0]
