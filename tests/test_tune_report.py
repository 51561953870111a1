"""A tune's report: one object per run, per shape and per truth, none referring
back to one that holds it, saved by `tune --json` and read back whole by `nsprof results FILE.json`
(no GPU, no tool, the target not imported), printed and drawn as the tune printed and drew it.

The tune runs in real worker processes under stand-in truths (tests/standins.py's StatusDriver,
"lab" labelled as ncu, "field" as nsys), at two shapes where the truths agree at one and disagree
at the other, so that the report holds probes, explanations and adaptive summaries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import sys
from pathlib import Path

import pytest
from conftest import run_nsprof

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

pytestmark = pytest.mark.xdist_group("tune_report")  # one worker: the module's one tune (`tuned`) made once

from nsprof.drivers import registry  # noqa: E402
from nsprof.drivers.ncu import NcuDriver  # noqa: E402
from nsprof.drivers.nsys import NsysDriver  # noqa: E402

# µs per (shape, config) under each truth: they agree at shape 0 (config 1) and disagree at shape 1
# (lab: 0, field: 2); lab with field's warm L2 reads as field (the L2 state explains it).
LAB = {0: [3, 1, 2], 1: [1, 5, 9]}
FIELD = {0: [3, 1, 2], 1: [9, 5, 1]}


def _configs() -> list[dict]:
    def at(table: dict, c: int) -> list[float]:
        return [table[s][c] * 1e3 for s in (0, 1)]

    return [
        {
            "i": c,
            "ns_shapes_at": {
                "base-all": at(LAB, c),
                "none-none": at(FIELD, c),
                "base-none": at(FIELD, c),
                "none-all": at(LAB, c),
            },
        }
        for c in range(3)
    ]


@contextlib.contextmanager
def _two_by_two_in(folder: Path):
    """A target of 3 configs at 2 shapes written in `folder`, the stand-in truths lab and field
    registered and the GPU lock's folder there while it is used; yields the target."""
    registry.register("lab", type("Lab", (StatusDriver,), {"labels_like": NcuDriver}))
    registry.register("field", type("Field", (StatusDriver,), {"labels_like": NsysDriver}))
    (folder / "truths.py").write_text(
        "import nsprof.space\n"
        f"space = nsprof.space.Space(configs={_configs()!r}, shapes=[{{'M': 1}}, {{'M': 16}}], "
        "build=lambda c, s: (lambda: None), device='cpu')\n"
    )
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("NSPROF_LOCK_DIR", str(folder))
            yield f"{folder / 'truths.py'}:space"
    finally:
        registry.unregister("lab")
        registry.unregister("field")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The TuneReport of a tune of two truths at two shapes, made once for the tests that only read it."""
    folder = tmp_path_factory.mktemp("tuned")
    with _two_by_two_in(folder) as target:
        return _tuned(target, folder)


@pytest.fixture
def two_by_two(tmp_path):
    """A target of 3 configs at 2 shapes, and the stand-in truths lab and field registered."""
    with _two_by_two_in(tmp_path) as target:
        yield target


def _tuned(target: str, tmp_path):
    from nsprof.settings import TuneSettings
    from nsprof.tune import tune

    settings = TuneSettings(
        backend="lab",
        truths=("lab", "field"),
        deploy="field",
        mode="direct",
        reps=3,
        timeout_s=30,
        store=tmp_path / "results.sqlite",
        work_dir=tmp_path / "work",
        tuner_pick=False,
    )
    return tune(target, settings)


def _objects(root) -> list:
    """Every object reachable from `root` through dataclass fields, dicts, lists and tuples, each
    with the path of objects from root that reached it; asserts no object is reached from itself."""
    seen = []

    def walk(value, path: tuple) -> None:
        if any(value is held for held in path):
            raise AssertionError(f"{type(value).__name__} is reached from itself")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            children = [getattr(value, f.name) for f in dataclasses.fields(value)]
        elif isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, (list, tuple)):
            children = list(value)
        else:
            return
        seen.append(value)
        for child in children:
            walk(child, (*path, value))

    walk(root, ())
    return seen


def test_a_tune_with_two_truths_and_two_shapes_round_trips_through_json(tuned):
    import pandas as pd

    from nsprof.analysis.tune_report import Ranking, ShapeReport, TuneReport
    from nsprof.render.json import load_tune, tune_document
    from nsprof.render.tune_tables import format_tune

    report = tuned
    assert [s.shape for s in report.shapes] == [0, 1] and [list(s.truths) for s in report.shapes] == [
        ["lab", "field"]
    ] * 2
    assert [p.verdict for s in report.shapes for p in s.cross.pairs] == ["agree", "disagree"]
    assert report.shapes[1].cross.explanations[0].cause == "cache_control"

    text = tune_document(report)
    again = load_tune(text)
    assert isinstance(again, TuneReport) and tune_document(again) == text
    assert format_tune(again) == format_tune(report)
    assert again.configs == report.configs and again.errors == report.errors == []
    assert again.steps == report.steps and list(report.steps) == [
        "lab",
        "field",
        "compare",
        "pick",
        "feed_back",
    ]
    for before, after in zip(report.shapes, again.shapes):
        assert isinstance(after, ShapeReport) and (after.shape, after.shape_value) == (
            before.shape,
            before.shape_value,
        )
        for name, ranking in before.truths.items():
            loaded = after.truths[name]
            assert isinstance(loaded, Ranking) and loaded.notes == ranking.notes
            pd.testing.assert_frame_equal(loaded.table, ranking.table)
            assert loaded.adaptive == ranking.adaptive and loaded.labels == ranking.labels
            assert loaded.decision.as_json() == ranking.decision.as_json()
        for a, b in zip(before.cross.explanations, after.cross.explanations):
            assert b.pair is after.cross.pairs[0] and b.probed == a.probed
            for p, q in zip(a.probes, b.probes):
                pd.testing.assert_frame_equal(q.table, p.table)


def test_a_tune_saved_before_the_clock_step_was_recorded_loads(saved_tune):
    """A saved tune of an earlier nsprof, whose adaptive summaries lack clock_step_ns, loads and reads
    as one whose step was not read (1 ns)."""
    from nsprof.render.json import load_tune

    document = json.loads(json.dumps(saved_tune))
    summaries = [
        truth["adaptive"] for shape in document["shapes"] for truth in shape["truths"] if truth["adaptive"]
    ]
    assert len(summaries) >= 2
    summaries[0]["clock_step_ns"] = 32  # one written by this nsprof, the others by an earlier one
    for adaptive in summaries[1:]:
        del adaptive["clock_step_ns"]
    again = load_tune(json.dumps(document))
    loaded = [r.adaptive.clock_step_ns for s in again.shapes for r in s.truths.values() if r.adaptive]
    assert loaded == [32] + [1] * (len(summaries) - 1)


def test_no_object_of_a_report_is_reached_from_itself(tuned):
    from nsprof.analysis.tune_report import Ranking, ShapeReport

    reached = _objects(tuned)  # raises on a cycle
    assert sum(isinstance(o, ShapeReport) for o in reached) == 2
    assert sum(isinstance(o, Ranking) for o in reached) == 4


def test_results_reads_a_saved_tune_json_and_prints_and_draws_it_as_tune_did(two_by_two, tmp_path):
    """`nsprof tune --json > tune.json`, then `nsprof results tune.json` with no tool on PATH and the
    target gone: the same table, the same JSON, and the page."""
    target = "target.py:space"
    (tmp_path / "target.py").write_text(
        "import nsprof.space\n"
        "configs = [{'block': 16 * (i + 1), 'ns_reps': [n, n + 10, n - 10]} for i, n in "
        "enumerate([3000, 1000, 2000])]\n"
        "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
    )
    args = ["tune", target, "--truth", "ncu,nsys", "--mode", "direct", "--reps", "3", "--budget-s", "0"]
    args += ["--no-feed-back", "--no-tuner-pick", "--no-store"]  # the stand-ins measure alike each time
    table = run_nsprof(*args, cwd=tmp_path, standins=True, in_process=True)
    saved = run_nsprof(*args, "--json", cwd=tmp_path, standins=True, in_process=True)
    assert table.returncode == 0 and saved.returncode == 0, table.stderr + saved.stderr
    (tmp_path / "tune.json").write_text(saved.stdout)
    (tmp_path / "target.py").unlink()
    bare = tmp_path / "bare-path"
    bare.mkdir()
    env = {"PATH": str(bare), "NSPROF_NCU": None, "NSPROF_NSYS": None}

    shown = run_nsprof("results", "tune.json", "--html", "page.html", cwd=tmp_path, env=env, in_process=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == table.stdout
    assert "note: config 1 is the winner" in shown.stdout and "cross-truth: ncu and nsys" in shown.stdout
    page = html.unescape((tmp_path / "page.html").read_text())
    assert "<img" in page and "Under nsys" in page
    assert all(line.removeprefix("note: ") in page for line in shown.stdout.splitlines() if "winner" in line)

    as_json = run_nsprof("results", "tune.json", "--json", in_process=True, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == json.loads(saved.stdout)


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"label": "not a tune", "ranked": []}', "not a saved tune (nsprof tune --json writes one)"),
        ('[{"file": "a.nsys-rep"}]', "not a saved tune"),
        ('{"format": "nsprof tune", "target": "t.py:space", "label": "ncu", "shape"', "not JSON"),
        ('{"format": "nsprof tune", "target": "t.py:space"}', "a saved tune that cannot be read"),
    ],
)
def test_a_json_that_is_not_a_saved_tune_is_one_line_and_exit_2(tmp_path, content, words):
    (tmp_path / "other.json").write_text(content)
    done = run_nsprof("results", "other.json", in_process=True, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("nsprof: error: other.json: ") and words in lines[0], lines
    assert done.stdout == ""


def test_a_truncated_tune_json_is_one_line_and_exit_2(saved_tune, tmp_path):
    text = json.dumps(saved_tune)
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    done = run_nsprof("results", "cut.json", "--json", in_process=True, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "cut.json: not JSON" in lines[0], done.stderr


@pytest.mark.parametrize("edit", ["deploy", "no truths", "configs", "settings", "errors"])
def test_a_saved_tune_edited_past_reading_is_one_line_and_exit_2(saved_tune, tmp_path, edit):
    document = json.loads(json.dumps(saved_tune))
    if edit in ("configs", "settings", "errors"):
        document[edit] = 5  # not the list, dict, list it was
    for shape in document["shapes"]:
        if edit == "deploy":
            shape["deploy"]["truth"] = "ncu@free-warm"  # a truth it has no ranking of
        elif edit == "no truths":
            shape["truths"] = []
    (tmp_path / "edited.json").write_text(json.dumps(document))
    done = run_nsprof("results", "edited.json", in_process=True, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("nsprof: error: edited.json: a saved tune that cannot be read"), lines


@pytest.fixture(scope="module")
def saved_tune(tuned) -> dict:
    """tune --json's document of `tuned` (shape 1's holds an explanation with probes and adaptive
    summaries), for the edits below (each edits a copy: _edited)."""
    from nsprof.render.json import tune_document

    return json.loads(tune_document(tuned))


# Each a field of a saved tune edited by hand to a value of the wrong kind (each of these once gave
# an internal error): the field, the value, and the words naming the field in the refusal.
WRONG_FIELDS = [
    ("shapes.1.agreement.0.a_under_b", "x", "shapes[1].agreement[0].a_under_b is the text 'x'"),
    ("shapes.1.agreement.0.b_under_a", [], "shapes[1].agreement[0].b_under_a is a list"),
    ("shapes.1.agreement.0.ties_a", None, "shapes[1].agreement[0].ties_a is null"),
    ("shapes.1.agreement.0.ties_b", -1, "shapes[1].agreement[0].ties_b is the number -1"),
    ("shapes.1.explanations.0.cause", "x", "shapes[1].explanations[0].cause is the text 'x'"),
    ("shapes.1.explanations.0.contenders", 1.5, "shapes[1].explanations[0].contenders is the number 1.5"),
    ("shapes.1.explanations.0.warnings", None, "shapes[1].explanations[0].warnings is null"),
    ("shapes.1.explanations.0.probes.0.changed", [7], "shapes[1].explanations[0].probes[0].changed[0]"),
    (
        "shapes.1.explanations.0.probes.0.labels",
        "x",
        "shapes[1].explanations[0].probes[0].labels is the text",
    ),
    ("shapes.1.explanations.0.probes.0.labels.cache_control", [], "probes[0].labels.cache_control is a list"),
    (
        "shapes.1.explanations.0.probes.0.ranked.0.rank",
        float("inf"),
        "probes[0].ranked[0].rank is the number inf",
    ),
    ("shapes.1.truths.0.columns", None, "shapes[1].truths[0].columns is null"),
    ("shapes.1.truths.0.columns", {}, "shapes[1].truths[0].columns lacks config_id"),
    ("shapes.1.truths.0.notes", 5, "shapes[1].truths[0].notes is the number 5"),
    ("shapes.1.truths.0.labels", True, "shapes[1].truths[0].labels is true"),
    ("shapes.1.truths.0.labels.clock_control", {}, "shapes[1].truths[0].labels.clock_control is an object"),
    ("shapes.1.truths.0.ranked.0.rank", float("inf"), "shapes[1].truths[0].ranked[0].rank is the number inf"),
    (
        "shapes.1.truths.0.ranked.0.value_ns",
        -5.0,
        "shapes[1].truths[0].ranked[0].value_ns is the number -5.0",
    ),
    ("shapes.1.truths.0.ranked.0.config_id", "x", "shapes[1].truths[0].ranked[0].config_id is the text 'x'"),
    ("shapes.1.truths.0.truth", "x", "shapes[1].truths lack lab"),
    ("shapes.1.truths.0.adaptive.stopped", None, "shapes[1].truths[0].adaptive.stopped is null"),
    ("shapes.1.truths.0.adaptive.budget_s", "x", "shapes[1].truths[0].adaptive.budget_s is the text 'x'"),
    ("shapes.1.truths.0.adaptive.equivalence", [], "shapes[1].truths[0].adaptive.equivalence is a list"),
    ("errors", [1], "errors[0] is the number 1"),
]


def _edited(document, field: str, value):
    edited = json.loads(json.dumps(document))
    *path, last = [int(key) if key.isdigit() else key for key in field.split(".")]
    held = edited
    for key in path:
        held = held[key]
    held[last] = value
    return edited


@pytest.mark.parametrize(
    "field, value, words", WRONG_FIELDS, ids=[f"{field}={value!r}" for field, value, _ in WRONG_FIELDS]
)
def test_a_saved_tune_with_a_field_of_the_wrong_kind_is_one_line_naming_the_field(
    saved_tune, tmp_path, field, value, words
):
    (tmp_path / "edited.json").write_text(json.dumps(_edited(saved_tune, field, value)))
    for more in ([], ["--json"]):
        done = run_nsprof("results", "edited.json", *more, in_process=True, cwd=tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith("nsprof: error: edited.json: a saved tune that cannot be read: its "), (
            lines
        )
        assert words in lines[0], lines


def test_a_saved_tune_of_an_unbounded_budget_reads_back(saved_tune, tmp_path):
    """--budget-s inf is written as JSON's null (JSON has no infinity): it reads back as no bound."""
    (tmp_path / "t.json").write_text(
        json.dumps(_edited(saved_tune, "shapes.1.truths.0.adaptive.budget_s", None))
    )
    done = run_nsprof("results", "t.json", "--json", in_process=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["shapes"][1]["truths"][0]["adaptive"]["budget_s"] is None


def _unranked(document: dict, truths: tuple, how: str, shapes: tuple = (0, 1)) -> dict:
    """`document` with the rankings under `truths` at `shapes` holding nothing ranked: their ranked
    lists emptied ("empty") or every row made a failure whose reason names its config ("failed")."""
    edited = json.loads(json.dumps(document))
    for shape in edited["shapes"]:
        for ranking in shape["truths"]:
            if ranking["truth"] not in truths or shape["shape"] not in shapes:
                continue
            if how == "empty":
                ranking["ranked"] = []
            for row in ranking["ranked"]:
                row.update({name: None for name in row if name.endswith("_ns") or name == "spread"})
                row.update(rank=None, vs_best=None, ci_coverage=None, tied_with_best=False)
                row["error"] = f"build failed: config {row['config_id']} edited"
    return edited


@pytest.mark.parametrize("how", ["empty", "failed"])
def test_a_saved_tune_with_nothing_ranked_under_any_truth_is_one_line_and_exit_2(saved_tune, tmp_path, how):
    """A tune that measures nothing stops with one line and exit status 2; a saved tune that ranks nothing
    under any truth (at any shape) is refused alike, naming the file and the truths."""
    (tmp_path / "none.json").write_text(json.dumps(_unranked(saved_tune, ("lab", "field"), how)))
    for more in ([], ["--json"], ["--html", "p.html"]):
        done = run_nsprof("results", "none.json", *more, in_process=True, cwd=tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith("nsprof: error: none.json: nothing ranked under lab or field: "), lines
        assert "no config was measured" in lines[0] and done.stdout == ""
        if how == "failed":  # as a tune says it: how many failed, the first one's reason
            assert "all 3 failed (config 0: build failed: config 0 edited)" in lines[0], lines
    assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("how", ["empty", "failed"])
@pytest.mark.parametrize("empty, ranked", [("lab", "field"), ("field", "lab")])
def test_a_saved_tune_with_one_truth_unranked_shows_the_other(saved_tune, tmp_path, how, empty, ranked):
    """A run cut short (Ctrl-C) can leave a truth with nothing ranked beside one that ranks: the file
    still reads back, the ranked truth's table as it was, the other's rows nothing measured."""
    (tmp_path / "half.json").write_text(json.dumps(_unranked(saved_tune, (empty,), how)))
    done = run_nsprof("results", "half.json", in_process=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    tables = done.stdout.split("ranked by ")[1:]
    by_truth = {table.split()[0].rstrip(","): table for table in tables}
    rows = {
        t: [ln.split() for ln in text.splitlines() if ln[:2] in ("0 ", "1 ")] for t, text in by_truth.items()
    }
    assert [row[-2:] for row in rows[empty]] == [["nothing", "measured"]] * 2, done.stdout
    assert all(row[-2:] != ["nothing", "measured"] for row in rows[ranked]), done.stdout


@pytest.mark.parametrize("how", ["empty", "failed"])
def test_a_saved_tune_with_one_shape_unranked_shows_the_others_as_tune_does(saved_tune, tmp_path, how):
    """A shape where nothing was measured leaves a tune standing (exit 0, the other shapes ranked): so
    does its saved file, the shape said to have nothing measured in every truth's table."""
    (tmp_path / "part.json").write_text(json.dumps(_unranked(saved_tune, ("lab", "field"), how, (1,))))
    done = run_nsprof("results", "part.json", in_process=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line[:2] in ("0 ", "1 ")]
    assert [row[:3] for row in rows if row[1] == "M=1"] == [["0", "M=1", "1"]] * 2  # LAB, FIELD: 1 is best
    assert [row[-2:] for row in rows if row[1] == "M=16"] == [["nothing", "measured"]] * 2


def test_a_tune_with_a_shape_measured_at_no_config_reads_back_as_it_printed(tmp_path):
    """A live tune whose every config fails at one shape ranks the others and exits 0, with a note naming
    the shape; `nsprof results` of its --json prints the same and exits the same."""
    (tmp_path / "target.py").write_text(
        "import nsprof.space\n"
        "def build(config, shape):\n"
        "    if shape['M'] == 16:\n"
        "        raise RuntimeError('no kernel at M=16')\n"
        "    return lambda: None\n"
        "space = nsprof.space.Space(configs=[{'i': 0}, {'i': 1}], shapes=[{'M': 1}, {'M': 16}],\n"
        "                           build=build, device='cpu')\n"
    )
    args = ["tune", "target.py:space", "--truth", "ncu", "--mode", "direct", "--reps", "3", "--budget-s", "0"]
    args += ["--no-feed-back", "--no-tuner-pick", "--no-store"]
    table = run_nsprof(*args, "--work-dir", "w1", cwd=tmp_path, standins=True, in_process=True)
    saved = run_nsprof(*args, "--work-dir", "w2", "--json", cwd=tmp_path, standins=True, in_process=True)
    assert table.returncode == 0 and saved.returncode == 0, table.stderr + saved.stderr
    (tmp_path / "tune.json").write_text(saved.stdout)
    shown = run_nsprof("results", "tune.json", in_process=True, cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout == table.stdout, shown.stderr
    assert "no config was measured at shape 1 (M=16)" in shown.stdout
    rows = {line.split()[1]: line.split() for line in shown.stdout.splitlines() if line[:2] in ("0 ", "1 ")}
    assert rows["M=1"][2] == "0" and rows["M=16"][-2:] == ["nothing", "measured"]  # 1000 + config id ns
