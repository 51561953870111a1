"""Adaptive reps for the contenders only (issue 13): after tune's first pass, the configs still
tied with the best are measured again, interleaved in one profiled session (A B C A B C ...),
until the best is separated, every contender has --max-reps reps, or the next session would
not fit in --budget-s.

    rows, summary = refine(rows, settings, measure=..., cost=first_pass_cost(...))

The decisions (who contends, when to stop, how many rounds a session does) are pure and live in
nsprof.analysis.adaptive; the session itself is nsprof.measure.GroundTruth.interleave, whose
docstring (and nsprof.worker.program's) says how each visit is warmed up. This module is the
loop: it plans a session, hands it to `measure` (tune's, which goes through the results store),
keeps only the rows the plan asked for, and decides again over all reps.

What is kept: a session's rows are whole or none (the worker says `done` for its configs after
the last round), and only rows of the plan's configs with the plan's rep numbers: a row can never
take another config's place or repeat a rep already held. A session that fails or measures
nothing ends the adaptive reps (stopped "failed"); the ranking then stands on the reps before it.
Ctrl-C goes through: the sessions finished before it are kept (tune stores each one as it ends).

Fast timers give one number per config (no reps to add): adaptive reps are not done for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from nsprof.analysis import adaptive as plan_rules
from nsprof.analysis.adaptive import AdaptiveSummary, Cost, Plan
from nsprof.analysis.confidence import decide
from nsprof.analysis.ranking import rank
from nsprof.errors import NsprofError, TargetChanged
from nsprof.reports.checks import one_line
from nsprof.settings import TuneSettings

__all__ = ["AdaptiveSummary", "Cost", "Plan", "next_reps", "planned_rows", "refine", "rep_counts"]


def rep_counts(rows) -> dict[int, int]:
    """Each measured config's number of reps (distinct mode × rep) in tidy `rows`."""
    measured = rows[rows["error"].isna() & rows["config_id"].notna() & rows["duration_ns"].notna()]
    if measured.empty:
        return {}
    per = measured.drop_duplicates(["config_id", "mode", "rep"]).groupby("config_id").size()
    return {int(c): int(n) for c, n in per.items()}


def next_reps(rows) -> dict[int, int]:
    """Each measured config's first free rep number (one past its highest)."""
    measured = rows[rows["error"].isna() & rows["config_id"].notna() & rows["rep"].notna()]
    if measured.empty:
        return {}
    return {int(c): int(r) + 1 for c, r in measured.groupby("config_id")["rep"].max().items()}


def planned_rows(frame, plan: Plan):
    """The measurement rows of `frame` that `plan` asked for: its configs, each with the rep
    numbers planned for it. Anything else (a failure row, another config, a rep outside the plan)
    is dropped."""
    import numpy as np

    ok = frame["error"].isna() & frame["config_id"].notna() & frame["rep"].notna()
    config = frame["config_id"].fillna(-1).astype(int).to_numpy()
    rep = frame["rep"].fillna(-1).astype(int).to_numpy()
    wanted = np.zeros(len(frame), dtype=bool)
    for c in plan.configs:
        first = plan.first_rep[c]
        wanted |= (config == c) & (rep >= first) & (rep < first + plan.rounds)
    return frame[ok.to_numpy() & wanted]


def _decide(rows, stat: str):
    from nsprof.profile import config_summary

    return decide(rank(config_summary(rows), stat), stat)


def refine(
    rows,
    settings: TuneSettings,
    *,
    measure: Callable[[Plan, int], object],
    merge: Callable[[object, object], object],
    cost: Cost,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[object, AdaptiveSummary]:
    """Adaptive reps over the first pass's tidy `rows`; returns all rows and what was done.

    measure(plan, session_number) runs one interleaved session and returns its tidy rows (tune's
    goes through the results store); merge(rows, kept) returns the rows with a session's kept
    rows added (tune's reads them back from the store). cost: the cost model from the first pass
    (nsprof.analysis.adaptive.first_pass_cost)."""
    max_reps, budget = settings.adaptive_max_reps, float(settings.budget_s)
    summary = AdaptiveSummary(stopped=plan_rules.OFF, max_reps=max_reps, budget_s=budget)
    if not settings.ground_truth:
        summary.stopped = plan_rules.FAST_TIMER
        return rows, summary
    if budget <= 0:
        return rows, summary
    started = clock()
    touched: set[int] = set()
    while True:
        decision = _decide(rows, settings.stat)
        reps = rep_counts(rows)
        reason = plan_rules.stop_reason(decision, reps, max_reps)
        if reason is not None:
            summary.stopped = reason
            break
        configs = plan_rules.session_configs(decision, reps, max_reps)
        left = budget - (clock() - started)
        plan = plan_rules.plan_session(configs, reps, next_reps(rows), max_reps, left, cost)
        if plan is None:
            summary.stopped = plan_rules.BUDGET
            summary.note = (
                f"not started: session {summary.sessions + 1} would cost a start-up (~{cost.startup_s:.1f} s"
                f"{'' if cost.measured else ', assumed'}) and {cost.visit_s * len(configs):.2f} s a round "
                f"over {len(configs)} contenders, and {max(left, 0.0):.1f} s of the budget are left"
            )
            break
        session = summary.sessions + 1
        began = clock()
        entry = {
            "configs": list(plan.configs),
            "rounds": plan.rounds,
            "first_rep": {str(c): r for c, r in plan.first_rep.items()},
            "expected_s": plan.expected_s,
        }
        summary.history.append(entry)
        summary.sessions = session
        try:
            frame = measure(plan, session)
        except TargetChanged:
            raise  # not a session that failed: the target is not the one ranked any more (nothing more is measured)
        except NsprofError as exc:
            entry.update(wall_s=clock() - began, kept=0)
            summary.stopped = plan_rules.FAILED
            summary.note = f"session {session} failed: {one_line(str(exc), 200)}"
            break
        wall = clock() - began
        kept = planned_rows(frame, plan)
        kept_reps = len(kept.drop_duplicates(["config_id", "mode", "rep"]))
        entry.update(wall_s=wall, kept=kept_reps)
        summary.wall_s = clock() - started
        cost = plan_rules.updated_cost(cost, wall, plan.visits)
        failed = sorted({int(c) for c in frame.loc[frame["error"].notna(), "config_id"].dropna()})
        if kept_reps:
            rows = merge(rows, kept)
            summary.reps += kept_reps
            touched.update(int(c) for c in kept["config_id"].unique())
        if failed or not kept_reps:
            summary.stopped = plan_rules.FAILED
            why = "; ".join(
                f"config {c}: {one_line(str(e), 120)}"
                for c, e in frame.loc[frame["error"].notna(), ["config_id", "error"]]
                .drop_duplicates("config_id")
                .itertuples(index=False)
            )
            summary.note = (
                f"session {session} measured {kept_reps} of its {plan.visits} planned reps"
                + (f" ({why})" if why else "")
                + "; the ranking stands on the reps kept"
            )
            break
    summary.wall_s = clock() - started
    final = rep_counts(rows)
    summary.reps_per_config = {c: final.get(c, 0) for c in sorted(touched)}
    return rows, summary
