"""Shapes: a target lists problem shapes; `nsprof tune` measures every (shape, config)
in one profiled session, ranks each shape on its own, stores every row under its shape, resumes
per (shape, config), prints one compact table and feeds every shape's winner back.

Real worker processes under a stand-in profiler (tests/standins.py: each (shape, config) measures
its known "ns_shapes"[shape]), registered as a driver of its own, as tests/test_seam.py does.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

from nsprof.drivers import registry  # noqa: E402

# ns per (shape, config): shape 0's best is config 1, shape 1's config 2, shape 2's config 0.
NS = {0: [3000.0, 1000.0, 2000.0], 1: [900.0, 4000.0, 500.0], 2: [700.0, 800.0, 7000.0]}
WINNERS = {0: 1, 1: 2, 2: 0}
RUNNERS_UP = {0: 2, 1: 0, 2: 1}

TARGET = f"""
import json, os
import nsprof.space
from nsprof.tuner import TunerHook

NS = {NS!r}
SHAPES = [{{"M": 1}}, {{"M": 16}}, {{"M": 128}}]
BUILT = []


def build(config, shape):
    # the two-argument build of a Space with shapes: it sees the shape itself
    assert shape in SHAPES, shape
    return lambda: None


class Hook(TunerHook):
    name = "the stand-in tuner"

    def feed_back(self, latencies_ms):
        raise AssertionError("a target with shapes is fed back per shape")

    def feed_back_shapes(self, latencies_by_shape):
        # what the tuner's own cache would hold: each shape's key -> nsprof's best at that shape
        written = {{}}
        for shape, latencies in latencies_by_shape.items():
            best = min(latencies, key=lambda c: (latencies[c], c))
            written[json.dumps(SHAPES[shape], sort_keys=True)] = {{"best": best, "pid": os.getpid(),
                                                                   "latencies_ms": latencies}}
        with open(os.environ["SHAPES_FED"], "w") as handle:
            json.dump(written, handle)
        return {{shape: f"config {{min(l, key=l.get)}} for M={{SHAPES[shape]['M']}}"
                for shape, l in latencies_by_shape.items()}}


configs = [{{"i": c, "ns_shapes": [NS[s][c] for s in range(3)]}} for c in range(3)]
space = nsprof.space.Space(configs=configs, shapes=SHAPES, build=build, device="cpu", tuner=Hook())
plain = nsprof.space.Space(configs=[{{"i": 0}}, {{"i": 1}}], build=lambda c: (lambda: None), device="cpu")
"""


@pytest.fixture
def shaped(tmp_path, monkeypatch):
    registry.register("seam", StatusDriver)
    (tmp_path / "shaped_target.py").write_text(TARGET)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("SHAPES_FED", str(tmp_path / "fed.json"))
    yield str(tmp_path / "shaped_target.py")
    registry.unregister("seam")


def _settings(tmp_path, **kwargs):
    from nsprof.tune import TuneSettings

    return TuneSettings(
        **{
            "backend": "seam",
            "mode": "direct",
            "reps": 3,
            "timeout_s": 30,
            "store": tmp_path / "results.sqlite",
            "work_dir": tmp_path / "work",
            "tuner_pick": False,
            **kwargs,
        }
    )


# -- range names ---------------------------------------------------------------------------------


def test_range_names_carry_the_shape_and_old_names_still_parse():
    from nsprof.schema import make_frame, parse_range_name, range_name

    assert range_name(3, "graph", 2, shape=1) == "cfg3.s1.graph.r2"
    assert range_name(3, "graph", 2) == "cfg3.graph.r2"  # unchanged for a target without shapes
    assert parse_range_name("cfg3.s1.graph.r2") == (3, "graph", 2, 1)
    old = parse_range_name("cfg3.graph.r2")
    assert old[:3] == (3, "graph", 2) and old.shape is None
    assert parse_range_name("cfg3.sx.graph.r2") is None and parse_range_name("cfg3.s.graph.r2") is None
    frame = make_frame([{"range": "cfg3.s1.direct.r0"}, {"range": "cfg4.direct.r1"}, {"range": "other"}])
    assert frame["shape"].tolist()[:1] == [1] and frame["shape"].isna().tolist() == [False, True, True]
    assert frame["config_id"].tolist()[:2] == [3, 4]


def test_the_shipped_reports_parse_with_no_shape():
    from conftest import FIXTURES

    import nsprof

    frame = nsprof.read_report(FIXTURES / "fixture.sqlite")
    assert frame["config_id"].notna().any() and frame["shape"].isna().all()
    frame = nsprof.read_report(FIXTURES / "fixture_node_raw.csv")
    assert frame["config_id"].notna().any() and frame["shape"].isna().all()


def test_point_ids_split_back_to_their_shape_and_config():
    from nsprof.schema import Points, make_frame

    points = Points(n_configs=3, n_shapes=4)
    ids = points.all()
    assert len(set(ids)) == 12 and [points.split(p) for p in ids[:4]] == [(0, 0), (1, 0), (2, 0), (0, 1)]
    assert all(points.id(*points.split(p)) == p for p in ids)
    with pytest.raises(ValueError):
        points.split(12)
    frame = make_frame(
        [{"range": "cfg2.s3.direct.r0"}, {"range": "cfg2.direct.r0"}, {"range": "cfg7.s0.direct.r0"}]
    )
    # a row with no shape, or a config outside the layout, belongs to no point
    assert points.of_frame(frame).tolist()[0] == 11 and points.of_frame(frame).isna().tolist() == [
        False,
        True,
        True,
    ]
    assert Points(3).of_frame(frame).isna().tolist() == [True, False, True]  # no shapes: only unshaped rows


def test_space_shapes_are_checked():
    from nsprof.errors import TargetError
    from nsprof.space import Space

    with pytest.raises(TargetError, match="empty"):
        Space(configs=[{}], shapes=[], build=lambda c, s: None)
    with pytest.raises(TargetError, match="must be a list"):
        Space(configs=[{}], shapes="M=1", build=lambda c, s: None)
    seen = []
    space = Space(configs=[{"a": 1}], shapes=[(1, 4096), (16, 4096)], build=lambda c, s: seen.append((c, s)))
    space.build_at(0, 1)
    assert seen == [({"a": 1}, (16, 4096))] and space.n_shapes == 2
    old = Space(configs=[{"a": 1}], build=lambda c: seen.append(c))
    old.build_at(0)
    assert seen[-1] == {"a": 1} and old.n_shapes == 0


# -- one session ---------------------------------------------------------------------------------


def test_profile_measures_every_shape_and_config_in_one_worker(shaped, tmp_path):
    from nsprof.profile import config_summary, profile_result
    from nsprof.settings import ProfileSettings

    settings = ProfileSettings(
        backend="seam", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path / "profile"
    )
    result = profile_result(shaped + ":space", settings)
    frame = result.frame
    assert result.failures == {}
    assert frame["pid"].nunique() == 1  # one worker measured every pair
    assert sorted(set(zip(frame["shape"], frame["config_id"]))) == [
        (s, c) for s in range(3) for c in range(3)
    ]
    assert list((tmp_path / "profile").glob("part*.status")) == [tmp_path / "profile" / "part0.status"]
    summary = config_summary(frame)
    medians = {(int(r.shape), int(r.config_id)): r.median_ns for r in summary.itertuples()}
    assert medians == {(s, c): NS[s][c] for s in range(3) for c in range(3)}


def test_tune_ranks_each_shape_stores_it_and_feeds_every_winner_back(shaped, tmp_path):
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    result = tune(shaped + ":space", _settings(tmp_path))
    assert [r.shape for r in result.shapes] == [0, 1, 2]
    assert {r.shape: r.ranking.best_config_id for r in result.shapes} == WINNERS
    for ranked in result.shapes:
        order = sorted(range(3), key=lambda c: NS[ranked.shape][c])
        assert list(ranked.ranking.table["config_id"]) == order
        assert list(ranked.ranking.table["value_ns"]) == [NS[ranked.shape][c] for c in order]
    # one session: one worker run (one profiler start), whose status names all nine pairs
    statuses = list((tmp_path / "work").glob("part*.status"))
    assert [p.name for p in statuses] == ["part0.status"]
    started = [line.split()[1] for line in statuses[0].read_text().splitlines() if line.startswith("start ")]
    assert sorted(map(int, started)) == list(range(9))

    # the store: every row under its shape, each (shape, config) with its own reps
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        rows = db.execute(
            "SELECT shape, shape_json, config_id, COUNT(*), MIN(duration_ns), MAX(duration_ns) "
            "FROM measurements GROUP BY shape, shape_json, config_id ORDER BY shape, config_id"
        ).fetchall()
    shapes_json = ['{"M":1}', '{"M":16}', '{"M":128}']
    assert rows == [(s, shapes_json[s], c, 3, NS[s][c], NS[s][c]) for s in range(3) for c in range(3)]

    # the feed-back: one fresh child process got every shape's ranking, and stored each shape's winner
    fed = json.loads((tmp_path / "fed.json").read_text())
    assert {key: entry["best"] for key, entry in fed.items()} == {
        '{"M": 1}': WINNERS[0],
        '{"M": 16}': WINNERS[1],
        '{"M": 128}': WINNERS[2],
    }
    assert len({entry["pid"] for entry in fed.values()}) == 1
    import os

    assert next(iter(fed.values()))["pid"] != os.getpid()
    assert fed['{"M": 16}']["latencies_ms"] == {str(c): NS[1][c] / 1e6 for c in range(3)}
    assert any(
        "handed to the stand-in tuner" in n and "config 2 for M=16" in n
        for n in result.shapes[1].ranking.notes
    )

    # the compact table: a row per shape, its winner, the winner's time, the runner-up, the tie state
    text = format_tune(result)
    lines = text.splitlines()
    assert lines[0].startswith("ranked by seam, mode direct") and lines[0].endswith("per shape")
    body = lines[3:6]
    for shape, line in enumerate(body):
        cells = re.split(r"\s{2,}", line.strip())
        assert cells[0] == str(shape) and cells[1] == f"M={[1, 16, 128][shape]}"
        assert cells[2] == str(WINNERS[shape]) and cells[4] == f"{NS[shape][WINNERS[shape]] / 1e3:.3f}"
        assert cells[5] == str(RUNNERS_UP[shape])
        behind = NS[shape][RUNNERS_UP[shape]] / NS[shape][WINNERS[shape]] - 1
        assert cells[6] == f"+{behind * 100:.1f}%" and cells[7] == "winner"
    assert "note: adaptive reps: none needed (the first pass separated the best)" in text


def test_resume_measures_only_the_missing_shape_and_config(shaped, tmp_path):
    from nsprof.tune import tune

    tune(shaped + ":space", _settings(tmp_path, feed_back=False))
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        db.execute("DELETE FROM measurements WHERE shape = 1 AND config_id = 2")
    resumed = tune(shaped + ":space", _settings(tmp_path, feed_back=False, resume=True))
    assert "resumed: 8 of 9 (shape, config) pairs came from the results store" in resumed.ranking.notes
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        second = db.execute("SELECT DISTINCT shape, config_id FROM measurements WHERE run_id = 2").fetchall()
    assert second == [(1, 2)]
    assert {
        r.shape: r.ranking.best_config_id for r in resumed.shapes
    } == WINNERS  # shape 1's winner came back measured
    assert list(resumed.shapes[1].ranking.table["value_ns"]) == sorted(NS[1])


def test_tune_json_and_cli_carry_every_shape(shaped, tmp_path):
    from conftest import run_nsprof

    done = run_nsprof(
        *("tune", shaped + ":space", "--backend", "nsys", "--mode", "direct", "--reps", "3"),
        *("--store", tmp_path / "cli.sqlite", "--no-tuner-pick", "--no-feed-back", "--json"),
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [s["shape"] for s in document["shapes"]] == [0, 1, 2]
    assert [s["shape_value"] for s in document["shapes"]] == [{"M": 1}, {"M": 16}, {"M": 128}]
    for shape in document["shapes"]:
        order = sorted(range(3), key=lambda c: NS[shape["shape"]][c])
        assert [r["config_id"] for r in shape["ranked"]] == order
        assert [r["value_ns"] for r in shape["ranked"]] == [NS[shape["shape"]][c] for c in order]
        assert shape["decision"]["kind"] == "winner" and shape["best_config_id"] == WINNERS[shape["shape"]]
    assert document["best_config_id"] == WINNERS[0]  # the top level is the first shape's


def test_two_truths_are_compared_per_shape(shaped, tmp_path):
    """Two stand-in truths labelled as ncu and nsys: they agree at shape 0 and disagree at shape 1."""
    from nsprof.drivers.ncu import NcuDriver
    from nsprof.drivers.nsys import NsysDriver
    from nsprof.render.json import tune_document
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    registry.register("lab", type("Lab", (StatusDriver,), {"labels_like": NcuDriver}))
    registry.register("field", type("Field", (StatusDriver,), {"labels_like": NsysDriver}))
    lab, field = {0: [3, 1, 2], 1: [1, 5, 9]}, {0: [3, 1, 2], 1: [9, 5, 1]}  # µs per shape, config
    configs = [
        {
            "i": c,
            "ns_shapes_at": {
                "base-all": [lab[s][c] * 1e3 for s in (0, 1)],
                "none-none": [field[s][c] * 1e3 for s in (0, 1)],
                # the probes of lab: its cache as field has it reads as field; its clock alone, as lab
                "base-none": [field[s][c] * 1e3 for s in (0, 1)],
                "none-all": [lab[s][c] * 1e3 for s in (0, 1)],
            },
        }
        for c in range(3)
    ]
    target = tmp_path / "truths.py"
    target.write_text(
        "import nsprof.space\n"
        f"space = nsprof.space.Space(configs={configs!r}, shapes=[1, 16], "
        "build=lambda c, s: (lambda: None), device='cpu')\n"
    )
    try:
        result = tune(
            f"{target}:space", _settings(tmp_path, backend="lab", truths=("lab", "field"), deploy="field")
        )
    finally:
        registry.unregister("lab")
        registry.unregister("field")
    verdicts = {r.shape: [p.verdict for p in r.cross.pairs] for r in result.shapes}
    assert verdicts == {0: ["agree"], 1: ["disagree"]}
    assert [r.ranking.best_config_id for r in result.shapes] == [1, 2]  # the deploy truth's (field's) winners
    assert result.shapes[1].truths["lab"].best_config_id == 0
    # the disagreement at shape 1 is probed there (shape 0 agrees: nothing to explain)
    assert result.shapes[0].cross.explanations == []
    explanation = result.shapes[1].cross.explanations[0]
    assert [(p.changed, p.verdict) for p in explanation.probes] == [
        (["cache_control"], "agree"),
        (["clock_control"], "disagree"),
        (["cache_control", "clock_control"], "agree"),
    ]
    assert explanation.cause == "cache_control"
    text = format_tune(result)
    assert text.count("per shape\n") == 2  # one compact table per truth
    assert "cross-truth, shape 0: lab and field agree: both pick config 1" in text
    assert "cross-truth, shape 1: lab and field disagree: lab picks config 0, field config 2" in text
    assert "cross-truth, shape 1: contenders 0, 2 measured again under lab" in text
    assert "So the L2 state explains it" in text
    assert "cross-truth, shape 0: contenders" not in text
    document = json.loads(tune_document(result))
    assert [s["agreement"][0]["verdict"] for s in document["shapes"]] == ["agree", "disagree"]
    assert [[t["truth"] for t in s["truths"]] for s in document["shapes"]] == [["lab", "field"]] * 2


def test_a_worker_refuses_a_target_whose_shapes_changed(shaped, tmp_path):
    from nsprof.errors import NsprofError
    from nsprof.session import run_session
    from nsprof.settings import ProfileSettings

    settings = ProfileSettings(
        backend="seam", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path / "stale"
    )
    with pytest.raises(NsprofError, match="3 configs and 3 shapes now, not the 3 and 4"):
        run_session(shaped + ":space", 3, settings, config_ids=[0, 11], n_shapes=4)
    with pytest.raises(NsprofError, match="lists 3 shapes, but this job measures none"):
        run_session(shaped + ":space", 3, settings, config_ids=[0])


def test_a_store_from_before_shapes_is_read_and_extended(tmp_path):
    from nsprof.store import MeasurementKey, ResultStore

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:  # the schema as nsprof wrote it before shapes
        db.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('schema_version', '1');
            CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at TEXT NOT NULL, target TEXT,
                fingerprint TEXT, gpu TEXT, gpu_uuid TEXT, backend TEXT, mode TEXT, clock_control TEXT,
                cache_control TEXT, tool_version TEXT, nsprof_version TEXT NOT NULL, settings_json TEXT,
                finished_at TEXT, status TEXT NOT NULL DEFAULT 'running');
            CREATE TABLE measurements (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
                fingerprint TEXT NOT NULL, config_id INTEGER NOT NULL, config_json TEXT NOT NULL, gpu TEXT NOT NULL,
                backend TEXT NOT NULL, mode TEXT NOT NULL, clock_control TEXT NOT NULL, cache_control TEXT NOT NULL,
                tool_version TEXT NOT NULL, kernel TEXT, rep INTEGER, duration_ns REAL, cycles REAL, clock_hz REAL,
                graph_node INTEGER, error TEXT, CHECK ((error IS NULL) <> (duration_ns IS NULL)));
            INSERT INTO runs (started_at, nsprof_version) VALUES ('2026-12-01', '0.1');
            INSERT INTO measurements (run_id, fingerprint, config_id, config_json, gpu, backend, mode, clock_control,
                cache_control, tool_version, kernel, rep, duration_ns)
                VALUES (1, 'f', 0, '{}', 'g', 'ncu', 'graph', 'base', 'all', 'v', 'k', 0, 5.0);
        """)
    group = {
        "fingerprint": "f",
        "gpu": "g",
        "backend": "ncu",
        "mode": "graph",
        "clock_control": "base",
        "cache_control": "all",
        "tool_version": "v",
    }
    with ResultStore(path) as store:
        old = store.frame()
        assert (
            old["shape_json"].tolist() == [""]
            and old["shape"].isna().all()
            and old["duration_ns"].tolist() == [5.0]
        )
        assert store.missing(group, [0, 1]) == [1]  # the old row is config 0 without a shape
        assert store.missing(group, [0, 1], shape_json='{"M":1}') == [0, 1]  # no shape has any yet
        run = store.start_run(target="t.py:space")
        store.add(
            run,
            MeasurementKey(**group, config_id=0, config_json="{}", shape_json='{"M":1}', shape=0),
            [{"kernel": "k", "rep": 0, "duration_ns": 7.0, "shape": 0}],
        )
        assert store.missing(group, [0, 1], shape_json='{"M":1}') == [1]
        with pytest.raises(ValueError, match="shape=1 but the key says 0"):
            store.add(
                run,
                MeasurementKey(**group, config_id=1, config_json="{}", shape_json='{"M":1}', shape=0),
                [{"kernel": "k", "rep": 0, "duration_ns": 7.0, "shape": 1}],
            )


def test_a_plain_space_in_the_same_file_tunes_as_before(shaped, tmp_path):
    from nsprof.tune import tune

    result = tune(shaped + ":plain", _settings(tmp_path, feed_back=False))
    assert not result.shaped and [s.shape for s in result.shapes] == [None]
    assert list(result.ranking.table["config_id"]) == [0, 1]  # the stand-in's 1000 + config id


# -- the integrations, with their tuners replaced (the GPU test: tests/test_gpu_shapes.py) ------------


def test_triton_space_with_shapes_builds_and_feeds_back_each_shape_on_its_own_inputs(monkeypatch):
    from test_integrations import _Autotuner, _Config

    from nsprof.integrations import triton as triton_hook

    tuned = _Autotuner([_Config({"BLOCK": 64}), _Config({"BLOCK": 128})])
    tuned.arg_names, tuned.keys = ["x", "M", "N"], ["M", "N"]

    class Tensor:
        dtype = "torch.float16"

    def make_inputs(shape):
        return (Tensor(), shape["M"], 4096), {}

    shapes = [{"M": 1}, {"M": 16}]
    space = triton_hook.autotune_space(tuned, make_inputs, (1,), shapes=shapes)
    assert space.shapes == shapes and space.n_shapes == 2
    space.build_at(1, 1)()
    assert [launch[1][1:] for launch in tuned.fn.launches] == [(16, 4096)] * 2  # the shape's inputs, config 1
    assert tuned.fn.launches[0][2]["BLOCK"] == 128
    fed = []

    def feed_back(autotuned, inputs, grid, latencies_ms):
        fed.append((inputs()[0][1], dict(latencies_ms)))
        return f"best {min(latencies_ms, key=latencies_ms.get)}"

    monkeypatch.setattr(triton_hook, "feed_back", feed_back)
    lines = space.tuner.feed_back_shapes({0: {0: 0.2, 1: 0.1}, 1: {0: 0.1, 1: 0.3}})
    assert fed == [(1, {0: 0.2, 1: 0.1}), (16, {0: 0.1, 1: 0.3})]  # each shape's ranking, on its own inputs
    # Triton's own key for each shape's call: the key=[...] values, then the tensors' dtypes
    assert lines == {
        0: "best 1, key (1, 4096, 'torch.float16')",
        1: "best 0, key (16, 4096, 'torch.float16')",
    }
    assert not space.tuner.feed_back_shapes_apart

    def fails_at_16(autotuned, inputs, grid, latencies_ms):
        if inputs()[0][1] == 16:
            raise RuntimeError("pruned away")
        return "stored"

    monkeypatch.setattr(triton_hook, "feed_back", fails_at_16)
    lines = space.tuner.feed_back_shapes({0: {0: 0.2, 1: 0.1}, 1: {0: 0.1, 1: 0.3}})
    assert lines == {0: "stored, key (1, 4096, 'torch.float16')", 1: {"error": "RuntimeError: pruned away"}}


def test_tilelang_space_over_call_argument_tuples(monkeypatch):
    from nsprof.errors import NsprofError
    from nsprof.integrations import tilelang as tilelang_hook

    compiled = []

    class Kernel:
        def __init__(self, args):
            self.args = args

        def get_profiler(self):
            return type("P", (), {"_get_inputs": lambda self, with_output: ["a", "b"]})()

        def __call__(self, *inputs):
            compiled.append(("run", self.args))

    class JitImpl:
        func = type("F", (), {"__name__": "matmul"})

        def compile(self, *args, **kwargs):
            compiled.append(("compile", args, kwargs))
            return Kernel(args)

    class Autotuned:
        configs = [{"block_N": 32}, {"block_N": 64}]
        jit_impl = JitImpl()

    shapes = [(1, 4096, 4096), (16, 4096, 4096)]
    space = tilelang_hook.autotune_shapes(Autotuned(), shapes)
    assert space.shapes == shapes and space.configs == Autotuned.configs
    space.build_at(1, 1)()
    assert compiled == [("compile", (16, 4096, 4096), {"block_N": 64}), ("run", (16, 4096, 4096))]
    fed = []
    monkeypatch.setattr(
        tilelang_hook,
        "feed_back",
        lambda autotuned, args, latencies_ms, kwargs: (
            fed.append((args, dict(latencies_ms))) or {"block_N": 32}
        ),
    )
    lines = space.tuner.feed_back_shapes({1: {0: 0.1, 1: 0.2}})
    assert fed == [((16, 4096, 4096), {0: 0.1, 1: 0.2})]  # that shape's call arguments: TileLang's key
    assert lines == {1: "{'block_N': 32} for call (16, 4096, 4096)"}
    assert space.tuner.feed_back_shapes_apart  # tune feeds each shape from a fresh process

    class PerShape(Autotuned):
        @staticmethod
        def configs(M, N, K):
            return [{"block_N": 32 if M == 1 else 64}]

    with pytest.raises(NsprofError, match="configs at"):
        tilelang_hook.autotune_shapes(PerShape(), shapes)


def test_a_tuner_fed_one_shape_at_a_time_gets_each_from_a_fresh_process(shaped, tmp_path):
    """A hook with feed_back_shapes_apart (TileLang's): one child process per shape."""
    from nsprof.tune import tune

    path = Path(shaped)
    path.write_text(
        path.read_text()
        .replace(
            'name = "the stand-in tuner"', 'name = "the stand-in tuner"\n    feed_back_shapes_apart = True'
        )
        .replace('with open(os.environ["SHAPES_FED"], "w")', 'with open(os.environ["SHAPES_FED"], "a")')
        .replace("json.dump(written, handle)", "handle.write(json.dumps(written) + '\\n')")
    )
    result = tune(shaped + ":space", _settings(tmp_path))
    calls = [json.loads(line) for line in (tmp_path / "fed.json").read_text().splitlines()]
    assert [len(call) for call in calls] == [1, 1, 1]  # one shape per call
    assert len({entry["pid"] for call in calls for entry in call.values()}) == 3  # three fresh processes
    assert [next(iter(call.values()))["best"] for call in calls] == [WINNERS[0], WINNERS[1], WINNERS[2]]
    assert result.errors == []


@pytest.mark.parametrize("apart", [True, False], ids=["a process per shape", "one process"])
def test_a_feed_back_that_fails_at_one_shape_names_it_and_the_other_shapes_are_fed_back(
    shaped, tmp_path, apart
):
    """Shape 1's key cannot be written (a Triton prune that drops nsprof's best there, a cache folder
    gone): shapes 0 and 2 are still fed back and said so, and the error names shape 1 alone."""
    from nsprof.tune import tune

    path = Path(shaped)
    failing = (
        "from nsprof.tuner import each_shape\n"
        "def _one(shape, latencies):\n"
        "    if shape == 1:\n"
        "        raise RuntimeError('no cache folder for M=16')\n"
        "    with open(os.environ['SHAPES_FED'], 'a') as handle:\n"
        "        handle.write(json.dumps({'shape': shape, 'pid': os.getpid()}) + '\\n')\n"
        "    return f'config {min(latencies, key=latencies.get)} for M={SHAPES[shape][\"M\"]}'\n"
        "Hook.feed_back_shapes = lambda self, by: each_shape(by, _one)\n"
        f"Hook.feed_back_shapes_apart = {apart}\n"
    )
    path.write_text(path.read_text().replace("\nconfigs = [", "\n" + failing + "\nconfigs = [", 1))
    result = tune(shaped + ":space", _settings(tmp_path))
    fed = [json.loads(line) for line in (tmp_path / "fed.json").read_text().splitlines()]
    assert [entry["shape"] for entry in fed] == [0, 2]  # shape 2 too, after shape 1 failed
    assert len(result.errors) == 1 and "shape 1" in result.errors[0], result.errors
    assert "no cache folder for M=16" in result.errors[0]
    handed = {s.shape: [n for n in s.ranking.notes if n.startswith("handed to")] for s in result.shapes}
    assert [len(handed[s]) for s in (0, 1, 2)] == [1, 0, 1], handed
    assert f"config {WINNERS[2]} for M=128" in handed[2][0]


# Shapes read from a file beside the target (so not in its source, which is fingerprinted): the same
# shapes reordered, fewer, or one more in front, between a tune and its resume. The configs stay as they
# were (the stand-in measures shape index s as "ns_shapes"[s]): a stored shape must be ranked by its
# stored rows wherever it now stands, and a new shape by its own fresh rows alone.
NS_BY_M = {1: NS[0], 16: NS[1], 128: NS[2]}
SHAPES_FROM_FILE = f"""
import json, os
import nsprof.space

SHAPES = json.loads(open(os.environ["SHAPES_FILE"]).read())
configs = [{{"i": c, "ns_shapes": [{NS!r}[s][c] for s in range(3)] + [0.0]}} for c in range(3)]
space = nsprof.space.Space(configs=configs, shapes=SHAPES, build=lambda c, s: (lambda: None), device="cpu")
"""


@pytest.mark.parametrize(
    "later", [[128, 1, 16], [16], [8, 1, 16, 128]], ids=["reordered", "fewer", "one-in-front"]
)
def test_a_resume_ranks_each_stored_shape_as_that_shape_wherever_it_now_stands(
    shaped, tmp_path, monkeypatch, later
):
    from nsprof.tune import tune

    target = tmp_path / "from_file.py"
    target.write_text(SHAPES_FROM_FILE)
    shapes_file = tmp_path / "shapes.json"
    monkeypatch.setenv("SHAPES_FILE", str(shapes_file))
    shapes_file.write_text(json.dumps([{"M": m} for m in (1, 16, 128)]))
    tune(f"{target}:space", _settings(tmp_path, feed_back=False))
    shapes_file.write_text(json.dumps([{"M": m} for m in later]))
    resumed = tune(f"{target}:space", _settings(tmp_path, feed_back=False, resume=True))
    stored = sum(m in NS_BY_M for m in later) * 3
    note = f"resumed: {stored} of {3 * len(later)} (shape, config) pairs came from the results store"
    assert note in resumed.ranking.notes
    expected = {**NS_BY_M, 8: NS[0]}  # M=8, new at index 0, measured fresh: the stand-in's index-0 values
    assert len(resumed.shapes) == len(later)
    for r in resumed.shapes:
        m = later[r.shape]
        assert list(r.ranking.table["value_ns"]) == sorted(expected[m]), (m, r.ranking.table)
        assert r.ranking.best_config_id == min(range(3), key=lambda c: expected[m][c])
