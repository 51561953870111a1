"""Ranking for `nsprof tune`, on the real per-config summaries of the seed space (H200 fixtures)."""

from __future__ import annotations

import csv
import statistics

import pandas as pd
import pytest
from conftest import FIXTURES

from nsprof.analysis.ranking import rank
from nsprof.errors import NsprofError
from nsprof.profile import config_summary
from nsprof.render.tune_tables import format_ranked
from nsprof.schema import make_frame
from nsprof.tune import Ranking, TuneSettings


def summary(name, mode):
    frame = make_frame(pd.read_csv(FIXTURES / name).to_dict("list"))
    table = config_summary(frame)
    return table[table["mode"].isna() | (table["mode"] == mode)]


def independent_order(name, mode):
    reps = {}
    with open(FIXTURES / name, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["error"] or row["mode"] != mode:
                continue
            key = (int(row["config_id"]), int(row["rep"]))
            reps[key] = reps.get(key, 0.0) + float(row["duration_ns"])
    medians = {}
    for (cfg, _), value in reps.items():
        medians.setdefault(cfg, []).append(value)
    medians = {cfg: statistics.median(v) for cfg, v in medians.items()}
    return sorted(medians, key=lambda c: (medians[c], c)), medians


@pytest.mark.parametrize("name", ["profile_ncu.csv", "profile_nsys.csv"])
def test_rank_orders_configs_by_median_and_puts_failures_last(name):
    table = rank(summary(name, "graph"), "median")
    order, medians = independent_order(name, "graph")
    measured = table[table["error"].isna()]
    assert measured["config_id"].tolist() == order
    assert measured["rank"].tolist() == list(range(1, len(order) + 1))
    best = medians[order[0]]
    assert measured["vs_best"].tolist() == pytest.approx([medians[c] / best - 1 for c in order])
    failed = table[table["error"].notna()]
    assert sorted(failed["config_id"]) == list(range(8)) + [31]
    assert failed["rank"].isna().all()


def test_rank_by_min():
    table = rank(summary("profile_ncu.csv", "direct"), "min")
    measured = table[table["error"].isna()]
    assert list(measured["value_ns"]) == sorted(measured["min_ns"])


def test_format_names_best_and_label():
    table = rank(summary("profile_nsys.csv", "graph"), "median")
    table.insert(2, "config", ["c"] * len(table))
    configs = [{"id": i} for i in range(32)]
    result = Ranking(table, "nsys", "nsys", "nsys, mode graph")
    text = format_ranked(result, configs)
    order, _ = independent_order("profile_nsys.csv", "graph")
    assert text.splitlines()[0] == "ranked by nsys, mode graph"
    assert f"best: config {order[0]} (id={order[0]})" in text
    assert configs[result.best_config_id] == {"id": order[0]}


@pytest.mark.parametrize(
    "kwargs",
    [{"backend": "perf"}, {"mode": "both"}, {"stat": "mean"}, {"prescreen": "ncu"}, {"prescreen_top": 0}],
)
def test_settings_are_validated(kwargs):
    with pytest.raises(NsprofError):
        TuneSettings(**kwargs)


def fixture_rows(config_ids, mode="graph"):
    # taken before failures had kinds: its failures are configs that did not compile or build
    frame = make_frame(pd.read_csv(FIXTURES / "profile_ncu.csv").to_dict("list"))
    frame.loc[frame["error"].notna(), "failure_kind"] = "compile"
    keep = frame["config_id"].isin(config_ids) & (frame["mode"].isna() | (frame["mode"] == mode))
    return frame[keep].reset_index(drop=True)


@pytest.fixture
def gemm_target():
    return str(FIXTURES.parents[1] / "examples" / "gemm_tilelang.py") + ":space"


def test_tune_through_the_store_resumes_only_missing_configs(tmp_path, monkeypatch, gemm_target):
    from nsprof import tune as tune_module

    measured_calls = []

    def fake_measure(target, n, backend, settings, config_ids, on_progress, **unused):
        measured_calls.append(list(config_ids))
        return fixture_rows(config_ids)

    monkeypatch.setattr("nsprof.tune.measure.measure_rows", fake_measure)
    monkeypatch.setattr("nsprof.host.tools.find_ncu", lambda required=True: type("T", (), {"path": "ncu"})())
    monkeypatch.setattr("nsprof.host.tools.tool_version", lambda path: "Version 2025.3.1.0")
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    store = tmp_path / "results.sqlite"
    # budget_s=0: the first pass and resume only (adaptive reps: tests/test_adaptive.py)
    settings = TuneSettings(backend="ncu", mode="graph", store=store, budget_s=0)
    first = tune_module.tune(gemm_target, settings, config_ids=list(range(0, 20)))
    assert measured_calls == [list(range(0, 20))]
    resumed = tune_module.tune(
        gemm_target, TuneSettings(backend="ncu", mode="graph", store=store, resume=True, budget_s=0)
    )
    assert measured_calls[1] == list(range(20, 32))  # only what the store lacked
    assert "resumed: 20 of 32 configs came from the results store" in resumed.ranking.notes
    order, medians = independent_order("profile_ncu.csv", "graph")
    measured = resumed.ranking.table[resumed.ranking.table["error"].isna()]
    assert measured["config_id"].tolist() == order
    assert measured["value_ns"].tolist() == pytest.approx([medians[c] for c in order])
    failed = resumed.ranking.table[resumed.ranking.table["error"].notna()]
    assert sorted(failed["config_id"]) == list(range(8)) + [31]
    assert first.ranking.best_config_id == min((c for c in order if c < 20), key=lambda c: (medians[c], c))
    from nsprof.store import ResultStore

    with ResultStore(store) as results:
        runs = results.runs()
    assert list(runs["status"]) == ["ok", "ok"] and set(runs["backend"]) == {"ncu"}


def _tuner_space(pick_id, calls, fail_feed_back=False):
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    def tuner_pick():
        calls.append("pick")
        return {
            "tuner": "Triton's autotuner",
            "timer": "Triton's do_bench (CUDA events)",
            "config_id": pick_id,
            "config": {"i": pick_id},
            "timings_ms": {},
        }

    def feed_back(latencies_ms):
        calls.append(("feed_back", dict(latencies_ms)))
        if fail_feed_back:
            raise RuntimeError("cache directory is read-only")
        return "stored"

    configs = [{"i": i} for i in range(32)]

    class Hook(TunerHook):
        name = "Triton's autotuner"
        can_pick = True

        def pick(self):
            return tuner_pick()

        def feed_back(self, latencies_ms):
            return feed_back(latencies_ms)

    return Space(name="tuned", configs=configs, build=lambda config: lambda: None, tuner=Hook())


@pytest.mark.parametrize("fail_feed_back", [False, True])
def test_tune_reports_the_tuners_own_pick_then_feeds_the_ranking_back(monkeypatch, fail_feed_back):
    from nsprof import tune as tune_module

    order, medians = independent_order("profile_ncu.csv", "graph")
    pick = order[2]  # the tuner's own timer chose the third-best config
    calls = []
    space = _tuner_space(pick, calls, fail_feed_back)
    monkeypatch.setattr("nsprof.space.load_target", lambda target: space)

    # The pick and the feed-back run in a child process (tested below with a real one); here, in this process.
    class InProcess:
        def __init__(self, target, name):
            self.name = name

        def call(self, args, settings, n_configs):
            return getattr(space.tuner, self.name)(*args)

        def close(self):
            pass

    monkeypatch.setattr("nsprof.feedback.TunerChild", InProcess)
    monkeypatch.setattr(
        "nsprof.tune.measure.measure_rows",
        lambda target, n, truth, settings, ids, progress, **unused: fixture_rows(ids),
    )
    result = tune_module.tune("tuned.py:space", TuneSettings(backend="ncu", mode="graph", use_store=False))
    assert calls[0] == "pick"  # measured before the feed-back makes the tuner pick nsprof's winner
    fed = calls[1][1]
    assert sorted(fed) == sorted(order)
    assert fed == pytest.approx({c: medians[c] / 1e6 for c in order})  # ms
    expected_pct = (medians[pick] / medians[order[0]] - 1) * 100
    assert (
        f"picks config {pick} (i={pick}): ground truth ranks it #3, {expected_pct:+.1f}% vs the best"
        in " ".join(result.ranking.notes)
    )
    assert result.shapes[0].tuner_pick["config_id"] == pick
    if fail_feed_back:
        assert result.errors == [
            "feeding the ranking back to Triton's autotuner failed: "
            "RuntimeError: cache directory is read-only"
        ]
    else:
        assert result.errors == []
        # The note says which condition's winner was stored (the one truth here: ncu's).
        assert (
            "handed to Triton's autotuner for deploy condition ncu (cold L2 (caches flushed), clocks locked to "
            "base, in a CUDA graph): stored"
        ) in result.ranking.notes


PICK_TARGET = """
import os, sys, time
from nsprof.space import Space
from nsprof.tuner import TunerHook

class Hook(TunerHook):
    can_pick = True

    def pick(self):
        print("tuner chatter on stdout")
        kind = os.environ["PICK_KIND"]
        if kind == "hang":
            time.sleep(3600)
        if kind == "crash":
            sys.stderr.write("CUDA error: an illegal memory access was encountered\\n")
            os._exit(1)
        return {"tuner": "t", "timer": "own", "config_id": 1, "config": {"i": 1}, "timings_ms": {"0": 2.0, "1": 1.0}}

    def feed_back(self, latencies_ms):
        raise AssertionError("not called")

space = Space(name="p", configs=[{"i": 0}, {"i": 1}], build=lambda c: (lambda: None), device="cpu", tuner=Hook())
"""


@pytest.mark.parametrize("kind", ["ok", "hang", "crash"])
def test_the_tuners_own_pick_runs_in_a_child_process(tmp_path, monkeypatch, kind):
    from nsprof.feedback import tuner_in_child

    target = tmp_path / "pick_target.py"
    target.write_text(PICK_TARGET)
    monkeypatch.setenv("PICK_KIND", kind)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    settings = TuneSettings(backend="ncu", timeout_s=1.5)
    if kind == "ok":
        pick = tuner_in_child(f"{target}:space", "pick", [], settings, 2)
        assert pick == {
            "tuner": "t",
            "timer": "own",
            "config_id": 1,
            "config": {"i": 1},
            "timings_ms": {"0": 2.0, "1": 1.0},
        }
        return
    with pytest.raises(NsprofError) as info:
        tuner_in_child(f"{target}:space", "pick", [], settings, 2)
    if kind == "hang":
        assert str(info.value) == "it ran past 3 s (--timeout times the number of configs)"
    else:
        assert str(info.value) == (
            "its process exited with status 1: CUDA error: an illegal memory access was encountered"
        )


FEED_TARGET = """
import json
from nsprof.space import Space
from nsprof.tuner import TunerHook

def feed_back(latencies_ms):
    print("tuner chatter on stdout")
    best = min(latencies_ms, key=latencies_ms.get)
    return {"best": best, "keys": sorted(latencies_ms), "types": sorted({type(k).__name__ for k in latencies_ms})}

class Hook(TunerHook):
    def feed_back(self, latencies_ms):
        return json.dumps(feed_back(latencies_ms))

configs = [{"i": 0}, {"i": 1}, {"i": 2}]
space = Space(name="f", configs=configs, build=lambda c: (lambda: None), device="cpu", tuner=Hook())
"""


def test_the_feed_back_runs_in_a_fresh_child_process(tmp_path):
    import json

    from nsprof.feedback import tuner_in_child

    target = tmp_path / "feed_target.py"
    target.write_text(FEED_TARGET)
    stored = tuner_in_child(
        f"{target}:space", "feed_back", [{0: 0.003, 2: 0.001}], TuneSettings(backend="ncu"), 3
    )
    assert json.loads(stored) == {"best": 2, "keys": [0, 2], "types": ["int"]}


def test_measure_rows_measures_under_the_backend_it_is_given(monkeypatch):
    """measure_rows(…, truth, settings) with a ground truth other than settings.backend runs that
    ground truth, and key_labels labels it so (as the old code, which built its settings from it)."""
    import nsprof.profile as profile_module
    from nsprof.settings import Truth, TuneSettings
    from nsprof.tune.measure import key_labels, measure_rows

    seen = []

    def fake(target, settings, **kwargs):
        seen.append(settings.backend)
        from nsprof.measure import Measured
        from nsprof.schema import make_frame

        return Measured(frame=make_frame([]), failures={}, device=None, reports=[], work_dir=None, wall_s=0.0)

    monkeypatch.setattr(profile_module, "profile_result", fake)
    settings = TuneSettings(backend="ncu", use_store=False)
    measure_rows("t.py:space", 1, Truth("nsys"), settings, [0], None)
    assert seen == ["nsys"]
    assert key_labels(Truth("nsys"), settings)["clock_control"] == "none"
    assert key_labels(Truth("ncu"), settings)["clock_control"] == "base"


def test_a_space_with_tuner_callables_in_meta_is_refused_in_one_line(tmp_path):
    """A Space takes its tuner as a TunerHook (tuner=...) only: callables in meta= would never be
    called, so such a Space is refused where it is read, not measured with its feed-back lost."""
    from nsprof.errors import TargetError
    from nsprof.space import load_target

    target = tmp_path / "meta_target.py"
    target.write_text(
        "from nsprof.space import Space\n"
        "space = Space(name='m', configs=[{'i': 0}], build=lambda c: (lambda: None), device='cpu',\n"
        "              meta={'feed_back': lambda latencies_ms: 'stored'})\n"
    )
    with pytest.raises(TargetError) as info:
        load_target(f"{target}:space")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"importing {target} failed: TypeError: ")
    assert "unexpected keyword argument 'meta'" in str(info.value)


def test_the_tuner_hook_calls_are_pick_and_feed_back_only():
    from nsprof.feedback import tuner_in_child

    with pytest.raises(ValueError, match="one of"):
        tuner_in_child("t.py:space", "build", [], TuneSettings(backend="ncu"), 1)
