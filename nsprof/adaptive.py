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

__all__ = [
    "AdaptiveSummary",
    "Cost",
    "Plan",
    "next_reps",
    "of_shape",
    "planned_rows",
    "process_counts",
    "refine",
    "rep_counts",
]

# Why a close winner's check did not reach a second process: the worker that measured the reps before it
# measured the check too.
SAME_PROCESS = (
    "its check was measured by a worker of the same pid as the reps before it: the same process through "
    "nsprof serve"
)


def _points(rows, layout):
    """Each row's point id (nsprof.schema.Points): its config id for a target without shapes."""
    return rows["config_id"] if layout is None or not layout.shaped else layout.of_frame(rows)


def _per_point(rows, layout, distinct: list[str]) -> dict[int, int]:
    """How many distinct `distinct` values each measured point of tidy `rows` has."""
    measured = rows[rows["error"].isna() & rows["config_id"].notna() & rows["duration_ns"].notna()]
    if measured.empty:
        return {}
    measured = measured.assign(point=_points(measured, layout)).dropna(subset=["point"])
    per = measured.drop_duplicates(["point", *distinct]).groupby("point").size()
    return {int(c): int(n) for c, n in per.items()}


def rep_counts(rows, layout=None) -> dict[int, int]:
    """Each measured point's number of reps (distinct mode × rep) in tidy `rows`: by config id, or
    with `layout` (a target with shapes) by point id."""
    return _per_point(rows, layout, ["mode", "rep"])


def process_counts(rows, layout=None) -> dict[int, int]:
    """How many worker processes measured each point of tidy `rows`: its measured rows' distinct pids.
    Through nsprof serve every session, of every run, is a job of one worker: its runs in the results
    store are one process. A stored row without a pid (a store from before pids) counts as the process
    of its run (a run, first pass or adaptive session, measured it in one worker process unless served);
    rows without a pid or a run id, as one process. A pid used again by another process (a later one, one in
    a fresh pid namespace, or one on another host of a cluster) makes two processes one: it can only
    undercount them, which costs a check of a close winner that needed none, or says a check that did
    reach a second process did not (the safe side: the winner is then called unchecked)."""
    if "run_id" not in rows.columns:
        return _per_point(rows, layout, ["pid"])
    pid = rows["pid"] if "pid" in rows.columns else None
    process = rows["run_id"].astype("string").radd("run ")
    if pid is not None:
        process = process.where(pid.isna(), pid.astype("string").radd("pid "))
    return _per_point(rows.assign(process=process), layout, ["process"])


def next_reps(rows, layout=None) -> dict[int, int]:
    """Each measured point's first free rep number (one past its highest)."""
    measured = rows[rows["error"].isna() & rows["config_id"].notna() & rows["rep"].notna()]
    if measured.empty:
        return {}
    measured = measured.assign(point=_points(measured, layout)).dropna(subset=["point"])
    return {int(c): int(r) + 1 for c, r in measured.groupby("point")["rep"].max().items()}


def planned_rows(frame, plan: Plan, layout=None):
    """The measurement rows of `frame` that `plan` asked for: its points, each with the rep
    numbers planned for it. Anything else (a failure row, a row without a duration, another point, a rep
    outside the plan) is dropped."""
    import numpy as np

    ok = (
        frame["error"].isna()
        & frame["config_id"].notna()
        & frame["rep"].notna()
        & frame["duration_ns"].notna()
    )
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


class _Refinement:
    """What one refine() keeps between sessions: each shape's summary, the shapes still undecided,
    and the points that got adaptive reps."""

    def __init__(self, settings: TuneSettings, layout, clock: Callable[[], float], worker=None) -> None:
        self.settings, self.layout, self.clock = settings, layout, clock
        self._ask, self._worker, self._worker_asked = worker, None, False  # refine()'s worker (same_worker)
        self.max_reps = settings.adaptive_max_reps
        shapes = list(range(layout.n_shapes)) if layout is not None and layout.shaped else [None]
        self.summaries = {
            shape: AdaptiveSummary(
                stopped=plan_rules.OFF,
                max_reps=self.max_reps,
                budget_s=float(settings.budget_s),
                equivalence=settings.equivalence_pct / 100,
            )
            for shape in shapes
        }
        self.active = list(shapes)
        self.confirming: dict = {}  # each shape of the next session: its check's rounds (check_rounds; 0: none)
        self.checked: set = set()  # the shapes whose winner a session has checked
        self.in_one_process: set = set()  # those whose check ran in the process of the reps before it
        self.decisions: dict = {}  # each undecided shape's decision before the next session
        self.touched: set[int] = set()
        self.started = clock()

    def point(self, config_id: int, shape: int | None) -> int:
        return config_id if shape is None else self.layout.id(config_id, shape)

    def config_of(self, point_id: int) -> tuple[int, int | None]:
        layout = self.layout
        return (point_id, None) if layout is None or not layout.shaped else layout.split(point_id)

    def stop(self, shapes, reason: str, note: str = "") -> None:
        for shape in list(shapes):
            self.summaries[shape].stopped, self.summaries[shape].note = reason, note

    def checked_in(self, processes: dict[int, int]) -> None:
        """Tell each check session's history entry whether it reached a second process ("second_process":
        every contender it measured has reps of two processes now; processes: process_counts after it).
        Through nsprof serve it does not: the one worker that measured the check measured the reps before."""
        for shape in self.checked:
            entry = next(h for h in reversed(self.summaries[shape].history) if h["confirm"])
            if "second_process" not in entry:
                points = [self.point(int(c), shape) for c in entry["configs"]]
                entry["second_process"] = all(processes.get(p, 0) >= 2 for p in points)
                if not entry["second_process"]:
                    self.in_one_process.add(shape)

    def contenders(self, rows, reps: dict[int, int], processes: dict[int, int]) -> dict:
        """Each undecided shape's contenders for the next session, {shape: config ids}; a shape whose
        decision needs no more reps stops, with its reason. reps, processes: each point's rep count
        and how many processes measured it (rep_counts, process_counts)."""
        self.checked_in(processes)
        out = {}
        equivalence = self.settings.equivalence_pct / 100
        for shape in list(self.active):
            mine = of_shape(rows, shape)
            decision = _decide(mine, self.settings.stat)
            step = self.summaries[shape].clock_step_ns = plan_rules.clock_step_ns(mine["duration_ns"])
            measured = {*decision.members, *plan_rules.contenders(decision)}
            at_shape = {c: reps.get(self.point(c, shape), 0) for c in measured}
            by_processes = {c: processes.get(self.point(c, shape), 0) for c in measured}
            # None: a winner is checked once a run, whoever its rival is then
            seen = None if shape in self.checked else by_processes
            reason = plan_rules.stop_reason(decision, at_shape, self.max_reps, equivalence, seen, step)
            check = plan_rules.to_confirm(decision, seen, equivalence)
            if check and (pid := self.same_worker(mine, plan_rules.one_process(decision, seen))):
                why = f"nsprof serve's worker (pid {pid}) alone measured it or its rival, and would check it"
                self.stop([shape], plan_rules.SEPARATED, _unchecked(decision, why))
                self.active.remove(shape)
                continue
            rounds = plan_rules.check_rounds(decision, at_shape, seen) if check else 0
            if reason is not None:
                # a close winner that --max-reps leaves no room to check, or whose check stayed in its process
                room = f"--max-reps {self.max_reps} leaves no room for the {rounds} reps of a check"
                unreached = shape in self.in_one_process and plan_rules.to_confirm(
                    decision, by_processes, equivalence
                )
                why = room if check else SAME_PROCESS if unreached else ""
                self.stop([shape], reason, _unchecked(decision, why) if why else "")
                self.active.remove(shape)
            else:
                out[shape] = plan_rules.session_configs(decision, at_shape, self.max_reps)
                self.confirming[shape], self.decisions[shape] = rounds, decision
        return out

    def same_worker(self, rows, config_ids: list[int]) -> int | None:
        """The pid of the worker that would measure the next session (refine's `worker`, asked again after
        each session) where it alone measured any of `config_ids` in `rows` (one shape's): a check there
        leaves that config in one process."""
        if not self._worker_asked:
            self._worker, self._worker_asked = self._ask() if self._ask is not None else None, True
        pid = self._worker
        if pid is None or "pid" not in rows.columns:
            return None
        ok = rows["error"].isna() & rows["config_id"].isin(config_ids) & rows["duration_ns"].notna()
        alone = rows.loc[ok].groupby("config_id")["pid"].agg(lambda p: bool((p == pid).fillna(False).all()))
        return pid if bool(alone.any()) else None

    def this_session(self, contenders: dict) -> dict:
        """The shapes the next session measures: where winners are to be checked, only those whose
        checks have the fewest rounds (a check does exactly its one process's rounds, which a tie or a
        longer check beside it would change); else all."""
        checks = {shape: configs for shape, configs in contenders.items() if self.confirming[shape]}
        if not checks:
            return contenders
        rounds = min(self.confirming[shape] for shape in checks)
        return {shape: configs for shape, configs in checks.items() if self.confirming[shape] == rounds}

    def out_of_budget(self, shapes, note: str) -> None:
        """The budget left cannot pay the session of `shapes`: a tie stops there ("budget"); a winner that
        was to be checked stays the winner the first pass separated, said to be unchecked."""
        for shape in shapes:
            if self.confirming[shape]:
                self.stop([shape], plan_rules.SEPARATED, _unchecked(self.decisions[shape], note))
            else:
                self.stop([shape], plan_rules.BUDGET, note)
            self.active.remove(shape)

    def plan(
        self, contenders: dict, points: list[int], reps: dict, rows, left: float, cost: Cost
    ) -> Plan | None:
        """The next session over `points` (contenders' point ids), or None where the budget left
        cannot pay it; a session that only checks winners (to_confirm) does their check's rounds."""
        confirm = max(self.confirming[shape] for shape in contenders)  # one length a session (this_session)
        nexts = next_reps(rows, self.layout)
        return plan_rules.plan_session(points, reps, nexts, self.max_reps, left, cost, confirm=confirm)

    def open(self, contenders: dict, plan: Plan) -> dict:
        """Each shape's history entry of the session about to run, {shape: entry}."""
        entries = {
            shape: {
                "configs": list(configs),
                "rounds": plan.rounds,
                "first_rep": {str(c): plan.first_rep[self.point(c, shape)] for c in configs},
                "expected_s": plan.expected_s,
                "confirm": bool(self.confirming[shape]),  # checks a close winner in a second process
            }
            for shape, configs in contenders.items()
        }
        for shape, entry in entries.items():
            self.summaries[shape].history.append(entry)
            self.summaries[shape].sessions += 1
            if entry["confirm"]:
                self.checked.add(shape)
        return entries

    def run(self, measure: Callable[[Plan, int], object], plan: Plan, number: int, entries: dict):
        """measure()'s rows of session `number` and its wall time; no rows (None) where it failed:
        every shape still undecided stops there, its entry told so."""
        began = self.clock()
        try:
            frame = measure(plan, number)
        except TargetChanged:
            raise  # not a session that failed: the target is not the one ranked any more (nothing more is measured)
        except NsprofError as exc:
            for entry in entries.values():
                entry.update(wall_s=self.clock() - began, kept=0)
            self.stop(self.active, plan_rules.FAILED, f"session {number} failed: {one_line(str(exc), 200)}")
            return None, 0.0
        return frame, self.clock() - began

    def take(self, frame, plan: Plan, entries: dict, wall: float, number: int):
        """A session's rows as refine keeps them (planned_rows), each shape's entry told what it kept;
        and the note to stop on when a point failed or nothing was kept (None: go on)."""
        layout = self.layout
        kept = planned_rows(frame, plan, layout)
        self._worker_asked = False  # ask again before the next check: a server may have ended meanwhile
        kept_points = kept.assign(point=_points(kept, layout)).drop_duplicates(["point", "mode", "rep"])
        for shape, entry in entries.items():
            mine = {self.point(c, shape) for c in entry["configs"]}
            entry.update(wall_s=wall, kept=int(kept_points["point"].isin(mine).sum()))
            self.summaries[shape].reps += entry["kept"]
        self.touched.update(int(p) for p in kept_points["point"].unique())
        errors = frame.loc[frame["error"].notna()]
        errors = errors.assign(point=_points(errors, layout)).dropna(subset=["point"])
        reps_kept, failed = kept_points.groupby("point")["rep"].nunique(), set(errors["point"])
        short = [p for p in plan.configs if reps_kept.get(p, 0) < plan.rounds and p not in failed]
        if not len(errors) and not short:
            return kept, None
        why = "; ".join(
            [
                f"{_where(*self.config_of(int(p)))}: {one_line(str(e), 120)}"
                for p, e in errors.drop_duplicates("point")[["point", "error"]].itertuples(index=False)
            ]
            + [f"{_where(*self.config_of(int(p)))}: reps without a duration" for p in short]
        )
        note = (
            f"session {number} measured {len(kept_points)} of its {plan.visits} planned reps"
            + (f" ({why})" if why else "")
            + "; the ranking stands on the reps kept"
        )
        return kept, note

    def finish(self, rows) -> dict:
        final = rep_counts(rows, self.layout)
        for shape, summary in self.summaries.items():
            summary.wall_s = self.clock() - self.started
            mine = sorted(p for p in self.touched if self.config_of(p)[1] == shape)
            summary.reps_per_config = {self.config_of(p)[0]: final.get(p, 0) for p in mine}
        return self.summaries


def _budget_note(number: int, cost: Cost, points: int, left: float) -> str:
    return (
        f"not started: session {number} would cost a start-up (~{cost.startup_s:.1f} s"
        f"{'' if cost.measured else ', assumed'}) and {cost.visit_s * points:.2f} s a round "
        f"over {points} contenders, and {max(left, 0.0):.1f} s of the budget are left"
    )


def refine(
    rows,
    settings: TuneSettings,
    *,
    measure: Callable[[Plan, int], object],
    merge: Callable[[object, object], object],
    cost: Cost,
    layout=None,
    clock: Callable[[], float] = time.monotonic,
    turn: Callable[[], object | None] | None = None,
    worker: Callable[[], int | None] | None = None,
) -> tuple[object, dict]:
    """Adaptive reps over the first pass's tidy `rows`; returns all rows and what was done at each
    shape, {shape: AdaptiveSummary} ({None: ...} for a target without shapes).

    With `layout` (nsprof.schema.Points of a target with shapes) each shape is decided on its own,
    and one session measures every shape's contenders together: its plan names point ids.
    measure(plan, session_number) runs one interleaved session and returns its tidy rows (tune's
    goes through the results store); merge(rows, kept) returns the rows with a session's kept rows
    added (tune's reads them back from the store); cost: the first pass's (first_pass_cost). turn():
    called once, before the first session, once one is planned (a --resume --wait takes its turn
    there; one with no session to run takes none); returns the rows to decide on again (another run
    was waited for and may have stored reps meanwhile: the budget starts again too), or None.
    worker(): the pid of every session's worker where known ahead (nsprof serve's), else None."""
    state = _Refinement(settings, layout, clock, worker)
    if not settings.ground_truth:
        state.stop(state.summaries, plan_rules.FAST_TIMER)
        return rows, state.summaries
    budget, number = float(settings.budget_s), 0
    if budget <= 0:
        return rows, state.summaries
    while True:
        reps = rep_counts(rows, layout)
        contenders = state.this_session(state.contenders(rows, reps, process_counts(rows, layout)))
        if not contenders:
            break
        points = [state.point(c, shape) for shape, configs in contenders.items() for c in configs]
        left = budget - (clock() - state.started)
        plan = state.plan(contenders, points, reps, rows, left, cost)
        if plan is None:  # the other shapes' ties and checks may fit a session of their own
            state.out_of_budget(contenders, _budget_note(number + 1, cost, len(points), left))
            continue
        fresh, turn = (turn() if turn is not None else None), None  # only for a session that will run
        if fresh is not None:
            rows, state = fresh, _Refinement(settings, layout, clock, worker)
            continue
        number += 1
        entries = state.open(contenders, plan)
        frame, wall = state.run(measure, plan, number, entries)
        if frame is None:
            break
        kept, failed = state.take(frame, plan, entries, wall, number)
        cost = plan_rules.updated_cost(cost, wall, plan.visits)
        if len(kept):
            rows = merge(rows, kept)
        if failed is not None:
            state.stop(state.active, plan_rules.FAILED, failed)
            break
    return rows, state.finish(rows)


def _unchecked(decision, why: str) -> str:
    return (
        f"config {decision.config_id} is {decision.margin:.1%} clear of config {decision.second} in one "
        f"process only: not checked in a second ({why})"
    )


def _where(config_id: int, shape: int | None) -> str:
    return f"config {config_id}" if shape is None else f"config {config_id} at shape {shape}"
