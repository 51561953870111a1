"""Adaptive reps for the contenders only: after tune's first pass, the configs still tied with
the best are measured again, interleaved in one profiled session (A B C A B C ...), until the
best is separated, every contender has --max-reps reps, or the next session would not fit in
--budget-s. A target with shapes is decided shape by shape, and each session measures every
shape's contenders together.

    rows, summaries = refine(rows, settings, measure=..., merge=..., cost=first_pass_cost(...))

The decisions (who contends, when to stop, how many rounds a session does) are pure and live in
nsprof.analysis.adaptive; the session itself is nsprof.measure.GroundTruth.measure of a Request with a plan, whose
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

__all__ = ["AdaptiveSummary", "Cost", "Plan", "next_reps", "of_shape", "planned_rows", "refine", "rep_counts"]


def _points(rows, layout):
    """Each row's point id (nsprof.schema.Points): its config id for a target without shapes."""
    return rows["config_id"] if layout is None or not layout.shaped else layout.of_frame(rows)


def rep_counts(rows, layout=None) -> dict[int, int]:
    """Each measured point's number of reps (distinct mode × rep) in tidy `rows`: by config id, or
    with `layout` (a target with shapes) by point id."""
    measured = rows[rows["error"].isna() & rows["config_id"].notna() & rows["duration_ns"].notna()]
    if measured.empty:
        return {}
    measured = measured.assign(point=_points(measured, layout)).dropna(subset=["point"])
    per = measured.drop_duplicates(["point", "mode", "rep"]).groupby("point").size()
    return {int(c): int(n) for c, n in per.items()}


def next_reps(rows, layout=None) -> dict[int, int]:
    """Each measured point's first free rep number (one past its highest)."""
    measured = rows[rows["error"].isna() & rows["config_id"].notna() & rows["rep"].notna()]
    if measured.empty:
        return {}
    measured = measured.assign(point=_points(measured, layout)).dropna(subset=["point"])
    return {int(c): int(r) + 1 for c, r in measured.groupby("point")["rep"].max().items()}


def planned_rows(frame, plan: Plan, layout=None):
    """The measurement rows of `frame` that `plan` asked for: its points, each with the rep
    numbers planned for it. Anything else (a failure row, another point, a rep outside the plan)
    is dropped."""
    import numpy as np

    ok = frame["error"].isna() & frame["config_id"].notna() & frame["rep"].notna()
    point = _points(frame, layout).astype("Int64").fillna(-1).astype(int).to_numpy()
    rep = frame["rep"].fillna(-1).astype(int).to_numpy()
    wanted = np.zeros(len(frame), dtype=bool)
    for c in plan.configs:
        first = plan.first_rep[c]
        wanted |= (point == c) & (rep >= first) & (rep < first + plan.rounds)
    return frame[ok.to_numpy() & wanted]


def of_shape(rows, shape: int | None):
    """The rows of one shape, their shape cleared so that they rank as a target's configs do; all
    rows for a target without shapes (shape None)."""
    import pandas as pd

    if shape is None:
        return rows
    rows = rows[(rows["shape"] == shape).fillna(False).astype(bool)].copy()
    rows["shape"] = pd.Series(pd.NA, index=rows.index, dtype="Int64")
    return rows


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
    layout=None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[object, dict]:
    """Adaptive reps over the first pass's tidy `rows`; returns all rows and what was done at each
    shape, {shape: AdaptiveSummary} ({None: ...} for a target without shapes).

    With `layout` (nsprof.schema.Points of a target with shapes) each shape is decided on its own,
    and one session measures every shape's contenders together: its plan names point ids.
    measure(plan, session_number) runs one interleaved session and returns its tidy rows (tune's
    goes through the results store); merge(rows, kept) returns the rows with a session's kept
    rows added (tune's reads them back from the store). cost: the cost model from the first pass
    (nsprof.analysis.adaptive.first_pass_cost)."""
    max_reps, budget = settings.adaptive_max_reps, float(settings.budget_s)
    shapes = list(range(layout.n_shapes)) if layout is not None and layout.shaped else [None]
    summaries = {
        shape: AdaptiveSummary(stopped=plan_rules.OFF, max_reps=max_reps, budget_s=budget) for shape in shapes
    }

    def point(config_id: int, shape: int | None) -> int:
        return config_id if shape is None else layout.id(config_id, shape)

    def config_of(point_id: int) -> tuple[int, int | None]:
        return (point_id, None) if layout is None or not layout.shaped else layout.split(point_id)

    def stop(shape_list, reason: str, note: str = "") -> None:
        for shape in shape_list:
            summaries[shape].stopped, summaries[shape].note = reason, note

    if not settings.ground_truth:
        stop(shapes, plan_rules.FAST_TIMER)
        return rows, summaries
    if budget <= 0:
        return rows, summaries
    started = clock()
    touched: set[int] = set()
    active = list(shapes)
    session = 0
    while True:
        contenders, reps = {}, rep_counts(rows, layout)
        for shape in list(active):
            decision = _decide(of_shape(rows, shape), settings.stat)
            at_shape = {c: reps.get(point(c, shape), 0) for c in decision.members}
            reason = plan_rules.stop_reason(decision, at_shape, max_reps)
            if reason is not None:
                stop([shape], reason)
                active.remove(shape)
            else:
                contenders[shape] = plan_rules.session_configs(decision, at_shape, max_reps)
        if not active:
            break
        points = [point(c, shape) for shape, configs in contenders.items() for c in configs]
        left = budget - (clock() - started)
        plan = plan_rules.plan_session(points, reps, next_reps(rows, layout), max_reps, left, cost)
        if plan is None:
            stop(
                active,
                plan_rules.BUDGET,
                f"not started: session {session + 1} would cost a start-up (~{cost.startup_s:.1f} s"
                f"{'' if cost.measured else ', assumed'}) and {cost.visit_s * len(points):.2f} s a round "
                f"over {len(points)} contenders, and {max(left, 0.0):.1f} s of the budget are left",
            )
            break
        session += 1
        began = clock()
        entries = {
            shape: {
                "configs": list(configs),
                "rounds": plan.rounds,
                "first_rep": {str(c): plan.first_rep[point(c, shape)] for c in configs},
                "expected_s": plan.expected_s,
            }
            for shape, configs in contenders.items()
        }
        for shape, entry in entries.items():
            summaries[shape].history.append(entry)
            summaries[shape].sessions += 1
        try:
            frame = measure(plan, session)
        except TargetChanged:
            raise  # not a session that failed: the target is not the one ranked any more (nothing more is measured)
        except NsprofError as exc:
            for entry in entries.values():
                entry.update(wall_s=clock() - began, kept=0)
            stop(active, plan_rules.FAILED, f"session {session} failed: {one_line(str(exc), 200)}")
            break
        wall = clock() - began
        kept = planned_rows(frame, plan, layout)
        kept_points = kept.assign(point=_points(kept, layout)).drop_duplicates(["point", "mode", "rep"])
        for shape, entry in entries.items():
            mine = {point(c, shape) for c in entry["configs"]}
            entry.update(wall_s=wall, kept=int(kept_points["point"].isin(mine).sum()))
            summaries[shape].reps += entry["kept"]
        cost = plan_rules.updated_cost(cost, wall, plan.visits)
        errors = frame.loc[frame["error"].notna()]
        errors = errors.assign(point=_points(errors, layout)).dropna(subset=["point"])
        if len(kept_points):
            rows = merge(rows, kept)
            touched.update(int(p) for p in kept_points["point"].unique())
        if len(errors) or not len(kept_points):
            why = "; ".join(
                f"{_where(*config_of(int(p)))}: {one_line(str(e), 120)}"
                for p, e in errors.drop_duplicates("point")[["point", "error"]].itertuples(index=False)
            )
            stop(
                active,
                plan_rules.FAILED,
                f"session {session} measured {len(kept_points)} of its {plan.visits} planned reps"
                + (f" ({why})" if why else "")
                + "; the ranking stands on the reps kept",
            )
            break
    final = rep_counts(rows, layout)
    for shape, summary in summaries.items():
        summary.wall_s = clock() - started
        mine = sorted(p for p in touched if config_of(p)[1] == shape)
        summary.reps_per_config = {config_of(p)[0]: final.get(p, 0) for p in mine}
    return rows, summaries


def _where(config_id: int, shape: int | None) -> str:
    return f"config {config_id}" if shape is None else f"config {config_id} at shape {shape}"
