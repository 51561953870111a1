"""`nsprof tune`: rank every config of a target by ground truth (or a fast timer).

    ranked = tune("examples/gemm_tilelang.py:space", TuneSettings(backend="ncu", mode="graph"))
    ranked.best_config, ranked.table

Orchestration over nsprof.measure's Backends: ground truths (ncu, nsys, or any registered
driver) run through nsprof.profile (compile, then GroundTruth); fast timers (graph, cupti,
event and their variants) through FastTimers. One path for every target: a target without
shapes is one shape, and every step works per shape:

- the first pass measures every (shape, config) point in one session per truth, through the
  results store (resume per point), then ranks each shape on its own (rank_truth);
- adaptive reps measure every shape's contenders in the same interleaved sessions (nsprof.adaptive);
- `prescreen` ranks each shape with a fast timer first and sends each shape's best
  `prescreen_top` to the ground truth;
- several truths are compared at each shape, and a disagreement is explained by probes that
  measure every disagreeing shape's contenders together (cross_truth);
- the tuner's own pick and the feed-back, per shape (nsprof.feedback).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nsprof import feedback
from nsprof.analysis import crosstruth
from nsprof.analysis.adaptive import AdaptiveSummary, Plan, first_pass_cost
from nsprof.analysis.confidence import Decision, decide
from nsprof.analysis.ranking import rank
from nsprof.cluster import sharded
from nsprof.drivers import registry
from nsprof.errors import NsprofError, TargetChanged
from nsprof.measure import FastTimers, GroundTruth, Measured, Request
from nsprof.reports.checks import one_line
from nsprof.schema import Failure
from nsprof.settings import TIMER_BACKENDS, Truth, TuneSettings
from nsprof.space import config_label

__all__ = [
    "TIMER_BACKENDS",
    "CrossTruth",
    "TuneResult",
    "TuneSettings",
    "check_truths",
    "key_labels",
    "measure_rows",
    "rank_truth",
    "retryable",
    "tune",
]


@dataclass
class TuneResult:
    # ranked DataFrame (nsprof.analysis.ranking.rank): rank, config_id, config, value_ns, spread,
    # cycles, clock, vs_best, ci_low_ns, ci_high_ns, ci_coverage, tied_with_best
    table: object
    configs: list
    backend: str
    label: str  # how the numbers were taken, in words
    prescreen: object | None = None  # the prescreen's ranked table, when used
    notes: list[str] = field(default_factory=list)
    # What the target's own autotuner picks with its own timer, when the Space can say (Triton).
    tuner_pick: dict | None = None
    # Steps after the ranking that failed (the tuner's own pick, the feed-back): the ranking
    # stands, and the command exits non-zero after printing it.
    errors: list[str] = field(default_factory=list)
    stat: str = "median"  # the statistic ranked by
    truth: str = (
        ""  # the truth ranked under (a backend, or a variant such as ncu@base-warm); "" for `backend`
    )
    labels: dict = field(default_factory=dict)  # the conditions its rows were taken under (key_labels)
    # Cross-truth tuning (the result of tune() is the deploy truth's ranking; these are set on it):
    # every truth's ranking in --truth order (this one among them), the comparison, and the deploy truth.
    truths: dict = field(default_factory=dict)
    cross: CrossTruth | None = None
    deploy: str = ""

    @property
    def rankings(self) -> dict:
        """Every truth's ranking, {truth: TuneResult}, in the order ranked (just this one when alone)."""
        return self.truths or {self.truth or self.backend: self}

    # What the adaptive reps did: sessions, reps, why they stopped (nsprof.adaptive); None: not tried
    adaptive: AdaptiveSummary | None = None
    first_pass_wall_s: float | None = None  # the first pass's wall time (measuring, through the store)
    # A target with shapes: the shape this ranking is of (its index in the Space's shapes, and the
    # shape itself), and on the result tune() returns (the first shape's) every shape's, in order.
    shape: int | None = None
    shape_value: object = None
    shapes: list = field(default_factory=list)
    # Where the first pass's session time went (nsprof.session.timing_record); None: nothing ran
    first_pass_phases: dict | None = None

    @property
    def decision(self) -> Decision:
        """A winner, a tie (its members, in rank order), or an untested best (fewer than 2 reps):
        nsprof.analysis.confidence.decide over the ranked table."""
        return decide(self.table, self.stat)

    @property
    def tie_set(self) -> list[int]:
        """The best and every config tied with it, in rank order."""
        return list(self.decision.members)

    @property
    def best_config_id(self) -> int | None:
        """The config fed back: the decision's (out of a tie, by its stated rule)."""
        return self.decision.config_id

    @property
    def best_config(self):
        best = self.best_config_id
        return None if best is None else self.configs[best]


@dataclass
class CrossTruth:
    """What tune --truth A,B found: each pair of truths compared (nsprof.analysis.crosstruth.Pair,
    in --truth order), and for each pair that disagrees, what explains it (Explanation)."""

    pairs: list = field(default_factory=list)
    explanations: list = field(default_factory=list)


def truth_labels(truth: Truth, settings: TuneSettings) -> dict[str, str]:
    """The conditions ground truth `truth`'s rows are labelled with (its driver's labels)."""
    return registry.driver_class(truth.backend).labels(settings.truth_profile(truth))


def check_truths(settings: TuneSettings) -> None:
    """Every truth of `settings` is one its driver can measure: a variant (ncu@base-warm, ...) only where
    the driver controls clocks and caches. An NsprofError in one line otherwise."""
    for truth in settings.truths:
        if truth.condition:
            registry.check_condition(truth.backend, truth.name)


def key_labels(truth: Truth, settings: TuneSettings) -> dict[str, str]:
    """The conditions a measurement is taken under (results-store key fields)."""
    if truth.profiler:
        return {"mode": settings.mode, **truth_labels(truth, settings)}
    name = truth.timer
    return {
        "mode": "graph" if name.startswith("graph") else "direct",
        "clock_control": "none",
        "cache_control": "all" if name.endswith("cold") else "none",
    }


# The kinds of failure that say nothing about the config itself: the session gave up on it (restarts
# spent, a worker that failed to start, a report lost again and again), something outside killed the
# worker, or the profiler or host could not measure (nsprof.schema.FAILURE_KINDS).
_NOT_THE_CONFIG = ("not_run", "lost", "tool")


def retryable(failure: Failure, timeout_s: float) -> bool:
    """Whether a stored failure is worth measuring again under `timeout_s` without being asked: by its
    kind; a timeout when `timeout_s` is longer than the bound it ran past (resumed with a longer --timeout)."""
    if failure.kind == "timeout":
        return failure.timeout_s is not None and failure.timeout_s < timeout_s
    return failure.kind in _NOT_THE_CONFIG


def _a_timer_ranks(settings: TuneSettings) -> bool:
    """Whether a fast timer is one of the rankings: its sessions (FastTimers) do not compile, so
    tune compiles first (a ground truth's session compiles beside itself: profile_result)."""
    return not all(truth.profiler for truth in settings.ranked_truths)


def shape_keys(space) -> list[int | None]:
    """The shapes a tune ranks on their own, in order: each shape index of a target with shapes,
    or [None]: a target without shapes is one shape."""
    layout = space.points
    return list(range(layout.n_shapes)) if layout.shaped else [None]


def measure_rows(
    target: str,
    n: int,
    truth: Truth,
    settings: TuneSettings,
    config_ids: list[int],
    on_progress,
    on_rows: Callable[[object], None] | None = None,
    on_device: Callable[[dict | None], None] | None = None,
    plan: Plan | None = None,
    n_shapes: int = 0,
    on_measured: Callable[[Measured], None] | None = None,
    space=None,
):
    """Tidy rows for `config_ids` under `truth`: kernels for ground truths (compiled first, see
    nsprof.profile.profile_result); for a fast timer one row per config holding the timer's
    statistic as rep 0. Failed configs are rows with an error.

    With `n_shapes` (a target with shapes), config_ids are point ids (nsprof.schema.Points): every
    (shape, config) pair in the one session; the rows carry their shape.

    on_rows(frame) gets whole configs' rows as they are known (each worker run's, and on Ctrl-C
    or SIGTERM what was finished), so that they can be stored before the run ends. on_device(device)
    gets what the worker measured on ({"uuid", "name"}, or None where it did not say).
    on_measured gets the whole Measured (its phases among the rest).

    With `plan` (a ground truth only): one interleaved session of adaptive reps over plan.configs
    (nsprof.measure.Request.plan) instead of a first pass over config_ids.

    `space`: the target as tune read it (nsprof.space.load_target), under whose configs the rows are
    stored: every worker checks that it loads the same (Space.as_read), or measures nothing
    (nsprof.errors.TargetChanged). None: read here (profile_result), or not checked.
    """
    expect = space.as_read() if space is not None else None
    if plan is not None:
        request = Request(target, plan.configs, n, n_shapes, expect=expect, plan=plan)
        measured = GroundTruth(settings.truth_profile(truth)).measure(
            request, on_progress=on_progress, on_rows=on_rows
        )
    elif truth.profiler:
        from nsprof.profile import profile_result

        profile_settings = settings.truth_profile(truth)
        measured: Measured = profile_result(
            target,
            profile_settings,
            **({"points": config_ids} if n_shapes else {"config_ids": config_ids}),
            on_progress=on_progress,
            on_rows=on_rows,
            space=space,
            backend=sharded(GroundTruth(profile_settings), settings.cluster) if settings.cluster else None,
        )
    else:
        from nsprof.session import work_folder

        name = truth.timer
        with work_folder(settings.work_dir, "nsprof-tune-") as work_dir:  # a temporary one is removed
            timers = sharded(
                FastTimers(
                    [name],
                    settings.profile,
                    work_dir / f"timer-{name}",
                    timer_reps=settings.timer_reps,
                    stat=settings.stat,
                    labels=key_labels(truth, settings),
                    failure_source=name,
                ),
                settings.cluster,
            )
            request = Request(target, config_ids, n, n_shapes, expect=expect)
            measured = timers.measure(request, on_progress=on_progress, on_rows=on_rows)
        if settings.work_dir is None:
            measured.work_dir = None
    if on_device is not None:
        on_device(measured.device)
    if on_measured is not None:
        on_measured(measured)
    return measured.frame


ADAPTIVE_RUN = "adaptive_session"  # the key in a stored run's settings that marks a session of adaptive reps


def _select_stored(stored, wanted_json: dict[int, str], adaptive_runs: set[int]):
    """Of stored rows of one shape, those tune ranks: only rows taken of today's configs (an id
    names another config once the space is edited); of each config its latest first-pass run
    (resumed runs can hold a config twice) and the adaptive sessions stored after it, which add
    reps to it; a rep held twice is the later run's."""
    import pandas as pd

    today = [wanted_json.get(int(c)) == text for c, text in zip(stored["config_id"], stored["config_json"])]
    stored = stored[pd.Series(today, index=stored.index, dtype=bool)]
    adaptive = stored["run_id"].isin(list(adaptive_runs))
    base = stored[~adaptive].groupby("config_id")["run_id"].max()
    first = stored["config_id"].map(base)
    keep = (stored["run_id"] == first) | (adaptive & first.notna() & (stored["run_id"] > first))
    stored = stored[keep.fillna(False).astype(bool)]
    latest_rep = stored.groupby(["config_id", "mode", "rep"], dropna=False)["run_id"].transform("max")
    return stored[stored["run_id"] == latest_rep]


def _recorded(store, run_id: int, measure: Callable[[], object]):
    """measure()'s rows, with the store's run `run_id` finished as what happened: ok, nothing
    measured, interrupted (Ctrl-C, SIGTERM: re-raised) or failed."""
    status = "failed"
    try:
        rows = measure()
        status = "ok" if rows["error"].isna().any() else "nothing measured"
        return rows
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.finish_run(run_id, status)


class _Stored:
    """A truth's rows in the results store: the key of the space's rows (`group`), today's configs
    (`wanted_json`) and the shapes' JSON (one "" for a target without shapes). Stores a session's
    rows point by point, and reads back the rows to rank."""

    def __init__(
        self, settings: TuneSettings, space, group: dict, wanted_json: dict[int, str], gpu_uuid: str
    ):
        from nsprof.space import shape_json

        self.settings, self.group, self.wanted_json, self.gpu_uuid = settings, group, wanted_json, gpu_uuid
        self.layout = space.points
        self.shape_jsons = {
            shape: "" if shape is None else shape_json(space.shapes[shape]) for shape in shape_keys(space)
        }

    def key(self, config_id: int, shape: int | None):
        from nsprof.store import MeasurementKey

        return MeasurementKey(
            config_id=config_id,
            config_json=self.wanted_json[config_id],
            shape_json=self.shape_jsons[shape],
            shape=shape,
            **self.group,
        )

    def add(self, store, run_id: int, frame, done: set | None = None) -> None:
        """Each point's rows of `frame` in one transaction (each once, with `done`: Ctrl-C or SIGTERM
        keeps every point stored as soon as it was whole)."""
        import pandas as pd

        for (shape, config_id), rows in frame.groupby(["shape", "config_id"], sort=True, dropna=False):
            if pd.isna(config_id):
                continue
            point = (None if pd.isna(shape) else int(shape), int(config_id))
            if (done is not None and point in done) or point[1] not in self.wanted_json:
                continue
            if point[0] not in self.shape_jsons:
                continue  # a row of another shape than the target has: never stored under one of its
            store.add(run_id, self.key(point[1], point[0]), rows)
            if done is not None:
                done.add(point)

    def rows(self, store):
        import pandas as pd

        runs = store.runs()
        adaptive = {
            int(i)
            for i, text in zip(runs["id"], runs["settings_json"])
            if isinstance(text, str) and f'"{ADAPTIVE_RUN}"' in text
        }
        per_shape = [
            _select_stored(
                store.frame(**self.group, shape_json=text, config_id=list(self.wanted_json)),
                self.wanted_json,
                adaptive,
            )
            for text in self.shape_jsons.values()
        ]
        return per_shape[0] if len(per_shape) == 1 else pd.concat(per_shape, ignore_index=True)

    def session(self, target: str, truth: Truth, n: int, plan: Plan, number: int, on_progress, space=None):
        """One adaptive session, stored as a run of its own (marked ADAPTIVE_RUN), each point's
        rows in one transaction as the session hands them over; returns its rows."""
        from nsprof.adaptive import planned_rows
        from nsprof.store import ResultStore

        with ResultStore(self.settings.store) as store:
            labels = {
                **self.settings.record(),
                ADAPTIVE_RUN: number,
                "configs": list(plan.configs),
                "rounds": plan.rounds,
            }
            run_id = store.start_run(target=target, settings=labels, gpu_uuid=self.gpu_uuid, **self.group)

            def store_rows(frame) -> None:
                self.add(store, run_id, planned_rows(frame, plan, self.layout))

            return _recorded(
                store,
                run_id,
                lambda: measure_rows(
                    target,
                    n,
                    truth,
                    self.settings,
                    list(plan.configs),
                    on_progress,
                    on_rows=store_rows,
                    plan=plan,
                    n_shapes=self.layout.n_shapes,
                    space=space,
                ),
            )

    def merged(self):
        from nsprof.store import ResultStore

        with ResultStore(self.settings.store) as store:
            return self.rows(store)


def _by_shape(space, points: list[int]) -> dict[int | None, list[int]]:
    """The config ids among `points` at each shape (shape_keys order; a shape without any is left out)."""
    layout = space.points
    out: dict[int | None, list[int]] = {}
    for point in points:
        config_id, shape = layout.split(point)
        out.setdefault(shape, []).append(config_id)
    return {shape: out[shape] for shape in shape_keys(space) if shape in out}


def _measure_stored(
    target: str,
    space,
    truth: Truth,
    settings: TuneSettings,
    points: list[int],
    on_progress,
    notes: list[str],
    on_measured: Callable[[Measured], None] | None = None,
):
    """measure_rows through the results store: resume per point, one transaction per point, GPU lock.
    Returns the rows to rank (see _select_stored) and the _Stored context for adaptive sessions."""
    from nsprof.cluster import cluster_gpu
    from nsprof.host.gpu import gpu_of, which_gpu
    from nsprof.space import target_fingerprint
    from nsprof.store import ResultStore, config_json

    layout = space.points
    tool_version = GroundTruth(settings.truth_profile(truth)).tool_version() if truth.profiler else ""
    # A fast timer's row holds the statistic asked for, so that is part of what it measured. A truth's
    # variant (ncu@base-warm) is stored as its backend: its clock and cache labels say the rest.
    stored_backend = truth.backend if truth.profiler else f"{truth.backend}:{settings.stat}"
    gpu = which_gpu(0) if settings.cluster is None else cluster_gpu(settings.cluster)
    group = {
        "fingerprint": space.fingerprint or target_fingerprint(target),
        "gpu": gpu.key,
        "backend": stored_backend,
        "tool_version": tool_version,
        **key_labels(truth, settings),
    }
    wanted = _by_shape(space, points)
    wanted_json = {c: config_json(space.configs[c]) for configs in wanted.values() for c in configs}
    context = _Stored(settings, space, group, wanted_json, gpu.uuid)
    with ResultStore(settings.store) as store:
        todo = list(points)
        if settings.resume:
            todo = [
                layout.id(c, shape)
                for shape, configs in wanted.items()
                for c in store.missing(
                    group,
                    configs,
                    config_jsons=wanted_json,
                    retry_failed=settings.retry_failed,
                    retry_if=lambda failure: retryable(failure, settings.timeout_s),
                    shape_json=context.shape_jsons[shape],
                )
            ]
            unit = "(shape, config) pairs" if layout.shaped else "configs"
            notes.append(
                f"resumed: {len(points) - len(todo)} of {len(points)} {unit} came from the results store"
            )
        if todo:
            run_id = store.start_run(target=target, settings=settings.record(), gpu_uuid=gpu.uuid, **group)
            done: set = set()
            devices: list[dict | None] = []

            def measure():
                rows = measure_rows(
                    target,
                    len(space.configs),
                    truth,
                    settings,
                    todo,
                    on_progress,
                    on_rows=lambda frame: context.add(store, run_id, frame, done),
                    on_device=devices.append,
                    n_shapes=layout.n_shapes,
                    on_measured=on_measured,
                    space=space,
                )
                context.add(store, run_id, rows, done)  # what was not handed over yet
                return rows

            _recorded(store, run_id, measure)
            ran_on = gpu_of(devices[0] if devices else None)
            # A cluster's key names every worker's GPU (nsprof.cluster.cluster_gpu), while a run's
            # batches may have used only some of them: that is no reason to relabel.
            if settings.cluster is None and ran_on is not None and ran_on.uuid != gpu.uuid:
                # The worker measured on another GPU than nvidia-smi's numbering suggested
                # (CUDA_DEVICE_ORDER): its own word is the key.
                store.relabel_gpu(run_id, ran_on.key, ran_on.uuid)
                notes.append(
                    f"measured on {ran_on.key}, not {gpu.key or 'the GPU nvidia-smi names'}: stored as such"
                )
                group["gpu"] = ran_on.key
        return context.rows(store), context


def rank_truth(
    target: str,
    space,
    truth: Truth,
    settings: TuneSettings,
    points: list[int],
    on_progress,
    notes: list[str] | None = None,
    stage=None,
) -> dict:
    """Rank the points `points` of `space` (nsprof.schema.Points: config ids for a target without
    shapes) under one truth (a ground truth, a variant such as ncu@base-warm, or a fast timer),
    each shape on its own: {shape: TuneResult} for every shape of shape_keys(space), measured in
    one session (through the results store unless settings.use_store is off), summarised per config
    and ranked by settings.stat. Raises when nothing was measured at any shape.

    Every ranking of a tune goes through here, one truth at a time. With `stage` (the progress
    bars' factory), the contenders left tied after the first pass get adaptive reps (within
    settings.budget_s for this truth: nsprof.adaptive), every shape's in the same sessions;
    without it (the cross-truth probes), none."""
    import time

    from nsprof.adaptive import of_shape
    from nsprof.profile import check_measured

    notes = [] if notes is None else notes
    layout = space.points
    timed, cost_of_first_pass = _timed(on_progress, settings)
    began = time.monotonic()
    runs: list[Measured] = []
    if settings.use_store:
        rows, stored = _measure_stored(
            target, space, truth, settings, points, timed, notes, on_measured=runs.append
        )
    else:
        rows = measure_rows(
            target,
            len(space.configs),
            truth,
            settings,
            points,
            timed,
            n_shapes=layout.n_shapes,
            on_measured=runs.append,
            space=space,
        )
        stored = None
    first_pass_wall_s = time.monotonic() - began
    first_pass_phases = _timing(runs[0]) if runs else None
    adaptive: dict = {}
    if stage is not None and settings.cluster is not None and truth.profiler:
        notes.append("no adaptive reps: they are not spread over a cluster yet (--devices, --scheduler)")
    elif stage is not None:
        rows, adaptive = _adaptive(target, space, truth, settings, rows, stored, cost_of_first_pass(), stage)
    # A session keeps its temporary folder when a config failed (its logs say why): name it.
    kept = [m.work_dir for m in runs if settings.work_dir is None and m.work_dir is not None]
    kept_notes = [
        f"the reports and logs of a run with failed configs are kept in {folder}" for folder in kept
    ]
    results = {}
    for shape in shape_keys(space):
        summary = adaptive.get(shape)
        said = [summary.describe()] if summary is not None and truth.profiler else []
        result = _ranked(
            space,
            truth,
            settings,
            of_shape(rows, shape),
            [*notes, *said, *kept_notes],
            summary,
            first_pass_wall_s,
            first_pass_phases,
        )
        if shape is not None:
            result.shape, result.shape_value = shape, space.shapes[shape]
            if result.best_config_id is None:
                result.notes.append(f"no config was measured at shape {shape} ({space.shape_label(shape)})")
        results[shape] = result
    if all(result.best_config_id is None for result in results.values()):
        try:
            check_measured(rows)
        except NsprofError as exc:
            if not kept:
                raise
            from nsprof.session import kept_in

            raise kept_in(exc, kept[0]) from None
    return results


def _ranked(
    space,
    truth: Truth,
    settings: TuneSettings,
    rows,
    notes: list[str],
    adaptive=None,
    first_pass_wall_s: float | None = None,
    first_pass_phases: dict | None = None,
) -> TuneResult:
    """The TuneResult of rows of one truth (and one shape): summarised per config, ranked by settings.stat."""
    from nsprof.profile import config_summary

    summary = config_summary(rows)
    if truth.profiler:
        conditions = registry.driver_class(truth.backend).conditions(settings.truth_profile(truth))
        reps = (
            f"{settings.reps} reps"
            if adaptive is None or not adaptive.reps
            else f"{settings.reps} reps, the contenders' up to {max(adaptive.reps_per_config.values())} (adaptive)"
        )
        label = f"{truth.name}, mode {settings.mode}, {settings.stat} of {reps}" + (
            f", {conditions}" if conditions else ""
        )
    else:
        label = f"fast timer {truth.timer}, {settings.stat} of {settings.timer_reps} samples"
    table = rank(summary, settings.stat)
    table.insert(2, "config", [config_label(space.configs[int(c)]) for c in table["config_id"]])
    return TuneResult(
        table,
        space.configs,
        truth.backend,
        label,
        None,
        notes,
        stat=settings.stat,
        truth=truth.name,
        labels=key_labels(truth, settings),
        adaptive=adaptive,
        first_pass_wall_s=first_pass_wall_s,
        first_pass_phases=first_pass_phases,
    )


def _timing(measured: Measured) -> dict | None:
    """The first pass's phases as tune --json gives them; None where the backend recorded none (Dask)."""
    from nsprof.session import timing_record

    if not measured.phases:
        return None
    return timing_record(
        measured.wall_s,
        measured.phases,
        measured.config_phases,
        precompile_s=getattr(measured, "precompile_s", 0.0),
    )


def _probes(
    probed: Truth, other: Truth, results: dict, settings: TuneSettings
) -> list[tuple[list[str], Truth]] | None:
    """The truths that measure like `probed` with each condition in which it differs from `other`
    set as `other` has it (one at a time, then all together): [(conditions changed, truth)];
    None when `probed`'s driver cannot change one of them (nsys: neither clocks nor caches)."""
    labels, goal = results[probed.name].labels, results[other.name].labels
    conditions = crosstruth.differing(labels, goal)
    subsets = [[c] for c in conditions] + ([list(conditions)] if len(conditions) > 1 else [])
    out = []
    for changed in subsets:
        wanted = {**labels, **{c: goal[c] for c in changed}}
        probe = Truth.of_labels(probed.backend, wanted)
        if probe == other:  # every condition changed: that is the other truth itself, not a probe
            continue
        got = truth_labels(probe, settings)
        if any(got.get(c) != wanted.get(c) for c in crosstruth.CONDITIONS):
            return None
        out.append((changed, probe))
    return out


def _timed(progress, settings: TuneSettings):
    """The first pass's progress callback, timing when each config finishes, and a function giving
    the cost model (nsprof.analysis.adaptive.first_pass_cost) from those times."""
    import time

    began = time.monotonic()
    finished: list[tuple[float, bool]] = []

    def timed(event: str, config_id: int, detail: str) -> None:
        if event in ("done", "fail"):
            finished.append((time.monotonic() - began, event == "done"))
        if progress is not None:
            progress(event, config_id, detail)

    def cost():
        return first_pass_cost(time.monotonic() - began, finished, settings.reps, settings.profile.warmup)

    return timed, cost


def _explain(
    target: str, space, a: Truth, b: Truth, pairs: dict, rankings: dict, settings: TuneSettings, stage
) -> dict:
    """Why truths `a` and `b` disagree, at each shape in `pairs` ({shape: crosstruth.Pair} of a and b):
    the contenders (both winners, both tie sets) measured again under one truth's backend with each
    condition in which the two differ set as the other has it, every shape's contenders in the same
    session per probe. `rankings`: {shape: {truth name: TuneResult}}. {shape: Explanation}."""
    some = rankings[next(iter(pairs))]
    contenders = {shape: crosstruth.contenders(p) for shape, p in pairs.items()}

    def unexplained(reason: str) -> dict:
        return {
            shape: crosstruth.Explanation(p, a, b.name, contenders[shape], reason=reason)
            for shape, p in pairs.items()
        }

    if not crosstruth.differing(some[a.name].labels, some[b.name].labels):
        return unexplained(
            f"{a.name} and {b.name} measure under the same clock and cache conditions: the tools themselves differ"
        )
    for probed, other in ((a, b), (b, a)):
        variants = _probes(probed, other, some, settings)
        if variants is not None:
            break
    else:
        return unexplained(
            f"neither {a.backend} nor {b.backend} can change the conditions in which they differ"
        )
    explanations = {
        shape: crosstruth.Explanation(p, probed, other.name, contenders[shape]) for shape, p in pairs.items()
    }
    layout = space.points
    points = [layout.id(c, shape) for shape, configs in contenders.items() for c in configs]
    for changed, probe in variants:
        try:
            ranked = rank_truth(target, space, probe, settings, points, stage(probe.name, len(points)), [])
        except TargetChanged:
            raise  # no probe of the target as read can be measured any more
        except NsprofError as exc:  # measured nothing there: say so, keep the others
            labels = truth_labels(probe, settings)
            for explanation in explanations.values():
                explanation.probes.append(
                    crosstruth.Probe(probe.name, changed, labels, None, [], crosstruth.UNKNOWN)
                )
                explanation.reason = one_line(str(exc), 200)
            continue
        for shape, explanation in explanations.items():
            goal = rankings[shape][other.name].table
            goal_winner, goal_ties = crosstruth.winner(goal, settings.stat)
            table = ranked[shape].table
            won, ties = crosstruth.winner(table, settings.stat)
            verdict = crosstruth.verdict(won, ties, goal_winner, goal_ties)
            explanation.probes.append(
                crosstruth.Probe(probe.name, changed, ranked[shape].labels, won, ties, verdict, table)
            )
            ratio = crosstruth.erratic(table, goal)
            if ratio is not None:
                explanation.warnings.append(
                    f"{probe.name} measured the contenders {ratio:.1f}x as long as {other.name} did: its "
                    "numbers look erratic on this machine, so its pick says little"
                )
    for explanation in explanations.values():
        explanation.cause = crosstruth.cause(explanation.probes)
    return explanations


def cross_truth(target: str, space, rankings: dict, settings: TuneSettings, stage) -> dict:
    """Every pair of settings' truths compared at each shape, in --truth order; each disagreeing pair
    explained (settings.explain) by probes of its contenders (_explain). `rankings`: {shape: {truth
    name: TuneResult}}; returns {shape: CrossTruth}."""
    crosses = {shape: CrossTruth() for shape in rankings}
    truths = settings.ranked_truths
    for i, a in enumerate(truths):
        for b in truths[i + 1 :]:
            disagree = {}
            for shape, results in rankings.items():
                pair = crosstruth.compare(
                    a.name, results[a.name].table, b.name, results[b.name].table, settings.stat
                )
                crosses[shape].pairs.append(pair)
                if pair.verdict == crosstruth.DISAGREE and settings.explain:
                    disagree[shape] = pair
            if disagree:
                explained = _explain(target, space, a, b, disagree, rankings, settings, stage)
                for shape, explanation in explained.items():
                    crosses[shape].explanations.append(explanation)
    return crosses


def tune(
    target: str,
    settings: TuneSettings | None = None,
    *,
    config_ids: list[int] | None = None,
    on_stage: Callable[[str, int], Callable[[str, int, str], None]] | None = None,
    space=None,
) -> TuneResult:
    """Rank every config under each truth of `settings` (rank_truth), at each shape of a target with
    shapes, compare the truths' winners when there are several (cross_truth), ask the target's
    tuner what it picks itself, and feed the deploy truth's ranking back to it. The result is the
    deploy truth's ranking, carrying every truth's (`truths`) and the comparison (`cross`); for a
    target with shapes, the first shape's, carrying every shape's in `shapes`. `space`: the
    target's Space where the caller has loaded it already."""
    from nsprof.profile import check_config_ids, precompile
    from nsprof.space import load_target

    settings = settings or TuneSettings()
    check_truths(settings)
    space = space or load_target(target)
    n = len(space.configs)
    wanted = list(range(n)) if config_ids is None else check_config_ids(config_ids, n)
    stage = on_stage or (lambda name, count: None)
    points = space.points.all(wanted)
    if settings.cluster is None and (
        settings.prescreen or _a_timer_ranks(settings) or settings.use_store and settings.resume
    ):
        # The fast timers (a prescreen, or a timer that ranks: FastTimers) do not compile; a resumed
        # first pass may measure nothing, and the adaptive sessions (a Request with a plan) do not
        # compile either (a cluster compiles each batch where it runs; otherwise each ground
        # truth's session compiles beside itself: profile_result)
        precompile(space, config_ids=points)
    prescreened = {}
    if settings.prescreen:
        points, prescreened = _prescreen(target, space, settings, points, stage)
    per_truth = {
        truth.name: rank_truth(
            target, space, truth, settings, points, stage(truth.name, len(points)), stage=stage
        )
        for truth in settings.ranked_truths
    }
    deploy = settings.deploy_truth.name
    rankings = {shape: {truth: per_truth[truth][shape] for truth in per_truth} for shape in shape_keys(space)}
    crosses = cross_truth(target, space, rankings, settings, stage) if len(per_truth) > 1 else {}
    results = []
    for shape, truths in rankings.items():
        result = truths[deploy]
        result.deploy, result.prescreen, result.cross = deploy, prescreened.get(shape), crosses.get(shape)
        if len(truths) > 1:
            result.truths = truths
        results.append(result)
    feedback.tuner_picks(
        target, space, results, settings
    )  # before the feed-back, which makes it pick nsprof's
    feedback.feed_back(target, space, results, settings)
    for result in results:
        _prescreen_notes(result, space, points)
    first = results[0]
    if space.points.shaped:
        first.shapes = results
    return first


def _prescreen(target: str, space, settings: TuneSettings, points: list[int], stage):
    """The fast timer settings.prescreen over `points`, ranked at each shape: the best
    settings.prescreen_top of each shape's measured configs go on to the ground truth.
    Returns those points and each shape's ranked table, {shape: table}."""
    from nsprof.adaptive import of_shape
    from nsprof.profile import config_summary

    layout = space.points
    rows = measure_rows(
        target,
        len(space.configs),
        settings.prescreen_truth,
        settings,
        points,
        stage(settings.prescreen, len(points)),
        n_shapes=layout.n_shapes,
        space=space,
    )
    tables, kept = {}, []
    for shape in shape_keys(space):
        table = rank(config_summary(of_shape(rows, shape)), settings.stat)
        table.insert(2, "config", [config_label(space.configs[int(c)]) for c in table["config_id"]])
        top = table[table["error"].isna()]["config_id"].head(settings.prescreen_top)
        kept += [layout.id(int(c), shape) for c in top]
        tables[shape] = table
    if not kept:
        raise NsprofError(f"the prescreen timer {settings.prescreen} measured no config")
    return kept, tables


def _prescreen_notes(result: TuneResult, space, points: list[int]) -> None:
    """Where the ground-truth winner stood in its shape's prescreen."""
    best = result.best_config_id
    if result.prescreen is None or best is None:
        return
    sent = _by_shape(space, points).get(result.shape, [])
    position = sent.index(best) + 1
    result.notes.append(f"the ground-truth winner was #{position} of the prescreen's top {len(sent)}")
    if position == len(sent):
        result.notes.append(
            "it was the last one sent to ground truth: a better config may lie outside the "
            "prescreened set; raise --top"
        )


def _adaptive(
    target: str, space, truth: Truth, settings: TuneSettings, rows, stored: _Stored | None, cost, stage
):
    """Adaptive reps for every shape's contenders (nsprof.adaptive.refine), each session through the
    results store when there is one. Returns the rows and {shape: AdaptiveSummary}."""
    import pandas as pd

    from nsprof.adaptive import refine

    n, layout = len(space.configs), space.points

    def measure(plan: Plan, number: int):
        progress = stage(f"{truth.name} adaptive {number}", len(plan.configs))
        if stored is not None:
            return stored.session(target, truth, n, plan, number, progress, space)
        return measure_rows(
            target,
            n,
            truth,
            settings,
            list(plan.configs),
            progress,
            plan=plan,
            n_shapes=layout.n_shapes,
            space=space,
        )

    def merge(rows, kept):
        return stored.merged() if stored is not None else pd.concat([rows, kept], ignore_index=True)

    return refine(rows, settings, measure=measure, merge=merge, cost=cost, layout=layout)
