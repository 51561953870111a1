"""One truth's rankings of a target, one per shape (nsprof.analysis.tune_report.Ranking): rank_truth
(the first pass, its adaptive reps, and each shape ranked on its own), rank_rows (one shape's)."""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace

from nsprof.analysis.adaptive import Plan, first_pass_cost, started_ahead
from nsprof.analysis.ranking import rank
from nsprof.analysis.tune_report import Ranking
from nsprof.drivers import registry
from nsprof.errors import Interrupted, NsprofError
from nsprof.measure import Measured
from nsprof.settings import Truth, TuneSettings
from nsprof.space import config_label
from nsprof.timers.specs import fast_timer_label
from nsprof.tune import measure
from nsprof.tune.measure import key_labels, shape_keys
from nsprof.tune.stored import Stored, measure_stored

__all__ = ["rank_rows", "rank_truth", "worker_ahead"]


def rank_truth(
    target: str,
    space,
    truth: Truth,
    settings: TuneSettings,
    points: list[int],
    on_progress,
    notes: list[str] | None = None,
    stage=None,
    ahead=None,
) -> dict:
    """Rank the points `points` of `space` (nsprof.schema.Points: config ids for a target without
    shapes) under one truth (a ground truth, a variant such as ncu@base-warm, or a fast timer),
    each shape on its own: {shape: Ranking} for every shape of shape_keys(space), measured in
    one session (through the results store unless settings.use_store is off), summarised per config
    and ranked by settings.stat. Raises when nothing was measured at any shape.

    Every ranking of a tune goes through here, one truth at a time. With `stage` (the progress
    bars' factory), the contenders left tied after the first pass get adaptive reps (within
    settings.budget_s for this truth: nsprof.adaptive), every shape's in the same sessions;
    without it (the cross-truth probes), none. `ahead`: a worker started ahead for the first pass
    (nsprof.session.ahead.Ahead: a later truth's, a probe's), or None."""
    notes = [] if notes is None else notes
    clock = _FirstPassClock(on_progress, settings)
    runs: list[Measured] = []
    # without a store, the first pass's rows as they come (`whole` once it ended): an interrupt's part
    finished = SimpleNamespace(frames=[], whole=False)
    try:
        rows, adaptive, first_pass = _measured(
            target, space, truth, settings, points, clock, notes, runs, stage, ahead, finished
        )
    except KeyboardInterrupt:
        if settings.use_store or not finished.frames:  # the store holds what was measured
            raise
        raise Interrupted(_part(space, truth, settings, finished, notes)) from None
    # What the first pass's sessions said of how they ran, and the temporary folder a session keeps
    # when a config failed (its logs say why).
    kept = [m.work_dir for m in runs if settings.work_dir is None and m.work_dir is not None]
    kept_notes = [note for m in runs for note in m.notes] + [
        f"the reports and logs of a run with failed configs are kept in {folder}" for folder in kept
    ]
    results = _per_shape(space, truth, settings, rows, (notes, kept_notes), adaptive, first_pass)
    if all(result.best_config_id is None for result in results.values()):
        _nothing_measured(rows, kept)
    return results


def _part(space, truth: Truth, settings: TuneSettings, finished, notes: list[str]) -> dict:
    """{shape: Ranking} of the rows an interrupted truth finished (`finished.frames`: its first pass's,
    `whole` once that pass ended: the adaptive reps were interrupted), each said to be a part."""
    import pandas as pd

    said = (
        "interrupted during the adaptive reps: ranked from the first pass alone"
        if finished.whole
        else "interrupted: ranked from the configs measured before it; the rest were not measured"
    )
    rows = pd.concat(finished.frames, ignore_index=True)
    return _per_shape(space, truth, settings, rows, ([*notes, said], []), {}, (None, None))


def _measured(
    target: str,
    space,
    truth: Truth,
    settings: TuneSettings,
    points,
    clock,
    notes,
    runs,
    stage,
    ahead,
    finished,
):
    """rank_truth's measurements: the rows of the first pass and of the adaptive reps, the adaptive
    summaries, and the first pass's (wall time, timing). `finished.frames` gets the first pass's rows as
    they come, without a store (all of them, `whole`, once it ended)."""
    adaptive: dict = {}
    with contextlib.ExitStack() as held:  # a --resume --wait's turn, through the adaptive reps (tune.turn)
        aheads = _aheads(target, truth, settings, stage, held)  # importing while the first pass runs
        if ahead is not None:  # ended with this truth's ranking, where no session took it
            held.callback(ahead.close)
        rows, stored = measure_first_pass(
            target, space, truth, settings, points, clock.timed, notes, on_measured=runs.append, held=held,
            on_turn=clock.restart, ahead=ahead, on_rows=finished.frames.append,
        )  # fmt: skip
        finished.frames, finished.whole = [rows], True
        first_pass = (clock.elapsed(), _timing(runs[0]) if runs else None)
        if stage is not None and settings.cluster is not None and truth.profiler:
            notes.append("no adaptive reps: they are not spread over a cluster yet (--devices, --scheduler)")
        elif stage is not None and stored is not None and stored.missing_tool:
            notes.append(f"no adaptive reps: {stored.missing_tool}")
        elif stage is not None:
            cost = clock.cost()
            if aheads is not None and aheads.ready:  # a session's start-up is mostly done ahead
                in_worker = ahead is not None and ahead.handed  # the first pass compiled in its worker
                cost = started_ahead(cost, (first_pass[1] or {}).get("phases"), in_worker)
            rows, adaptive = _adaptive(
                target, space, truth, settings, rows, stored, cost, stage, held, aheads
            )
    return rows, adaptive, first_pass


def measure_first_pass(
    target: str,
    space,
    truth: Truth,
    settings: TuneSettings,
    points,
    on_progress,
    notes,
    *,
    on_measured=None,
    ahead=None,
    held=None,
    on_turn=None,
    on_rows=None,
):
    """The first pass's rows under `truth`, through the results store unless settings.use_store is off, and
    the store's context for adaptive sessions (None without a store). on_measured: each session's Measured;
    ahead: a worker started ahead for it, or None; with a store, held (the ExitStack a --resume --wait's turn
    is held in: nsprof.tune.turn) and on_turn (called once the turn is taken); without, on_rows (the rows as
    they come)."""
    if settings.use_store:
        return measure_stored(
            target, space, truth, settings, points, on_progress, notes, on_measured=on_measured,
            held=held, on_turn=on_turn, ahead=ahead,
        )  # fmt: skip
    rows = measure.measure_rows(
        target,
        len(space.configs),
        truth,
        settings,
        points,
        on_progress,
        on_rows=on_rows,
        n_shapes=space.points.n_shapes,
        on_measured=on_measured,
        space=space,
        ahead=ahead,
    )
    return rows, None


def unmeasured_shape(shape: int, label: str) -> str:
    """The note of a shape at which no config was measured (a tune's, and its re-read's)."""
    return f"no config was measured at shape {shape} ({label})"


def _per_shape(space, truth: Truth, settings: TuneSettings, rows, notes, adaptive: dict, first_pass) -> dict:
    """Each shape's ranking of `rows`, {shape: Ranking}: its notes (`notes`: those before and those
    after the adaptive reps' line) and what its adaptive reps did; first_pass: its wall time and phases."""
    from nsprof.adaptive import of_shape

    results = {}
    for shape in shape_keys(space):
        summary = adaptive.get(shape)
        said = [summary.describe()] if summary is not None and truth.profiler else []
        before, after = notes
        result = rank_rows(
            space.configs,
            truth,
            settings,
            of_shape(rows, shape),
            [*before, *said, *after],
            summary,
            first_pass[0],
            _phases_at(first_pass[1], space.points, shape),
        )
        if shape is not None and result.best_config_id is None:
            result.notes.append(unmeasured_shape(shape, space.shape_label(shape)))
        results[shape] = result
    return results


def _nothing_measured(rows, kept: list) -> None:
    """The error of a ranking with nothing measured at any shape (naming a kept folder of logs)."""
    from nsprof.profile import check_measured

    try:
        check_measured(rows)
    except NsprofError as exc:
        if not kept:
            raise
        from nsprof.session import kept_in

        raise kept_in(exc, kept[0]) from None


def _phases_at(phases: dict | None, layout, shape: int | None) -> dict | None:
    """The first pass's phases, its per-point build and measure times ("configs") those of `shape`'s points,
    keyed by their config id."""
    if phases is None or shape is None or "configs" not in phases:
        return phases
    configs = {}
    for point, times in phases["configs"].items():
        config_id, at = layout.split(int(point))
        if at == shape:
            configs[str(config_id)] = times
    return {**phases, "configs": configs}


def rank_rows(
    configs: list,
    truth: Truth,
    settings: TuneSettings,
    rows,
    notes: list[str],
    adaptive=None,
    first_pass_wall_s: float | None = None,
    first_pass_phases: dict | None = None,
) -> Ranking:
    """The Ranking of rows of one truth (and one shape) of a space whose configs are `configs`:
    summarised per config, ranked by settings.stat (tune's rankings, and a stored run's re-read:
    nsprof.tune.saved)."""
    from nsprof.profile import config_summary

    summary = config_summary(rows)
    if truth.profiler:
        conditions = registry.driver_class(truth.backend).conditions(settings.truth_profile(truth))
        if adaptive is None or not adaptive.reps:
            reps = _reps_held(summary, settings.reps)
        else:  # the first pass's reps, as the configs not measured again hold them (a resume's stored ones)
            others = summary[~summary["config_id"].astype(int).isin(list(adaptive.reps_per_config))]
            first = _reps_held(others, settings.reps) if not others.empty else f"{settings.reps} reps"
            reps = f"{first}, the contenders' up to {max(adaptive.reps_per_config.values())} (adaptive)"
        label = f"{truth.name}, mode {settings.mode}, {settings.stat} of {reps}" + (
            f", {conditions}" if conditions else ""
        )
    else:
        label = fast_timer_label(truth.timer, settings.stat, settings.timer_reps)
    table = rank(summary, settings.stat)
    table.insert(2, "config", [config_label(configs[int(c)]) for c in table["config_id"]])
    return Ranking(
        table,
        truth.name,
        truth.backend,
        label,
        settings.stat,
        key_labels(truth, settings),
        list(notes),
        adaptive=adaptive,
        first_pass_wall_s=first_pass_wall_s,
        first_pass_phases=first_pass_phases,
    )


def _timing(measured: Measured) -> dict | None:
    """The first pass's phases as tune --json gives them; None where the backend recorded none (Dask)."""
    from nsprof.session import timing_record

    if not measured.phases:
        return None
    return timing_record(measured.wall_s, measured.phases, measured.config_phases)


class _FirstPassClock:
    """The first pass's clock: its progress callback (`timed`) notes when each config finishes, and
    `cost` gives the cost model (nsprof.analysis.adaptive.first_pass_cost) from those times. Started
    again (`restart`) once a --resume --wait has its turn: waiting for another run is no start-up."""

    def __init__(self, progress, settings: TuneSettings) -> None:
        self.progress, self.settings = progress, settings
        self.restart()

    def restart(self) -> None:
        self.began, self.finished = time.monotonic(), []

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def timed(self, event: str, config_id: int, detail: str) -> None:
        if event in ("done", "fail"):
            self.finished.append((self.elapsed(), event == "done"))
        if self.progress is not None:
            self.progress(event, config_id, detail)

    def cost(self):
        warmup = self.settings.profile.warmup
        return first_pass_cost(self.elapsed(), self.finished, self.settings.reps, warmup)


def worker_ahead(
    target: str, truth: Truth, settings: TuneSettings, held: contextlib.ExitStack, several=False
):
    """A worker started ahead for a session of ground truth `truth` (nsprof.session.ahead): with `several`,
    the Aheads of its adaptive sessions (the first started now), else one Ahead (a later truth's first pass,
    a probe's); closed with `held` (a no-op for one a session took). None where no session would take one:
    a fast timer, a cluster, a server that would measure it, a profiler not found (a stored --resume), or
    one that cannot start."""
    if (
        not truth.profiler
        or settings.cluster is not None
        or measure.serving_worker(truth, settings) is not None
    ):
        return None
    from nsprof.session.ahead import Ahead, Aheads

    profile = settings.truth_profile(truth)
    try:
        driver = registry.get_driver(profile.backend)
        started = Aheads(target, profile, driver) if several else Ahead.start(target, profile, driver)
    except (OSError, NsprofError):  # the session's own start says why, where it has anything to measure
        return None
    held.callback(started.close)
    return started


def _aheads(target: str, truth: Truth, settings: TuneSettings, stage, held: contextlib.ExitStack):
    """The workers started ahead for `truth`'s adaptive sessions, closed with `held`; None where none can
    run (no `stage`, --budget-s 0, --max-reps no more than --reps) or none would be taken (worker_ahead)."""
    if stage is None or settings.budget_s <= 0 or settings.adaptive_max_reps <= settings.reps:
        return None
    return worker_ahead(target, truth, settings, held, several=True)


def _adaptive(
    target: str,
    space,
    truth: Truth,
    settings: TuneSettings,
    rows,
    stored: Stored | None,
    cost,
    stage,
    held,
    aheads=None,
):
    """Adaptive reps for every shape's contenders (nsprof.adaptive.refine), each session through the
    results store when there is one, in a worker started ahead when `aheads` (nsprof.session.ahead.Aheads)
    is given. held: the ExitStack a --resume --wait's turn is held in (Stored.turn_before_sessions).
    Returns the rows and {shape: AdaptiveSummary}."""
    import pandas as pd

    from nsprof.adaptive import refine

    n, layout = len(space.configs), space.points

    def session(plan: Plan, number: int):
        progress = stage(f"{truth.name} adaptive {number}", len(plan.configs))
        ahead = aheads.next() if aheads is not None else None
        if stored is not None:
            return stored.session(target, truth, n, plan, number, progress, space, ahead)
        return measure.measure_rows(
            target,
            n,
            truth,
            settings,
            list(plan.configs),
            progress,
            plan=plan,
            n_shapes=layout.n_shapes,
            space=space,
            ahead=ahead,
        )

    def merge(rows, kept):
        return stored.merged() if stored is not None else pd.concat([rows, kept], ignore_index=True)

    turn = None if stored is None else lambda: stored.turn_before_sessions(held)
    return refine(
        rows,
        settings,
        measure=session,
        merge=merge,
        cost=cost,
        layout=layout,
        turn=turn,
        worker=lambda: measure.serving_worker(truth, settings),
    )


def _reps_held(summary, asked: int) -> str:
    """The reps the ranked configs stand on ("3 reps", "3-7 reps"): those asked, or those a resume
    found stored (the reps are no part of the store's key)."""
    held = sorted({int(n) for n in summary.loc[summary["error"].isna(), "reps"]})
    if not held:
        return f"{asked} reps"
    return f"{held[0]} reps" if held[0] == held[-1] else f"{held[0]}-{held[-1]} reps"
