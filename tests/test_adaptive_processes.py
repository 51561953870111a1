"""A close winner is checked in a second process when one process only measured it or its rival,
whatever their rep counts: a resume's --reps need not be the stored first pass's. Real `tune`
through the stand-in driver of tests/test_adaptive.py, with a results store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_adaptive import _sessions, _settings  # noqa: E402

from nsprof.analysis import adaptive as rules  # noqa: E402
from nsprof.analysis.confidence import Decision  # noqa: E402
from nsprof.schema import make_frame  # noqa: E402
from nsprof.settings import TuneSettings  # noqa: E402

# 0.6% apart within one process, the other way round in the next (rep numbers go on across
# processes: reps 0-19 are the first pass's, 20 and on the check's).
SHIFTED_20 = [
    {"id": 0, "ns_reps": [1000.0] * 20 + [1006.0] * 20},
    {"id": 1, "ns_reps": [1006.0] * 20 + [1000.0] * 20},
    {"id": 2, "ns": 3000.0},
]
HELD = [{"id": 0, "ns": 1000.0}, {"id": 1, "ns": 1006.0}, {"id": 2, "ns": 3000.0}]


def _measured(config_id, pid, reps):
    return [
        {"source": "x", "config_id": config_id, "mode": "direct", "rep": r, "kernel": "k", "duration_ns": 1.0,
         "pid": pid}
        for r in reps
    ]  # fmt: skip


def test_processes_are_counted_by_pid():
    from nsprof.adaptive import process_counts
    from nsprof.schema import make_frame

    first_pass = _measured(0, 100, range(20)) + _measured(1, 100, range(20))
    frame = make_frame(
        first_pass + _measured(0, 200, range(20, 25)) + [{"source": "x", "config_id": 1, "error": "boom"}]
    )
    assert process_counts(frame) == {0: 2, 1: 1}  # a failure is no measurement


def _stored(rows, run_ids):
    import pandas as pd

    from nsprof.schema import make_frame

    stored = make_frame(rows)
    stored.insert(0, "run_id", pd.array(run_ids, dtype="Int64"))
    return stored


def test_stored_runs_of_one_served_worker_are_one_process():
    """Through nsprof serve every session is a job of one worker process: two stored runs (a first
    pass and a check) whose rows carry that worker's pid measured each config in one process."""
    from nsprof.adaptive import process_counts

    served = _stored(
        _measured(0, 100, range(20)) + _measured(1, 100, range(20)) + _measured(0, 100, range(20, 40)),
        [1] * 40 + [7] * 20,
    )
    assert process_counts(served) == {0: 1, 1: 1}
    close = Decision("winner", 0, [0], margin=0.006, second=1)
    assert rules.to_confirm(close, process_counts(served), 0.01)  # still unchecked
    apart = _stored(
        _measured(0, 100, range(20)) + _measured(1, 100, range(20)) + _measured(0, 200, range(20, 40)),
        [1] * 40 + [7] * 20,
    )
    assert process_counts(apart) == {0: 2, 1: 1}


def test_stored_rows_without_a_pid_count_one_process_per_run():
    """A store written before pids were kept: each stored run is one process (a run's sessions, first
    pass or adaptive, each start a worker of their own unless served)."""
    from nsprof.adaptive import process_counts

    rows = _measured(0, None, range(20)) + _measured(1, None, range(20)) + _measured(0, None, range(20, 25))
    assert process_counts(_stored(rows, [1] * 40 + [7] * 5)) == {0: 2, 1: 1}
    # an old run without pids beside a new one with them: two processes
    rows = _measured(0, None, range(20)) + _measured(0, 300, range(20, 25))
    assert process_counts(_stored(rows, [1] * 20 + [7] * 5)) == {0: 2}
    # a pid and a run id that are the same number are no one process
    rows = _measured(0, None, range(20)) + _measured(0, 1, range(20, 25))
    assert process_counts(_stored(rows, [1] * 20 + [7] * 5)) == {0: 2}


def test_a_resume_with_fewer_reps_than_the_stored_first_pass_still_checks_its_close_winner(noisy, tmp_path):
    from nsprof.tune import tune

    target, log = noisy(SHIFTED_20)
    store = tmp_path / "results.sqlite"
    first = tune(target, _settings(tmp_path, use_store=True, store=store, reps=20, budget_s=0)).ranking
    assert first.decision.kind == "winner" and first.best_config_id == 0  # one process's 20 reps
    log.write_text("")
    settings = _settings(tmp_path, use_store=True, store=store, reps=10, budget_s=600, resume=True)
    ranking = tune(target, settings).ranking
    # every stored rep came from one process: checked in a second, with as many reps as that one has
    assert [(h["configs"], h["rounds"], h["confirm"]) for h in ranking.adaptive.history] == [
        ([0, 1], 20, True)
    ]
    assert len(_sessions(log)) == 1
    assert ranking.decision.kind == "tie" and ranking.decision.members == [0, 1]  # reversed there


def test_a_resume_with_more_reps_than_the_stored_first_pass_does_not_check_a_checked_winner_again(
    noisy, tmp_path
):
    from nsprof.tune import tune

    target, log = noisy(HELD)
    store = tmp_path / "results.sqlite"
    first = tune(target, _settings(tmp_path, use_store=True, store=store, budget_s=600)).ranking
    assert [h["confirm"] for h in first.adaptive.history] == [True]  # 5 reps, then 5 in a second process
    log.write_text("")
    settings = _settings(tmp_path, use_store=True, store=store, reps=10, budget_s=600, resume=True)
    resumed = tune(target, settings).ranking
    assert _sessions(log) == []  # two processes measured both already: no third
    assert resumed.adaptive.sessions == 0 and resumed.adaptive.stopped == rules.SEPARATED
    assert resumed.decision.kind == "winner" and resumed.best_config_id == 0


def _refine_settings(**settings) -> TuneSettings:
    """Settings for refine() itself, called here without a tune: ncu's ground truth, nothing stored or
    fed back."""
    base = dict(
        backend="ncu", mode="direct", timeout_s=30, use_store=False, feed_back=False, tuner_pick=False
    )
    return TuneSettings(**base, **settings)


def test_a_tie_the_budget_cannot_pay_takes_no_turn():
    """A resume whose adaptive session the budget cannot pay runs none, so it takes no turn (it would
    wait out another resume's adaptive reps for nothing)."""
    from nsprof.adaptive import refine
    from nsprof.analysis.adaptive import BUDGET, Cost

    reps = {0: [1000, 1100, 1200, 1300, 1400], 1: [1050, 1150, 1250, 1350, 1450]}
    rows = make_frame(
        [
            {
                "source": "t",
                "config_id": c,
                "mode": "direct",
                "rep": i,
                "kernel": "k",
                "duration_ns": float(d),
                "pid": 1,
            }
            for c, durations in reps.items()
            for i, d in enumerate(durations)
        ]
    )
    settings = _refine_settings(reps=5, budget_s=5)
    turns = []

    def measure(plan, number):
        raise AssertionError("no session fits the budget")

    _, summaries = refine(
        rows, settings, measure=measure, merge=None, cost=Cost(10.0, 0.1), turn=lambda: turns.append(1)
    )
    assert summaries[None].stopped == BUDGET and summaries[None].sessions == 0
    assert turns == []


def test_a_check_runs_in_a_session_of_its_own_with_all_its_rounds():
    """Shape 0's close winner is checked with as many rounds as its one process did, even while shape
    1's tie, near --max-reps, could have only a few more: the check does not share that session."""
    from nsprof.adaptive import refine
    from nsprof.analysis.adaptive import Cost
    from nsprof.schema import Points

    def rows_of(shape, config, durations):
        return [
            {"source": "t", "config_id": config, "shape": shape, "mode": "direct", "rep": r, "kernel": "k",
             "duration_ns": float(d), "pid": 1}
            for r, d in enumerate(durations)
        ]  # fmt: skip

    tied = [2000 + 100 * (r % 5) for r in range(16)]  # shape 1: a wide tie, 16 reps each already
    rows = make_frame(
        rows_of(0, 0, [1000] * 5)
        + rows_of(0, 1, [1006] * 5)  # shape 0: config 0 by 0.6 %, one process
        + rows_of(1, 0, tied)
        + rows_of(1, 1, [d + 50 for d in tied])
    )
    settings = _refine_settings(reps=5, max_reps=20, budget_s=float("inf"))
    layout = Points(2, 2)
    plans = []

    def measure(plan, number):
        plans.append((sorted(layout.split(p) for p in plan.configs), plan.rounds))
        return make_frame([])  # nothing kept: the adaptive reps stop there

    refine(rows, settings, measure=measure, merge=None, cost=Cost(10.0, 0.1), layout=layout)
    assert plans[0] == ([(0, 0), (1, 0)], 5)


def _shaped_rows(*parts):
    """Tidy rows of a target with shapes: each part (shape, config, durations, pid, first rep)."""
    return make_frame(
        [
            {"source": "t", "config_id": config, "shape": shape, "mode": "direct", "rep": first + r, "kernel": "k",
             "duration_ns": float(d), "pid": pid}
            for shape, config, durations, pid, first in parts
            for r, d in enumerate(durations)
        ]
    )  # fmt: skip


def _planned(rows, layout, **settings):
    """The sessions refine plans over `rows` ((points as (config, shape), rounds) each, in order), each
    measured in a new process as planned, and its summaries."""
    import pandas as pd

    from nsprof.adaptive import refine
    from nsprof.analysis.adaptive import Cost

    plans = []

    def measure(plan, number):
        plans.append((sorted(layout.split(p) for p in plan.configs), plan.rounds))
        parts = []
        for p in plan.configs:
            config, shape = layout.split(p)
            parts.append((shape, config, [1000 + 6 * config] * plan.rounds, 100 + number, plan.first_rep[p]))
        return _shaped_rows(*parts)

    _, summaries = refine(
        rows,
        _refine_settings(**settings),
        measure=measure,
        merge=lambda rows, kept: pd.concat([rows, kept], ignore_index=True),
        cost=Cost(1.5, 0.1),
        layout=layout,
        clock=lambda: 0.0,
    )
    return plans, summaries


def test_a_check_the_budget_cannot_pay_leaves_another_shapes_tie_its_session():
    from nsprof.schema import Points

    tied = [2000 + 100 * (r % 5) for r in range(10)]
    rows = _shaped_rows(
        (0, 0, [1000] * 10, 1, 0), (0, 1, [1006] * 10, 1, 0),  # a close winner: a check of 10 rounds, 3.5 s
        (1, 0, tied, 1, 0), (1, 1, [d + 50 for d in tied], 1, 0),  # a wide tie
    )  # fmt: skip
    plans, summaries = _planned(rows, Points(2, 2), reps=10, max_reps=40, budget_s=3.0)
    assert plans and all(points == [(0, 1), (1, 1)] for points, _ in plans)  # the tie's sessions
    assert summaries[0].stopped == rules.SEPARATED and "not checked in a second" in summaries[0].note
    assert summaries[1].sessions >= 1


def test_two_checks_of_different_lengths_each_get_their_own_rounds():
    from nsprof.schema import Points

    rows = _shaped_rows(
        (0, 0, [1000] * 20, 1, 0), (0, 1, [1006] * 20, 1, 0),  # shape 0: one process, 20 reps: a check of 20
        (1, 0, [1000] * 20, 1, 0), (1, 0, [1000] * 15, 2, 20),  # shape 1: its winner in two processes,
        (1, 1, [1006] * 5, 1, 0),  # its rival in one, 5 reps: a check of 5
    )  # fmt: skip
    plans, summaries = _planned(rows, Points(2, 2), reps=5, max_reps=40, budget_s=float("inf"))
    checks = {tuple(sorted({shape for _, shape in points})): rounds for points, rounds in plans}
    assert checks == {(0,): 20, (1,): 5}
    assert all(
        s.stopped == rules.SEPARATED and "second process too" in s.describe() for s in summaries.values()
    )


@pytest.mark.parametrize(("worker", "rival_pid"), [(1, 1), (1, 3), (2, 1), (None, 1)])
def test_a_close_winner_is_not_checked_by_the_worker_that_measured_its_reps(worker, rival_pid):
    """refine's `worker` (nsprof serve's worker pid, known ahead): where that worker alone measured a close
    winner or its rival, a check there would leave it in one process: no session, the winner said to be
    unchecked. Measured by another worker, or with none known ahead, the check runs."""
    from nsprof.adaptive import refine
    from nsprof.analysis.adaptive import SEPARATED, Cost

    rows = _shaped_rows((None, 0, [1000] * 5, 1, 0), (None, 1, [1006] * 5, rival_pid, 0))
    plans = []

    def measure(plan, number):
        plans.append(sorted(plan.configs))
        return make_frame([])  # nothing kept: the adaptive reps stop there

    asked = []
    _, summaries = refine(
        rows,
        _refine_settings(reps=5, max_reps=20, budget_s=float("inf")),
        measure=measure,
        merge=None,
        cost=Cost(10.0, 0.1),
        worker=lambda: asked.append(1) or worker,
    )
    assert asked == [1]  # asked once
    if worker == 1:
        assert plans == [] and summaries[None].stopped == SEPARATED
        assert "not checked in a second" in summaries[None].note
        assert "nsprof serve's worker (pid 1)" in summaries[None].note
    else:
        assert plans == [[0, 1]]


def test_no_tool_here_means_no_server_to_ask(monkeypatch):
    """serving_worker on a machine without the truth's tool (a fully stored --resume, say): no server
    can be asked, and no error stops the tune there (the session, if one runs, says what is missing)."""
    from nsprof.drivers import registry
    from nsprof.errors import NsprofError
    from nsprof.settings import Truth
    from nsprof.tune.measure import serving_worker

    def missing(name):
        raise NsprofError(f"{name} was not found")

    monkeypatch.setattr(registry, "get_driver", missing)
    settings = _refine_settings(reps=5)
    assert serving_worker(Truth.parse("nsys"), settings) is None
