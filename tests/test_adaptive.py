"""Adaptive reps for the contenders only.

The pure parts (who contends, when to stop, how many rounds a session does, which rows are kept)
on recorded reps; then real `tune` through a stand-in driver (tests/standins.py) whose durations
come from a known distribution per config (normal, seeded per config and rep), in real worker
processes. The stand-in target's launch appends "pid config" to a log, so the order of launches
(warm-ups and reps) in every worker process can be read back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))


from nsprof.analysis import adaptive as rules  # noqa: E402
from nsprof.analysis.adaptive import Cost, Plan  # noqa: E402
from nsprof.analysis.confidence import Decision  # noqa: E402
from nsprof.schema import make_frame  # noqa: E402
from nsprof.settings import TuneSettings  # noqa: E402

# -- the pure rules ------------------------------------------------------------------------


def _tie(*members):
    return Decision("tie", members[0], list(members))


def test_stop_reason_names_why_the_reps_stop():
    assert rules.stop_reason(Decision("winner", 3, [3]), {3: 5}, 20) == rules.SEPARATED
    assert rules.stop_reason(Decision("untested", 3, [3]), {3: 1}, 20) == rules.UNTESTED
    assert rules.stop_reason(_tie(1, 2), {1: 20, 2: 20}, 20) == rules.MAX_REPS
    assert rules.stop_reason(_tie(1, 2), {1: 20, 2: 5}, 20) is None  # one contender can still gain reps
    assert rules.session_configs(_tie(2, 1, 4), {1: 20, 2: 5, 4: 6}, 20) == [
        2,
        4,
    ]  # rank order, below the cap


def test_a_session_does_every_rep_left_when_they_cost_less_than_a_start_up():
    cost = Cost(startup_s=10.0, visit_s=0.1)  # 15 rounds x 3 configs x 0.1 s = 4.5 s < 10 s
    plan = rules.plan_session([4, 1, 7], {4: 5, 1: 5, 7: 5}, {4: 5, 1: 5, 7: 5}, 20, 60.0, cost)
    assert plan.rounds == 15 and plan.configs == (4, 1, 7)
    assert plan.expected_s == pytest.approx(10.0 + 4.5)
    assert plan.order()[:4] == [(4, 5), (1, 5), (7, 5), (4, 6)]  # A B C A ..., reps continue at 5


def test_a_dear_session_doubles_the_reps_and_the_budget_caps_it():
    cost = Cost(startup_s=10.0, visit_s=1.0)  # 15 rounds x 2 configs = 30 s > 10 s: double instead
    plan = rules.plan_session([0, 1], {0: 5, 1: 5}, {0: 5, 1: 5}, 20, 100.0, cost)
    assert plan.rounds == 5
    capped = rules.plan_session([0, 1], {0: 5, 1: 5}, {0: 5, 1: 5}, 20, 16.5, cost)
    assert capped.rounds == 3  # (16.5 - 10) / 2 s a round
    assert rules.plan_session([0, 1], {0: 5, 1: 5}, {0: 5, 1: 5}, 20, 11.9, cost) is None  # no whole round
    assert (
        rules.plan_session([0, 1], {0: 5, 1: 5}, {0: 5, 1: 5}, 20, 5.0, cost) is None
    )  # not even a start-up
    # rep numbers come from next_rep (one past the highest held), not from the count of reps
    assert rules.plan_session([0, 1], {0: 5, 1: 5}, {0: 9, 1: 5}, 20, 100.0, cost).first_rep == {0: 9, 1: 5}
    with pytest.raises(ValueError, match="max_reps"):
        rules.plan_session([0, 1], {0: 20, 1: 5}, {0: 20, 1: 5}, 20, 100.0, cost)


def test_the_cost_model_comes_from_when_the_first_pass_configs_finished():
    # 4 configs done 1 s apart after a 9 s start-up, 1 s of tear-down: wall 13 s
    cost = rules.first_pass_cost(
        13.0, [(9.0, True), (10.0, True), (11.0, True), (12.0, True)], reps=5, warmup=3
    )
    assert cost.measured and cost.visit_s == pytest.approx(4 / 8)  # (warmup + 1) of (warmup + reps) launches
    assert cost.startup_s == pytest.approx(13.0 - 4 * 1.0)
    unknown = rules.first_pass_cost(13.0, [(9.0, True)], reps=5, warmup=3)  # one config: no gap to measure
    assert not unknown.measured and unknown.startup_s == rules.STARTUP_S
    after = rules.updated_cost(cost, wall_s=19.0, visits=20)
    assert after.startup_s == cost.startup_s and after.visit_s == pytest.approx((19.0 - 9.0) / 20)


def test_sessions_in_workers_started_ahead_cost_the_start_up_less_what_was_done_ahead():
    # a 9 s start-up of which 6.5 s the worker's import, 0.6 and 0.4 s the profiler's and Python's start:
    # what is left is a session's start-up (the first pass's compile waits, summed over its configs, stay)
    cost = rules.Cost(9.0, 0.1)
    phases = {
        "tool_start": 0.6,
        "worker_start": 0.4,
        "target_import": 6.5,
        "compile_wait": 0.5,
        "measure": 3.0,
    }
    ahead = rules.started_ahead(cost, phases)
    assert ahead.startup_s == pytest.approx(1.5) and ahead.visit_s == cost.visit_s
    assert rules.started_ahead(cost, None) == cost  # no phases recorded (a stored first pass): as it was
    # a first pass that itself ran in such a worker compiled all its points before its first window
    # (1.2 s here); a session compiles only its contenders: that wait is no session's start-up
    compiled = rules.started_ahead(rules.Cost(4.0, 0.1), {"target_import": 0.0, "compile_wait": 1.2}, True)
    assert compiled.startup_s == pytest.approx(2.8)
    assert rules.started_ahead(rules.Cost(4.0, 0.1), {"compile_wait": 1.2}).startup_s == 4.0
    assert rules.started_ahead(rules.Cost(2.0, 0.1), phases).startup_s == 0.0  # never below nothing
    # planned as such: the reps left cost more than this start-up, so the session doubles the reps
    # rather than doing them all (with the first pass's 9 s start-up it would do them all)
    points, reps, nexts = [0, 1], {0: 5, 1: 5}, {0: 5, 1: 5}
    plan = rules.plan_session(points, reps, nexts, 40, 100.0, ahead)
    whole = rules.plan_session(points, reps, nexts, 40, 100.0, cost)
    assert plan.rounds == 5 and whole.rounds == 35


def test_a_failed_config_s_time_is_not_a_visit_s_cost():
    # On the H200, faulty_gpu's [ok, illegal address, hang (20 s timeout), out of memory, ok] under ncu
    # made a round over 2 contenders cost 45 s, so the adaptive session never started: the gaps
    # around a failed config (its timeout, the worker's restart) were taken for a config's work.
    finished = [(9.0, True), (9.5, False), (30.0, False), (40.0, False), (50.0, True)]
    cost = rules.first_pass_cost(51.0, finished, reps=5, warmup=3)
    assert not cost.measured and cost.visit_s == rules.VISIT_S  # no two configs in a row measured
    # Only the gaps between two measured configs count: 1 s each here, whatever the faults cost.
    finished = [(9.0, True), (10.0, True), (30.0, False), (40.0, True), (41.0, True), (42.0, True)]
    cost = rules.first_pass_cost(43.0, finished, reps=5, warmup=3)
    assert cost.measured and cost.visit_s == pytest.approx(1.0 * 4 / 8)
    assert cost.startup_s == pytest.approx((9.0 - 1.0) + (43.0 - 42.0))  # before the first, after the last


def _rows(reps_by_config: dict[int, list[float]], first: dict[int, int] | None = None):
    first = first or {}
    return make_frame(
        [
            {
                "source": "x",
                "config_id": c,
                "mode": "direct",
                "rep": first.get(c, 0) + i,
                "kernel": "k",
                "duration_ns": v,
            }
            for c, values in reps_by_config.items()
            for i, v in enumerate(values)
        ]
    )


def test_only_the_planned_configs_and_reps_are_kept():
    from nsprof.adaptive import next_reps, planned_rows, rep_counts

    plan = Plan((0, 1), 2, {0: 5, 1: 7}, 0.0)
    frame = pd.concat(
        [
            _rows({0: [1.0, 2.0], 1: [3.0, 4.0]}, {0: 5, 1: 7}),
            _rows({0: [9.0]}, {0: 0}),  # a rep 0 of config 0: held already, not planned
            _rows({2: [5.0, 6.0]}, {2: 5}),  # another config's rows
            make_frame([{"source": "x", "config_id": 1, "error": "boom"}]),
        ],
        ignore_index=True,
    )
    kept = planned_rows(frame, plan)
    assert sorted(zip(kept["config_id"], kept["rep"])) == [(0, 5), (0, 6), (1, 7), (1, 8)]
    rows = _rows({0: [1.0] * 5, 3: [2.0] * 3}, {3: 4})
    assert rep_counts(rows) == {0: 5, 3: 3} and next_reps(rows) == {0: 5, 3: 7}


def test_the_store_keeps_a_configs_first_pass_and_the_adaptive_sessions_after_it():
    from nsprof.tune.stored import select_stored

    def stored(run_id, config_id, reps):
        return [
            {
                "run_id": run_id,
                "config_id": config_id,
                "config_json": f"c{config_id}",
                "mode": "graph",
                "rep": r,
                "duration_ns": 1.0,
                "error": None,
            }
            for r in reps
        ]

    frame = pd.DataFrame(
        stored(1, 0, range(5))
        + stored(2, 0, range(5, 20))  # pass, then its adaptive session
        + stored(3, 0, range(5))  # a new first pass: the old adaptive reps no longer count
        + stored(4, 0, range(5, 10))
        + stored(1, 1, range(5))
        + stored(2, 1, range(5, 20))
        + stored(5, 2, range(5))
        + stored(6, 2, range(5, 10))
        + stored(7, 2, range(5, 10))
    )
    kept = select_stored(frame, {0: "c0", 1: "c1", 2: "c2"}, adaptive_runs={2, 4, 6, 7})
    runs = kept.groupby("config_id")["run_id"].agg(lambda r: sorted(set(r))).to_dict()
    assert runs == {0: [3, 4], 1: [1, 2], 2: [5, 7]}  # config 2's reps 5-9 twice: the later run's
    assert kept.groupby("config_id").size().to_dict() == {0: 10, 1: 20, 2: 10}


def test_settings_check_the_adaptive_options():
    from nsprof.errors import NsprofError

    with pytest.raises(NsprofError, match="--max-reps .3. must be at least --reps .5."):
        TuneSettings(backend="graph", max_reps=3)
    with pytest.raises(NsprofError, match="--budget-s"):
        TuneSettings(backend="graph", budget_s=-1)
    assert TuneSettings(backend="graph", reps=6).adaptive_max_reps == 24


# -- real tune through a stand-in with known noise ------------------------------------------


def test_a_tie_inside_the_equivalence_margin_stops_at_once():
    import pandas as pd

    from nsprof.analysis.confidence import decide

    # three configs tied with the best; their intervals' farthest end is 0.8% above the best's value
    ranked = pd.DataFrame(
        {
            "rank": [1, 2, 3, 4],
            "config_id": [4, 2, 7, 1],
            "value_ns": [1000.0, 1003.0, 1005.0, 1100.0],
            "ci_low_ns": [996.0, 999.0, 1001.0, 1090.0],
            "ci_high_ns": [1004.0, 1006.0, 1008.0, 1110.0],
            "tied_with_best": [True, True, True, False],
        }
    )
    decision = decide(ranked)
    assert decision.kind == "tie" and decision.members == [4, 2, 7]
    assert decision.tie_spread == pytest.approx(0.008)
    reps = {4: 5, 2: 5, 7: 5}
    assert rules.stop_reason(decision, reps, 20, equivalence=0.01) == rules.EQUIVALENT
    assert rules.stop_reason(decision, reps, 20, equivalence=0.005) is None  # wider than the margin
    assert rules.stop_reason(decision, reps, 20, equivalence=0.0) is None  # off


# Configs 0 and 1 are 4% apart with 3% noise: 5 reps cannot tell them apart (their [min, max]
# overlap), 20 can. Config 2 is far behind and never a contender.
SEPARABLE = [
    {"id": 0, "ns": 1000.0, "ns_sigma": 0.03},
    {"id": 1, "ns": 1040.0, "ns_sigma": 0.03},
    {"id": 2, "ns": 3000.0, "ns_sigma": 0.01},
]
# Three configs drawn from one distribution: indistinguishable however many reps.
IDENTICAL = [{"id": i, "ns": 1000.0, "ns_sigma": 0.03, "seed": 7} for i in range(3)]
# Three configs 0.1% apart with 0.1% noise: a memory-bound kernel's configs, equivalent in practice.
EQUIVALENT = [{"id": i, "ns": 1000.0 + i, "ns_sigma": 0.001, "seed": 3} for i in range(3)]


def _settings(tmp_path, **kwargs):
    return TuneSettings(
        **{
            "backend": "noisy",
            "mode": "direct",
            "reps": 5,
            "timeout_s": 30,
            "use_store": False,
            "feed_back": False,
            "tuner_pick": False,
            "work_dir": tmp_path / "work",
            **kwargs,
        }
    )


def _sessions(log: Path) -> list[list[int]]:
    """The launches of each worker process, in order: one list of config ids per process."""
    by_pid: dict[str, list[int]] = {}
    for line in log.read_text().splitlines():
        pid, config = line.split()
        by_pid.setdefault(pid, []).append(int(config))
    return list(by_pid.values())


def _runs(launches: list[int]) -> list[tuple[int, int]]:
    """(config, how many launches in a row) of a launch sequence."""
    out: list[tuple[int, int]] = []
    for c in launches:
        if out and out[-1][0] == c:
            out[-1] = (c, out[-1][1] + 1)
        else:
            out.append((c, 1))
    return out


def _first_pass_ties(configs) -> bool:
    """Whether 5 reps of the stand-in's draws leave configs 0 and 1 overlapping ([min, max])."""
    import random

    def draws(c):
        return [
            configs[c]["ns"]
            * (
                1
                + configs[c]["ns_sigma"]
                * random.Random(f"{configs[c].get('seed', 0)}:{c}:{r}").gauss(0.0, 1.0)
            )
            for r in range(5)
        ]

    a, b = draws(0), draws(1)
    return min(b) <= max(a) and min(a) <= max(b)


def test_well_separated_configs_get_a_winner_and_only_the_contenders_are_measured_again(noisy, tmp_path):
    from nsprof.render.json import tune_document
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    assert _first_pass_ties(SEPARABLE)  # the premise: the first pass alone cannot separate them
    target, log = noisy(SEPARABLE)
    result = tune(target, _settings(tmp_path))
    assert result.ranking.decision.kind == "winner" and result.ranking.best_config_id == 0
    adaptive = result.ranking.adaptive
    assert adaptive.stopped == rules.SEPARATED and adaptive.sessions >= 1
    first, *sessions = _sessions(log)
    assert len(sessions) == adaptive.sessions
    assert sorted(set(first)) == [0, 1, 2]
    for session, history in zip(sessions, adaptive.history):
        assert history["configs"] == [0, 1]  # the tie set, in rank order; config 2 is not measured again
        runs = _runs(session)
        # built and warmed up one after the other (3 launches each), then visits A B A B ...:
        # each visit 3 warm-up launches and one rep
        assert runs[:2] == [(0, 3), (1, 3)]
        assert runs[2:] == [(0, 4), (1, 4)] * history["rounds"]
    table = result.ranking.table.set_index("config_id")
    total = 5 + sum(h["rounds"] for h in adaptive.history)
    assert table.loc[0, "reps"] == table.loc[1, "reps"] == total and table.loc[2, "reps"] == 5
    assert adaptive.reps == 2 * (total - 5) and adaptive.reps_per_config == {0: total, 1: total}
    document = json.loads(tune_document(result))
    assert document["adaptive"]["stopped"] == "separated"
    assert document["adaptive"]["sessions"] == adaptive.sessions and document["decision"]["kind"] == "winner"
    text = format_tune(result)
    assert "interleaved session" in text and "stopped: the best is separated" in text


def test_identical_configs_end_as_a_tie_at_max_reps(noisy, tmp_path):
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    target, log = noisy(IDENTICAL)
    result = tune(target, _settings(tmp_path, max_reps=12))
    assert result.ranking.adaptive.stopped == rules.MAX_REPS
    decision = result.ranking.decision
    assert decision.kind == "tie" and len(decision.members) >= 2
    members = decision.members
    table = result.ranking.table.set_index("config_id")
    for c in members:
        assert table.loc[c, "reps"] == 12  # every contender, exactly --max-reps
    # the member fed back: the lowest median, then the lower id (confidence.tie_rule)
    tied = table.loc[members].reset_index().sort_values(["value_ns", "config_id"])
    assert result.ranking.best_config_id == int(tied.iloc[0]["config_id"])
    text = format_tune(result)
    assert f"these {len(members)} configs are indistinguishable here (±" in text
    assert "every contender reached --max-reps 12" in text
    assert all(
        set(session) <= set(members) | set(result.ranking.adaptive.history[0]["configs"])
        for session in _sessions(log)[1:]
    )


def test_budget_zero_means_no_adaptive_session_and_a_budget_too_small_says_so(noisy, tmp_path):
    from nsprof.render.json import tune_document
    from nsprof.tune import tune

    target, log = noisy(IDENTICAL)
    off = tune(target, _settings(tmp_path, budget_s=0))
    assert off.ranking.adaptive.stopped == rules.OFF and off.ranking.adaptive.sessions == 0
    assert len(_sessions(log)) == 1  # the first pass only
    assert off.ranking.decision.kind == "tie"
    assert json.loads(tune_document(off))["adaptive"]["stopped"] == "off"

    log.write_text("")
    poor = tune(target, _settings(tmp_path, budget_s=1e-9))  # less than any start-up
    assert poor.ranking.adaptive.stopped == rules.BUDGET and poor.ranking.adaptive.sessions == 0
    assert "not started: session 1 would cost a start-up" in poor.ranking.adaptive.note
    assert any("cannot pay another session" in note for note in poor.ranking.notes)
    assert len(_sessions(log)) == 1

    log.write_text("")
    capped = tune(target, _settings(tmp_path, max_reps=5))  # --max-reps = --reps: nothing to add
    assert capped.ranking.adaptive.stopped == rules.MAX_REPS and len(_sessions(log)) == 1


def test_a_practically_equivalent_tie_gets_no_adaptive_session_unless_the_margin_is_off(noisy, tmp_path):
    from nsprof.render.json import tune_document
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    target, log = noisy(EQUIVALENT)
    result = tune(target, _settings(tmp_path, max_reps=20, budget_s=600))
    ranking = result.ranking
    assert ranking.decision.kind == "tie" and ranking.decision.tie_spread <= 0.01
    assert ranking.adaptive.stopped == rules.EQUIVALENT and ranking.adaptive.sessions == 0
    assert len(_sessions(log)) == 1  # the first pass only
    words = "none needed (every contender lies within ±1.0% of the best (--equivalence))"
    assert words in format_tune(result)
    assert json.loads(tune_document(result))["adaptive"]["stopped"] == "equivalent"

    log.write_text("")
    strict = tune(target, _settings(tmp_path, max_reps=20, budget_s=600, equivalence_pct=0)).ranking
    assert strict.adaptive.stopped != rules.EQUIVALENT and strict.adaptive.sessions >= 1
    assert len(_sessions(log)) == 1 + strict.adaptive.sessions


def test_the_clock_step_is_read_from_the_durations():
    # the H200's GPU timer ticks every 32 ns: nsys's and ncu's durations are its multiples
    ticks = [2880.0, 2912.0, 2944.0, 9600.0, 9632.0, 9664.0]
    assert rules.clock_step_ns(ticks) == 32
    assert rules.clock_step_ns([262208.0, 204960.0, 278720.0, 326048.0, 186272.0, 180928.0]) == 32  # ncu's µs
    assert rules.clock_step_ns([*ticks[:-1], 2881.0]) == 1  # one duration off the grid
    assert rules.clock_step_ns([2880.0, 2912.0] * 20) == 1  # too few values to say
    assert rules.clock_step_ns([*ticks, float("nan")]) == 32  # a failed rep says nothing
    # ncu's CSV in µs, turned into ns: 256.032 µs is 256031.99999999997 ns in floating point
    from_us = [float(f"{32 * k / 1000:.3f}") * 1e3 for k in range(8001, 8101)]
    assert any(v != round(v) for v in from_us)
    assert rules.clock_step_ns(from_us) == 32
    assert rules.clock_step_ns([1024.0 * k for k in range(3, 9)]) == 1024  # the largest step read


@pytest.mark.parametrize("name", ["fixture.sqlite", "fixture_graph_raw.csv", "fixture_node_raw.csv"])
def test_the_h200s_reports_read_as_one_32_ns_step(name):
    """nsys's SQLite and ncu's CSV of the H200: every kernel's duration a multiple of 32 ns, some an odd one
    (read with sqlite3 and csv here), and the step read from nsprof's rows of them is 32 ns."""
    import csv
    import sqlite3

    from conftest import FIXTURES

    from nsprof.reports.read import read_report

    path = FIXTURES / name
    if name.endswith(".sqlite"):
        with sqlite3.connect(path) as db:
            raw = [e - s for s, e in db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    else:
        rows = list(csv.reader(path.open()))
        column = rows[0].index("gpu__time_duration.sum")
        assert rows[1][column] == "us"
        raw = [round(float(r[column]) * 1000) for r in rows[2:]]
    assert all(d % 32 == 0 for d in raw) and any(d % 64 for d in raw)
    assert rules.clock_step_ns(read_report(path)["duration_ns"]) == 32


def _tie_of(values, lows, highs):
    from nsprof.analysis.confidence import decide

    ids = list(range(len(values)))
    ranked = pd.DataFrame(
        {
            "rank": [i + 1 for i in ids],
            "config_id": ids,
            "value_ns": values,
            "ci_low_ns": lows,
            "ci_high_ns": highs,
            "tied_with_best": [True] * len(values),
        }
    )
    return decide(ranked)


def test_a_tie_whose_intervals_lie_within_one_clock_step_stops_unless_the_margin_is_off():
    # both intervals [2880, 2912]: 1.1% from the best's value, over the 1% margin, one 32 ns step
    decision = _tie_of([2880.0, 2912.0], [2880.0, 2880.0], [2912.0, 2912.0])
    assert decision.kind == "tie" and decision.tie_spread > 0.01 and decision.tie_spread_ns == 32.0
    reps = {0: 5, 1: 5}
    assert rules.stop_reason(decision, reps, 20, equivalence=0.01, step_ns=32) == rules.CLOCK_STEP
    assert rules.stop_reason(decision, reps, 20, equivalence=0.01, step_ns=16) is None  # two steps wide
    assert rules.stop_reason(decision, reps, 20, equivalence=0.01) is None  # no step read
    assert rules.stop_reason(decision, reps, 20, equivalence=0.0, step_ns=32) is None  # off


def test_medians_one_step_apart_with_wide_intervals_go_on():
    """Five noisy reps whose medians happen to fall one step apart, intervals 13% wide: more reps can
    still separate them (configs truly 2% apart), so no stop on the clock's step."""
    a, b = [2752.0, 2816.0, 2944.0, 3072.0, 3136.0], [2816.0, 2912.0, 2976.0, 3200.0, 3328.0]
    decision = _tie_of([2944.0, 2976.0], [min(a), min(b)], [max(a), max(b)])
    assert decision.kind == "tie"
    assert rules.stop_reason(decision, {0: 5, 1: 5}, 20, equivalence=0.01, step_ns=32) is None
    # the medians one step apart, their intervals two steps wide: separable with more reps
    decision = _tie_of([640.0, 672.0], [640.0, 640.0], [672.0, 704.0])
    assert rules.stop_reason(decision, {0: 5, 1: 5}, 20, equivalence=0.01, step_ns=32) is None


# Two configs one 32 ns step apart, every duration on the clock's grid: a tie no rep can split.
ONE_STEP = [
    {"id": 0, "ns_reps": [2880.0, 2912.0] * 10},
    {"id": 1, "ns_reps": [2912.0, 2880.0] * 10},
    {"id": 2, "ns_reps": [9600.0, 9632.0, 9664.0, 9696.0, 9728.0]},
]


def test_a_tie_within_one_step_of_the_tools_clock_gets_no_adaptive_session(noisy, tmp_path):
    from nsprof.render.json import tune_document
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    target, log = noisy(ONE_STEP)
    result = tune(target, _settings(tmp_path, max_reps=20, budget_s=600))
    ranking = result.ranking
    assert ranking.decision.kind == "tie" and ranking.decision.members == [0, 1]
    assert ranking.adaptive.stopped == rules.CLOCK_STEP and ranking.adaptive.sessions == 0
    assert len(_sessions(log)) == 1  # the first pass only
    words = "none needed (every contender's interval lies within one step of the tool's clock (32 ns) of the best)"
    assert words in format_tune(result)
    adaptive = json.loads(tune_document(result))["adaptive"]
    assert adaptive["stopped"] == "clock_step" and adaptive["clock_step_ns"] == 32

    log.write_text("")
    strict = tune(target, _settings(tmp_path, max_reps=20, budget_s=600, equivalence_pct=0)).ranking
    assert strict.adaptive.stopped == rules.MAX_REPS and strict.adaptive.sessions >= 1


# Two configs 0.6% apart within one process, the other way round in the next: reps within a
# process agree closely, the process shifts each config (nsys on the H200: a first pass's winner
# by 0.5-0.6% between the intervals, picked second by later runs). Rep numbers go on across
# sessions, so reps 0-4 are the first pass's process and reps 5 and on the next one's.
SHIFTED = [
    {"id": 0, "ns_reps": [1000.0] * 5 + [1006.0] * 15},
    {"id": 1, "ns_reps": [1006.0] * 5 + [1000.0] * 15},
    {"id": 2, "ns": 3000.0},
]
# The same gap, held in the next process as well: a winner in two processes.
HELD = [
    {"id": 0, "ns_reps": [1000.0] * 20},
    {"id": 1, "ns_reps": [1006.0] * 20},
    {"id": 2, "ns": 3000.0},
]


def test_a_first_pass_winner_closer_than_the_equivalence_margin_is_checked_in_a_second_process():
    close = Decision("winner", 3, [3], margin=0.005, second=4)
    reps = {3: 5, 4: 5}  # the first pass's 5 reps each
    one_process = {3: 1, 4: 1}
    assert rules.stop_reason(close, reps, 20, equivalence=0.01, processes=one_process) is None
    assert rules.check_rounds(close, reps, one_process) == 5  # as many reps as that one process has
    assert rules.session_configs(close, reps, 20) == [3, 4]  # the best and its nearest rival
    # both measured by a second process too (an adaptive session, this run's or a stored one): checked
    checked = {3: 2, 4: 2}
    assert (
        rules.stop_reason(close, {3: 10, 4: 10}, 20, equivalence=0.01, processes=checked) == rules.SEPARATED
    )
    assert (
        rules.stop_reason(close, reps, 20, equivalence=0.01, processes=None) == rules.SEPARATED
    )  # not again
    assert rules.stop_reason(close, reps, 20, equivalence=0.0, processes=one_process) == rules.SEPARATED
    far = Decision("winner", 3, [3], margin=0.02, second=4)
    assert rules.stop_reason(far, reps, 20, equivalence=0.01, processes=one_process) == rules.SEPARATED
    # under --stat min the margin is the median intervals' and can be below 0: not a close winner
    assert rules.stop_reason(
        Decision("winner", 3, [3], margin=-0.5, second=4), reps, 20, 0.01, one_process
    ) == (rules.SEPARATED)
    # processes, not reps: 20 reps of one process (a stored --reps 20 first pass) are still one process's
    assert rules.stop_reason(close, {3: 20, 4: 20}, 40, equivalence=0.01, processes=one_process) is None
    assert rules.check_rounds(close, {3: 20, 4: 20}, one_process) == 20
    assert rules.stop_reason(close, {3: 20, 4: 20}, 39, 0.01, one_process) == rules.SEPARATED  # no room
    # a rival that one process only measured, beside a winner that two did: its reps set the rounds
    assert rules.check_rounds(close, {3: 12, 4: 5}, {3: 2, 4: 1}) == 5
    # the second process does as many reps as the first pass did, so that neither outweighs the other
    plan = rules.plan_session([3, 4], {3: 8, 4: 5}, {3: 8, 4: 5}, 20, 60.0, Cost(10.0, 0.1), confirm=5)
    assert plan.rounds == 5
    # a budget that pays 2 of those rounds starts no check: fewer reps than the first pass's are none
    assert (
        rules.plan_session([3, 4], {3: 5, 4: 5}, {3: 5, 4: 5}, 20, 10.5, Cost(10.0, 0.1), confirm=5) is None
    )


# Config 0 is 0.6% ahead of 1 and 0.8% ahead of 2 in the first process; in the next, config 1 slows:
# the winner is checked once, against its nearest rival, and no second check follows for config 2.
RIVALS = [
    {"id": 0, "ns_reps": [1000.0] * 40},
    {"id": 1, "ns_reps": [1006.0] * 5 + [1100.0] * 35},
    {"id": 2, "ns_reps": [1008.0] * 40},
]


def test_a_close_winner_is_checked_once_in_a_run(noisy, tmp_path):
    from nsprof.tune import tune

    target, log = noisy(RIVALS)
    ranking = tune(target, _settings(tmp_path, budget_s=600)).ranking
    assert ranking.decision.kind == "winner" and ranking.best_config_id == 0
    assert [h["configs"] for h in ranking.adaptive.history] == [[0, 1]]
    assert ranking.adaptive.history[0]["rounds"] == 5 and len(_sessions(log)) == 2


def test_a_close_winner_that_the_next_process_reverses_ends_as_a_tie(noisy, tmp_path):
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    target, log = noisy(SHIFTED)
    result = tune(target, _settings(tmp_path, budget_s=600))
    ranking = result.ranking
    assert ranking.decision.kind == "tie" and ranking.decision.members == [0, 1]
    assert ranking.adaptive.sessions == 1 and ranking.adaptive.history[0]["configs"] == [0, 1]
    assert ranking.adaptive.history[0]["rounds"] == 5
    assert len(_sessions(log)) == 2 and sorted(set(_sessions(log)[1])) == [0, 1]
    assert "indistinguishable" in format_tune(result)


def test_a_close_winner_that_the_next_process_confirms_stays_the_winner(noisy, tmp_path):
    from nsprof.tune import tune

    target, log = noisy(HELD)
    ranking = tune(target, _settings(tmp_path, budget_s=600)).ranking
    assert ranking.decision.kind == "winner" and ranking.best_config_id == 0
    assert ranking.adaptive.stopped == rules.SEPARATED and ranking.adaptive.sessions == 1
    assert ranking.adaptive.history[0]["confirm"] is True
    assert "stopped: the best is separated in a second process too" in ranking.adaptive.describe()
    assert len(_sessions(log)) == 2


def test_adaptive_reps_are_stored_and_resume_measures_nothing_again(noisy, tmp_path):
    from nsprof.store import ResultStore
    from nsprof.tune import tune

    target, log = noisy(IDENTICAL)
    store = tmp_path / "results.sqlite"
    first = tune(target, _settings(tmp_path, use_store=True, store=store, max_reps=10))
    assert first.ranking.adaptive.sessions >= 1 and first.ranking.adaptive.stopped == rules.MAX_REPS
    with ResultStore(store) as results:
        runs = results.runs()
        rows = results.frame()
    assert len(runs) == 1 + first.ranking.adaptive.sessions and set(runs["status"]) == {"ok"}
    assert all('"adaptive_session"' in text for text in runs["settings_json"][1:])
    per_config = rows.groupby("config_id")["rep"].agg(lambda r: sorted(r)).to_dict()
    for c in first.ranking.adaptive.reps_per_config:
        assert per_config[c] == list(range(10))  # reps continue after the first pass's, none twice
    log.write_text("")
    resumed = tune(target, _settings(tmp_path, use_store=True, store=store, max_reps=10, resume=True))
    assert _sessions(log) == []  # nothing measured again: every contender has its 10 reps
    assert resumed.ranking.adaptive.stopped == rules.MAX_REPS and resumed.ranking.adaptive.sessions == 0
    pd.testing.assert_frame_equal(
        resumed.ranking.table[["config_id", "value_ns", "reps"]].reset_index(drop=True),
        first.ranking.table[["config_id", "value_ns", "reps"]].reset_index(drop=True),
    )
    # A fresh first pass (no --resume) starts over: the old adaptive reps are not mixed in.
    log.write_text("")
    fresh = tune(target, _settings(tmp_path, use_store=True, store=store, budget_s=0))
    assert set(fresh.ranking.table["reps"]) == {5}


def test_a_resumed_first_pass_is_labelled_with_the_reps_it_holds_beside_the_adaptive_ones(noisy, tmp_path):
    from nsprof.tune import tune

    close = [{**SEPARABLE[0], "seed": 7}, {**SEPARABLE[0], "id": 1, "seed": 7}, SEPARABLE[2]]  # 0 and 1 alike
    target, _ = noisy(close)
    store = tmp_path / "results.sqlite"
    tune(target, _settings(tmp_path, use_store=True, store=store, reps=3, budget_s=0))
    resumed = tune(target, _settings(tmp_path, use_store=True, store=store, resume=True, max_reps=8))
    adaptive = resumed.ranking.adaptive
    assert adaptive.sessions >= 1 and 2 not in adaptive.reps_per_config
    assert resumed.ranking.table.set_index("config_id").loc[2, "reps"] == 3  # stored, not measured again
    assert "median of 3 reps, the contenders' up to" in resumed.ranking.label, resumed.ranking.label


def test_shapes_whose_reps_differ_are_each_labelled_with_their_own(noisy, tmp_path):
    """Shape 0's configs tie and get adaptive reps, shape 1's are apart and get none: the per-shape table
    does not label shape 1 with shape 0's reps."""
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    noisy([])  # the driver and the lock folder; the target is this test's own
    ns = [[1000, 1000, 1000], [1000, 2000, 3000]]
    configs = [
        {"i": c, "ns_shapes": [ns[s][c] for s in range(2)], "ns_sigma": 0.03, "seed": 7} for c in range(3)
    ]
    (tmp_path / "shaped.py").write_text(
        "import nsprof.space\n"
        f"space = nsprof.space.Space(configs={configs!r}, shapes=[{{'M': 1}}, {{'M': 2}}],\n"
        "                            build=lambda c, s: (lambda: None), device='cpu')\n"
    )
    result = tune(f"{tmp_path / 'shaped.py'}:space", _settings(tmp_path, max_reps=10))
    first, second = result.shapes
    assert first.ranking.adaptive.reps and not second.ranking.adaptive.reps
    text = format_tune(result)
    assert first.ranking.label != second.ranking.label and "(adaptive)" not in second.ranking.label
    assert f"shape 0: {first.ranking.label}" in text and f"shape 1: {second.ranking.label}" in text, text


@pytest.mark.parametrize("max_reps", [5, 7])  # no rep to add; less than the first pass's 5 to add
def test_a_close_winner_that_max_reps_leaves_unchecked_is_said_so(noisy, tmp_path, max_reps):
    from nsprof.tune import tune

    target, log = noisy(HELD)
    adaptive = tune(target, _settings(tmp_path, budget_s=600, max_reps=max_reps)).ranking.adaptive
    assert adaptive.sessions == 0 and len(_sessions(log)) == 1  # a check of fewer reps is no check
    words = adaptive.describe()
    assert "none needed" not in words and "second process too" not in words, words
    assert "config 0 is 0.6% clear of config 1 in one process only: not checked in a second" in words, words
    assert f"--max-reps {max_reps}" in words, words


def test_a_close_winner_that_the_budget_leaves_unchecked_stays_a_separated_winner_and_is_said_so(
    noisy, tmp_path
):
    from nsprof.tune import tune

    target, log = noisy(HELD)
    ranking = tune(target, _settings(tmp_path, budget_s=1e-9)).ranking  # less than any start-up
    assert ranking.decision.kind == "winner" and len(_sessions(log)) == 1
    assert ranking.adaptive.stopped == rules.SEPARATED  # "budget" is a tie's stop
    words = ranking.adaptive.describe()
    assert "config 0 is 0.6% clear of config 1 in one process only: not checked in a second" in words, words
    assert "not started: session 1 would cost" in words, words


def test_a_resume_of_a_close_winner_checked_in_a_second_process_measures_nothing_again(noisy, tmp_path):
    from nsprof.tune import tune

    target, log = noisy(HELD)
    store = tmp_path / "results.sqlite"
    first = tune(target, _settings(tmp_path, use_store=True, store=store, budget_s=600)).ranking
    assert first.adaptive.sessions == 1 and first.decision.kind == "winner"
    log.write_text("")
    resumed = tune(target, _settings(tmp_path, use_store=True, store=store, budget_s=600, resume=True))
    assert _sessions(log) == []  # the stored second process's reps count: no third process
    assert resumed.ranking.decision.kind == "winner" and resumed.ranking.best_config_id == 0
    assert resumed.ranking.adaptive.stopped == rules.SEPARATED


def test_the_time_a_resume_waits_for_its_turn_is_not_its_first_pass_s(noisy, tmp_path, monkeypatch):
    """The first pass's wall time, and the cost model whose start-up the adaptive reps' budget pays,
    start once a --resume --wait has its turn: here the wait takes 1000 s of a shifted clock."""
    import contextlib
    import time

    from nsprof.tune import stored, tune

    real, shift = time.monotonic, [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: real() + shift[0])

    @contextlib.contextmanager
    def a_long_wait():
        shift[0] += 1000.0  # what waiting for another resume took
        yield True

    monkeypatch.setattr(stored, "resume_turn", a_long_wait)
    target, log = noisy(SHIFTED)
    settings = _settings(tmp_path, use_store=True, store=tmp_path / "r.sqlite", resume=True, wait=True)
    ranking = tune(target, settings).ranking
    assert ranking.first_pass_wall_s < 1000.0, ranking.first_pass_wall_s
    assert ranking.adaptive.sessions == 1  # the 30 s budget still pays the check


def test_cli_takes_the_adaptive_options(noisy, tmp_path):
    """The real command line (in this process, the stand-in as nsys: its workers are children)."""
    from conftest import run_nsprof

    target, _ = noisy(IDENTICAL)
    env = {"NSPROF_LOCK_DIR": str(tmp_path)}
    tune = [
        "tune",
        target,
        "--backend",
        "nsys",
        "--mode",
        "direct",
        "--no-store",
        "--no-feed-back",
        "--no-tuner-pick",
    ]

    def cli(*more):
        return run_nsprof(*tune, *more, env=env, standins=True, in_process=True)

    bad = cli("--reps", "5", "--max-reps", "3")
    assert bad.returncode != 0 and "--max-reps (3) must be at least --reps (5)" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) <= 3  # usage, help hint, the one line
    wide = cli("--equivalence", "100")
    assert wide.returncode == 2 and "--equivalence" in wide.stderr and "Traceback" not in wide.stderr
    done = cli("--json", "--max-reps", "8", "--budget-s", "600", "--work-dir", str(tmp_path / "cli"))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["adaptive"]["max_reps"] == 8 and document["adaptive"]["budget_s"] == 600
    assert (
        document["adaptive"]["stopped"] in ("max_reps", "separated") and document["adaptive"]["sessions"] >= 1
    )


# --- refine with a session stand-in on a fake clock: what each session costs is the test's own -------


class _Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def _refine(durations, ids, *, budget_s, model: Cost, real: Cost, reps=5, max_reps=200, sessions=50):
    """refine over a first pass of `reps` reps of `ids` and sessions that cost `real` (start-up, visit) on a
    fake clock, planned with the cost model `model`: (its rows, its summary, the adaptive time spent)."""
    from nsprof.adaptive import refine

    settings = TuneSettings(
        backend="ncu", mode="direct", reps=reps, use_store=False, max_reps=max_reps, budget_s=budget_s,
        equivalence_pct=0,
    )  # fmt: skip
    clock, pids = _Clock(), iter(range(2, 2 + sessions))

    def rows(pairs, pid):
        return make_frame(
            [
                {
                    "config_id": c,
                    "mode": "direct",
                    "rep": r,
                    "duration_ns": durations(c, r),
                    "kernel": "k",
                    "pid": pid,
                    "source": "ncu",
                }
                for c, r in pairs
            ]  # fmt: skip
        )

    def measure(plan, number):
        pid = next(pids)  # StopIteration past `sessions`: a loop that does not end
        clock.t += real.startup_s + plan.visits * real.visit_s
        return rows(plan.order(), pid)

    first = rows([(c, r) for c in ids for r in range(reps)], 1)
    merged, summary = refine(
        first, settings, measure=measure, merge=lambda a, b: pd.concat([a, b], ignore_index=True), cost=model,
        clock=clock,
    )  # fmt: skip
    return merged, summary[None], clock.t


def test_sessions_faster_than_the_start_up_thought_never_make_rounds_free():
    """The first pass said 10 s of start-up; a session really takes 2 s and 0.5 s a visit. The session
    came back within the start-up alone: that says the start-up was less, not that visits cost nothing
    (a visit cost of ~0 planned 190 rounds: 287 s of a 30 s budget)."""
    noise = np.random.default_rng(1)
    _, summary, spent = _refine(
        lambda c, r: 1000 * (1 + 0.03 * noise.standard_normal()), [0, 1, 2],
        budget_s=30, model=Cost(10.0, 0.25), real=Cost(2.0, 0.5),
    )  # fmt: skip
    one_session = 2.0 + 0.5 * 3 * 20  # the dearest session the budget's plan may misjudge by
    assert spent <= 30 + one_session, (spent, summary.describe())


def test_a_contender_whose_reps_come_back_without_a_duration_stops_the_reps_and_is_not_counted():
    def durations(c, r):
        return float("nan") if c == 1 and r >= 5 else 1000.0 + c + r % 3

    merged, summary, _ = _refine(
        durations, [0, 1], budget_s=float("inf"), model=Cost(1.0, 0.01), real=Cost(1.0, 0.01), sessions=20
    )
    from nsprof.adaptive import rep_counts

    assert summary.stopped == rules.FAILED, summary.describe()
    assert merged["duration_ns"].notna().all(), "rows without a duration are not kept as reps"
    assert f"{sum(rep_counts(merged).values()) - 10} reps" in summary.describe() or summary.sessions == 0


def _decided(reps_by_config: dict[int, list[float]], stat: str = "median"):
    from nsprof.analysis.confidence import decide
    from nsprof.analysis.ranking import rank
    from nsprof.profile import config_summary

    rows = [
        {"config_id": c, "mode": "direct", "rep": r, "duration_ns": float(v), "kernel": "k", "source": "ncu"}
        for c, values in reps_by_config.items()
        for r, v in enumerate(values)
    ]
    return decide(rank(config_summary(make_frame(rows)), stat), stat)


def test_a_config_without_an_interval_is_never_separated_from_the_best():
    # config 1's one rep sits inside config 0's interval: nothing says config 0 is faster
    decision = _decided({0: [100, 101, 102, 103, 104, 105], 1: [103]})
    assert decision.kind != "winner", decision


def test_under_min_a_best_whose_median_interval_lies_above_the_seconds_is_no_separated_winner():
    # config 0's one fast rep makes it the best by min; the medians' intervals say config 1 is faster
    decision = _decided({0: [90, *range(200, 208)], 1: list(range(100, 109))}, stat="min")
    assert decision.kind != "winner", decision


def test_a_config_of_one_rep_far_slower_than_the_best_is_no_tie():
    # config 1's one rep, 10x the best's interval, is slower whatever its interval would be
    decision = _decided({0: [100, 100.5, 101, 101.5, 102, 102.5], 2: [150] * 6, 1: [1000]})
    assert decision.kind == "winner" and decision.config_id == 0 and decision.second == 2, decision


def test_an_untested_best_says_that_the_best_lacks_the_reps():
    """The decision is untested when the best has no interval: the words name it, not every config (a
    resume's stored best of one rep, beside configs of five)."""
    from types import SimpleNamespace

    from nsprof.analysis.confidence import Decision
    from nsprof.render.tune_tables import describe_decision

    words = describe_decision(SimpleNamespace(decision=Decision("untested", 0, [0], rule=""), stat="median"))
    assert words.startswith("config 0 has the lowest median") and "it has fewer than 2 reps" in words, words
    summary = rules.AdaptiveSummary(stopped=rules.UNTESTED, max_reps=20, budget_s=30.0)
    assert "the best has fewer than 2 reps" in summary.describe()
