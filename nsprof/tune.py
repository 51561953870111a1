"""`nsprof tune`: rank every config of a target by ground truth (or a fast timer).

    ranked = tune("examples/gemm_tilelang.py:space", TuneSettings(backend="ncu", mode="graph"))
    ranked.best_config, ranked.table

Orchestration over nsprof.measure's Backends: ground truths (ncu, nsys, or any registered
driver) run through nsprof.profile (compile, then GroundTruth); fast timers (graph, cupti,
event and their variants) through FastTimers. `prescreen` ranks all configs with a fast timer
first and sends only the best `prescreen_top` to the ground truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from nsprof.analysis import crosstruth
from nsprof.analysis.adaptive import AdaptiveSummary, Plan, first_pass_cost
from nsprof.analysis.confidence import Decision, decide
from nsprof.analysis.ranking import rank
from nsprof.cluster import sharded
from nsprof.drivers import registry
from nsprof.errors import NsprofError, TargetChanged
from nsprof.measure import FastTimers, GroundTruth, Measured
from nsprof.render.tables import describe_pick
from nsprof.reports.checks import one_line
from nsprof.schema import Failure
from nsprof.settings import TIMER_BACKENDS, TuneSettings, ground_truths, split_truth
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


def _is_truth(name: str) -> bool:
    return split_truth(name)[0] in ground_truths()


def _profile_settings(backend: str, settings: TuneSettings):
    """settings.profile for ground truth `backend` (which may differ from settings.backend, and may
    be a variant such as ncu@base-warm: TuneSettings.truth_profile)."""
    return settings.truth_profile(backend)


def truth_labels(truth: str, settings: TuneSettings) -> dict[str, str]:
    """The conditions ground truth `truth`'s rows are labelled with (its driver's labels)."""
    return registry.driver_class(split_truth(truth)[0]).labels(_profile_settings(truth, settings))


def check_truths(settings: TuneSettings) -> None:
    """Every truth of `settings` is one its driver can measure: a variant (ncu@base-warm, ...) only where
    the driver controls clocks and caches. An NsprofError in one line otherwise."""
    for truth in settings.truths:
        backend, condition = split_truth(truth)
        if condition:
            registry.check_condition(backend, truth)


def key_labels(backend: str, settings: TuneSettings) -> dict[str, str]:
    """The conditions a measurement is taken under (results-store key fields)."""
    if _is_truth(backend):
        return {"mode": settings.mode, **truth_labels(backend, settings)}
    name = TIMER_BACKENDS[backend]
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
    return not all(_is_truth(truth) for truth in settings.ranked_truths)


def measure_rows(
    target: str,
    n: int,
    backend: str,
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
    """Tidy rows for `config_ids` under `backend`: kernels for ground truths (compiled first, see
    nsprof.profile.profile_result); for a fast timer one row per config holding the timer's
    statistic as rep 0. Failed configs are rows with an error.

    on_rows(frame) gets whole configs' rows as they are known (each worker run's, and on Ctrl-C
    or SIGTERM what was finished), so that they can be stored before the run ends. on_device(device)
    gets what the worker measured on ({"uuid", "name"}, or None where it did not say).

    With `plan` (a ground truth only): one interleaved session of adaptive reps over plan.configs
    (nsprof.measure.GroundTruth.interleave) instead of a first pass over config_ids.

    With `n_shapes` (a target with shapes), config_ids are point ids (nsprof.schema.Points): every
    (shape, config) pair in the one session; the rows carry their shape.
    on_measured gets the whole Measured (its phases among the rest).

    `space`: the target as tune read it (nsprof.space.load_target), under whose configs the rows are
    stored: every worker checks that it loads the same (Space.as_read), or measures nothing
    (nsprof.errors.TargetChanged). None: read here (profile_result), or not checked.
    """
    shaped = {"n_shapes": n_shapes} if n_shapes else {}
    expect = space.as_read() if space is not None else None
    if plan is not None:
        truth = GroundTruth(_profile_settings(backend, settings))
        measured = truth.interleave(
            target,
            list(plan.configs),
            plan.rounds,
            plan.first_rep,
            n_configs=n,
            on_progress=on_progress,
            on_rows=on_rows,
            expect=expect,
        )
    elif _is_truth(backend):
        from nsprof.profile import profile_result

        profile_settings = _profile_settings(backend, settings)
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

        name = TIMER_BACKENDS[backend]
        with work_folder(settings.work_dir, "nsprof-tune-") as work_dir:  # a temporary one is removed
            timers = sharded(
                FastTimers(
                    [name],
                    settings.profile,
                    work_dir / f"timer-{name}",
                    timer_reps=settings.timer_reps,
                    stat=settings.stat,
                    labels=key_labels(backend, settings),
                    failure_source=name,
                ),
                settings.cluster,
            )
            measured = timers.run(
                target,
                config_ids,
                n_configs=n,
                on_progress=on_progress,
                on_rows=on_rows,
                expect=expect,
                **shaped,
            )
        if settings.work_dir is None:
            measured.work_dir = None
    if on_device is not None:
        on_device(measured.device)
    if on_measured is not None:
        on_measured(measured)
    return measured.frame


ADAPTIVE_RUN = "adaptive_session"  # the key in a stored run's settings that marks a session of adaptive reps


def _select_stored(stored, wanted_json: dict[int, str], adaptive_runs: set[int]):
    """Of stored rows, those tune ranks: only rows taken of today's configs (an id names another
    config once the space is edited); of each config its latest first-pass run (resumed runs can
    hold a config twice) and the adaptive sessions stored after it, which add reps to it; a rep
    held twice is the later run's."""
    stored = stored[
        [wanted_json.get(int(c)) == text for c, text in zip(stored["config_id"], stored["config_json"])]
    ]
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
    """What tune needs to go back to the results store after its first pass: the key of the
    space's rows and today's configs."""

    def __init__(
        self,
        settings: TuneSettings,
        group: dict,
        wanted_json: dict[int, str],
        gpu_uuid: str,
        shape_json: str = "",
    ) -> None:
        self.settings, self.group, self.wanted_json, self.gpu_uuid = settings, group, wanted_json, gpu_uuid
        self.shape_json = shape_json  # the one shape these rows are of ("": a target without shapes)

    def rows(self, store):
        runs = store.runs()
        adaptive = {
            int(i)
            for i, text in zip(runs["id"], runs["settings_json"])
            if isinstance(text, str) and f'"{ADAPTIVE_RUN}"' in text
        }
        return _select_stored(
            store.frame(**self.group, shape_json=self.shape_json, config_id=list(self.wanted_json)),
            self.wanted_json,
            adaptive,
        )

    def session(self, target: str, backend: str, n: int, plan: Plan, number: int, on_progress, space=None):
        """One adaptive session, stored as a run of its own (marked ADAPTIVE_RUN), each config's
        rows in one transaction as the session hands them over; returns its rows."""
        from dataclasses import asdict

        from nsprof.store import MeasurementKey, ResultStore

        with ResultStore(self.settings.store) as store:
            labels = {
                **asdict(self.settings),
                ADAPTIVE_RUN: number,
                "configs": list(plan.configs),
                "rounds": plan.rounds,
            }
            run_id = store.start_run(target=target, settings=labels, gpu_uuid=self.gpu_uuid, **self.group)

            def store_rows(frame) -> None:
                from nsprof.adaptive import planned_rows

                kept = planned_rows(frame, plan)
                for config_id, config_rows in kept.groupby("config_id", sort=True):
                    store.add(
                        run_id,
                        MeasurementKey(
                            config_id=int(config_id),
                            config_json=self.wanted_json[int(config_id)],
                            **self.group,
                        ),
                        config_rows,
                    )

            return _recorded(
                store,
                run_id,
                lambda: measure_rows(
                    target,
                    n,
                    backend,
                    self.settings,
                    list(plan.configs),
                    on_progress,
                    on_rows=store_rows,
                    plan=plan,
                    space=space,
                ),
            )

    def merged(self):
        from nsprof.store import ResultStore

        with ResultStore(self.settings.store) as store:
            return self.rows(store)


def _measure_stored(
    target: str,
    space,
    backend: str,
    settings: TuneSettings,
    wanted: list[int],
    on_progress,
    notes: list[str],
    on_measured: Callable[[Measured], None] | None = None,
):
    """measure_rows through the results store: resume, one transaction per config, GPU lock.
    Returns the rows to rank (see _select_stored) and the _Stored context for adaptive sessions."""
    from nsprof.cluster import cluster_gpu
    from nsprof.host.gpu import gpu_of, which_gpu
    from nsprof.space import target_fingerprint
    from nsprof.store import MeasurementKey, ResultStore, config_json

    truth = _is_truth(backend)
    tool_version = GroundTruth(_profile_settings(backend, settings)).tool_version() if truth else ""
    # A fast timer's row holds the statistic asked for, so that is part of what it measured. A truth's
    # variant (ncu@base-warm) is stored as its backend: its clock and cache labels say the rest.
    stored_backend = split_truth(backend)[0] if truth else f"{backend}:{settings.stat}"
    gpu = which_gpu(0) if settings.cluster is None else cluster_gpu(settings.cluster)
    group = {
        "fingerprint": space.fingerprint or target_fingerprint(target),
        "gpu": gpu.key,
        "backend": stored_backend,
        "tool_version": tool_version,
        **key_labels(backend, settings),
    }
    wanted_json = {c: config_json(space.configs[c]) for c in wanted}
    with ResultStore(settings.store) as store:
        todo = list(wanted)
        if settings.resume:
            todo = store.missing(
                group,
                wanted,
                config_jsons=wanted_json,
                retry_failed=settings.retry_failed,
                retry_if=lambda failure: retryable(failure, settings.timeout_s),
            )
            notes.append(
                f"resumed: {len(wanted) - len(todo)} of {len(wanted)} configs came from the results store"
            )
        if todo:
            run_id = store.start_run(target=target, settings=settings, gpu_uuid=gpu.uuid, **group)
            stored_ids: set[int] = set()

            def store_rows(frame) -> None:
                # Each config once, as soon as it is whole: Ctrl-C or SIGTERM keeps it.
                for config_id, config_rows in frame.groupby("config_id", sort=True):
                    config_id = int(config_id)
                    if config_id in stored_ids or config_id not in wanted_json:
                        continue
                    store.add(
                        run_id,
                        MeasurementKey(config_id=config_id, config_json=wanted_json[config_id], **group),
                        config_rows,
                    )
                    stored_ids.add(config_id)

            devices: list[dict | None] = []

            def measure():
                rows = measure_rows(
                    target,
                    len(space.configs),
                    backend,
                    settings,
                    todo,
                    on_progress,
                    on_rows=store_rows,
                    on_device=devices.append,
                    on_measured=on_measured,
                    space=space,
                )
                store_rows(rows)  # what was not handed over yet
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
        context = _Stored(settings, group, wanted_json, gpu.uuid)
        return context.rows(store), context


def rank_truth(
    target: str,
    space,
    truth: str,
    settings: TuneSettings,
    wanted: list[int],
    on_progress,
    notes: list[str] | None = None,
    stage=None,
) -> TuneResult:
    """Rank configs `wanted` of `space` under one truth (a ground truth, a variant such as
    ncu@base-warm, or a fast timer): measured (through the results store unless settings.use_store is
    off), summarised per config and ranked by settings.stat. Raises when nothing was measured.
    Every ranking of a tune goes through here, one truth at a time. With `stage` (the progress
    bars' factory), the contenders left tied after the first pass get adaptive reps (within
    settings.budget_s for this truth: nsprof.adaptive); without it (the cross-truth probes), none."""
    import time

    from nsprof.profile import check_measured

    notes = [] if notes is None else notes
    n = len(space.configs)
    timed, cost_of_first_pass = _timed(on_progress, settings)
    began = time.monotonic()
    runs: list[Measured] = []
    if settings.use_store:
        rows, stored = _measure_stored(
            target, space, truth, settings, wanted, timed, notes, on_measured=runs.append
        )
    else:
        rows, stored = (
            measure_rows(target, n, truth, settings, wanted, timed, on_measured=runs.append, space=space),
            None,
        )
    first_pass_wall_s = time.monotonic() - began
    first_pass_phases = _timing(runs[0]) if runs else None
    adaptive = None
    if stage is not None and settings.cluster is not None and _is_truth(truth):
        notes.append("no adaptive reps: they are not spread over a cluster yet (--devices, --scheduler)")
    elif stage is not None:
        rows, adaptive = _adaptive(
            target, n, truth, settings, rows, stored, cost_of_first_pass(), stage, space
        )
        if _is_truth(truth):
            notes.append(adaptive.describe())
    # A session keeps its temporary folder when a config failed (its logs say why): name it.
    kept = [m.work_dir for m in runs if settings.work_dir is None and m.work_dir is not None]
    notes += [f"the reports and logs of a run with failed configs are kept in {folder}" for folder in kept]
    result = _ranked(space, truth, settings, rows, notes, adaptive, first_pass_wall_s, first_pass_phases)
    if result.best_config_id is None:
        try:
            check_measured(rows)
        except NsprofError as exc:
            if not kept:
                raise
            from nsprof.session import kept_in

            raise kept_in(exc, kept[0]) from None
    return result


def _ranked(
    space,
    truth: str,
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
    backend = split_truth(truth)[0]
    if _is_truth(truth):
        conditions = registry.driver_class(backend).conditions(_profile_settings(truth, settings))
        reps = (
            f"{settings.reps} reps"
            if adaptive is None or not adaptive.reps
            else f"{settings.reps} reps, the contenders' up to {max(adaptive.reps_per_config.values())} (adaptive)"
        )
        label = f"{truth}, mode {settings.mode}, {settings.stat} of {reps}" + (
            f", {conditions}" if conditions else ""
        )
    else:
        label = f"fast timer {TIMER_BACKENDS[truth]}, {settings.stat} of {settings.timer_reps} samples"
    table = rank(summary, settings.stat)
    table.insert(2, "config", [config_label(space.configs[int(c)]) for c in table["config_id"]])
    return TuneResult(
        table,
        space.configs,
        backend,
        label,
        None,
        notes,
        stat=settings.stat,
        truth=truth,
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
    probed: str, other: str, results: dict, settings: TuneSettings
) -> list[tuple[list[str], str]] | None:
    """The truths that measure like `probed` with each condition in which it differs from `other`
    set as `other` has it (one at a time, then all together): [(conditions changed, truth name)];
    None when `probed`'s driver cannot change one of them (nsys: neither clocks nor caches)."""
    labels, goal = results[probed].labels, results[other].labels
    conditions = crosstruth.differing(labels, goal)
    backend = split_truth(probed)[0]
    subsets = [[c] for c in conditions] + ([list(conditions)] if len(conditions) > 1 else [])
    out = []
    for changed in subsets:
        wanted = {**labels, **{c: goal[c] for c in changed}}
        name = crosstruth.truth_name(backend, wanted)
        if name == other:  # every condition changed: that is the other truth itself, not a probe
            continue
        got = truth_labels(name, settings)
        if any(got.get(c) != wanted.get(c) for c in crosstruth.CONDITIONS):
            return None
        out.append((changed, name))
    return out


def _explain(
    target: str, space, pair, results: dict, settings: TuneSettings, stage
) -> crosstruth.Explanation:
    """Why two truths disagree: the contenders (both winners, both tie sets) measured again under
    one truth's backend with each condition in which the two differ set as the other has it."""
    contenders = crosstruth.contenders(pair)
    if not crosstruth.differing(results[pair.a].labels, results[pair.b].labels):
        return crosstruth.Explanation(
            pair,
            pair.a,
            pair.b,
            contenders,
            reason=f"{pair.a} and {pair.b} measure under the same clock and cache "
            "conditions: the tools themselves differ",
        )
    for probed, other in ((pair.a, pair.b), (pair.b, pair.a)):
        variants = _probes(probed, other, results, settings)
        if variants is not None:
            break
    else:
        return crosstruth.Explanation(
            pair,
            pair.a,
            pair.b,
            contenders,
            reason=f"neither {split_truth(pair.a)[0]} nor {split_truth(pair.b)[0]} "
            "can change the conditions in which they differ",
        )
    explanation = crosstruth.Explanation(pair, probed, other, contenders)
    goal_winner, goal_ties = crosstruth.winner(results[other].table, settings.stat)
    for changed, name in variants:
        try:
            ranked = rank_truth(target, space, name, settings, contenders, stage(name, len(contenders)), [])
        except TargetChanged:
            raise  # no probe of the target as read can be measured any more
        except NsprofError as exc:  # measured nothing there: say so, keep the others
            explanation.probes.append(
                crosstruth.Probe(name, changed, truth_labels(name, settings), None, [], crosstruth.UNKNOWN)
            )
            explanation.reason = one_line(str(exc), 200)
            continue
        won, ties = crosstruth.winner(ranked.table, settings.stat)
        explanation.probes.append(
            crosstruth.Probe(
                name,
                changed,
                ranked.labels,
                won,
                ties,
                crosstruth.verdict(won, ties, goal_winner, goal_ties),
                ranked.table,
            )
        )
        ratio = crosstruth.erratic(ranked.table, results[other].table)
        if ratio is not None:
            explanation.warnings.append(
                f"{name} measured the contenders {ratio:.1f}x as long as {other} did: its "
                "numbers look erratic on this machine, so its pick says little"
            )
    explanation.cause = crosstruth.cause(explanation.probes)
    return explanation


def cross_truth(target: str, space, results: dict, settings: TuneSettings, stage=None) -> CrossTruth:
    """Every pair of truths compared, in --truth order; each disagreeing pair explained (settings.explain)
    by probes of its contenders, or, without `stage` (one shape of several: the probes would need
    one more session per shape), with a reason saying it was not probed."""
    names = list(results)
    cross = CrossTruth()
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pair = crosstruth.compare(a, results[a].table, b, results[b].table, settings.stat)
            cross.pairs.append(pair)
            if pair.verdict != crosstruth.DISAGREE or not settings.explain:
                continue
            if stage is None:
                cross.explanations.append(
                    crosstruth.Explanation(
                        pair,
                        a,
                        b,
                        crosstruth.contenders(pair),
                        reason="the probes that explain a disagreement are not run per shape yet",
                    )
                )
            else:
                cross.explanations.append(_explain(target, space, pair, results, settings, stage))
    return cross


def tune(
    target: str,
    settings: TuneSettings | None = None,
    *,
    config_ids: list[int] | None = None,
    on_stage: Callable[[str, int], Callable[[str, int, str], None]] | None = None,
    space=None,
) -> TuneResult:
    """Rank every config under each truth of `settings` (rank_truth), compare the truths' winners
    when there are several (cross_truth), and feed the deploy truth's ranking back to the target's
    tuner. The result is the deploy truth's ranking, carrying every truth's (`truths`) and the
    comparison (`cross`). `space`: the target's Space where the caller has loaded it already."""
    from nsprof.profile import check_config_ids, config_summary, precompile
    from nsprof.space import load_target

    settings = settings or TuneSettings()
    check_truths(settings)
    space = space or load_target(target)
    n = len(space.configs)
    wanted = list(range(n)) if config_ids is None else check_config_ids(config_ids, n)
    stage = on_stage or (lambda name, count: None)
    if space.shapes is not None:
        return tune_shapes(target, space, settings, wanted, stage)
    if settings.cluster is None and (
        settings.prescreen or _a_timer_ranks(settings) or settings.use_store and settings.resume
    ):
        # The fast timers (a prescreen, or a timer that ranks: FastTimers) do not compile; a resumed
        # first pass may measure nothing, and the adaptive sessions (GroundTruth.interleave) do not
        # compile either (a cluster compiles each batch where it runs; otherwise each ground
        # truth's session compiles beside itself: profile_result)
        precompile(space, config_ids=wanted)
    prescreen_table = None
    if settings.prescreen:
        rows = measure_rows(
            target,
            n,
            settings.prescreen,
            settings,
            wanted,
            stage(settings.prescreen, len(wanted)),
            space=space,
        )
        prescreen_table = rank(config_summary(rows), settings.stat)
        prescreen_table.insert(
            2, "config", [config_label(space.configs[int(c)]) for c in prescreen_table["config_id"]]
        )
        wanted = [
            int(c)
            for c in prescreen_table[prescreen_table["error"].isna()]["config_id"].head(
                settings.prescreen_top
            )
        ]
        if not wanted:
            raise NsprofError(f"the prescreen timer {settings.prescreen} measured no config")
    results = {
        truth: rank_truth(target, space, truth, settings, wanted, stage(truth, len(wanted)), stage=stage)
        for truth in settings.ranked_truths
    }
    deploy = settings.deploy_truth
    result = results[deploy]
    result.prescreen = prescreen_table
    result.deploy = deploy
    if len(results) > 1:
        result.truths = results
        result.cross = cross_truth(target, space, results, settings, stage)
    notes, table, best = result.notes, result.table, result.best_config_id
    tuner = space.tuner
    if settings.tuner_pick and tuner is not None and tuner.can_pick and best is not None:
        # Before the feed-back below, which makes the tuner pick nsprof's winner.
        try:
            result.tuner_pick = tuner_pick_in_child(target, settings, n)
        except Exception as exc:  # the user's tuner failed: the ranking still stands
            result.errors.append(
                f"the target's own autotuner failed: {one_line(f'{type(exc).__name__}: {exc}', 300)}"
            )
        else:
            if result.tuner_pick is not None:  # None: the tuner could not say
                notes.append(describe_pick(result.tuner_pick, table))
    if settings.feed_back and tuner is not None and tuner.can_feed_back and best is not None:
        measured = table[table["error"].isna() & table["value_ns"].notna()]
        latencies_ms = {int(c): float(v) / 1e6 for c, v in zip(measured["config_id"], measured["value_ns"])}
        try:
            stored = tuner_in_child(target, "feed_back", [latencies_ms], settings, n)
        except Exception as exc:
            result.errors.append(
                f"feeding the ranking back to {tuner.name} failed: "
                f"{one_line(f'{type(exc).__name__}: {exc}', 300)}"
            )
        else:
            notes.append(
                f"handed to {tuner.name} for deploy condition {deploy} "
                f"({crosstruth.condition_words(result.labels, result.labels.get('mode'))}): {stored}"
            )
    if prescreen_table is not None and best is not None:
        position = wanted.index(best) + 1
        notes.append(f"the ground-truth winner was #{position} of the prescreen's top {len(wanted)}")
        if position == len(wanted):
            notes.append(
                "it was the last one sent to ground truth: a better config may lie outside the "
                "prescreened set; raise --top"
            )
    return result


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


def _adaptive(
    target: str,
    n: int,
    truth: str,
    settings: TuneSettings,
    rows,
    stored: _Stored | None,
    cost,
    stage,
    space=None,
):
    """Adaptive reps for the contenders (nsprof.adaptive.refine), each session through the results
    store when there is one."""
    import pandas as pd

    from nsprof.adaptive import refine

    def measure(plan: Plan, number: int):
        progress = stage(f"{truth} adaptive {number}", len(plan.configs))
        if stored is not None:
            return stored.session(target, truth, n, plan, number, progress, space)
        return measure_rows(target, n, truth, settings, list(plan.configs), progress, plan=plan, space=space)

    def merge(rows, kept):
        return stored.merged() if stored is not None else pd.concat([rows, kept], ignore_index=True)

    return refine(rows, settings, measure=measure, merge=merge, cost=cost)


RESULT_MARKER = "NSPROF_RESULT "

TUNER_CALLS = ("pick", "feed_back", "feed_back_shapes")

_TUNER_CHILD = (
    "import json, sys\n"
    "from nsprof.space import load_target\n"
    "name, args = sys.argv[2], json.loads(sys.argv[3])\n"
    "if name == 'feed_back':\n"
    "    args = [{int(k): float(v) for k, v in args[0].items()}]\n"
    "if name == 'feed_back_shapes':\n"
    "    args = [{int(s): {int(k): float(v) for k, v in by.items()} for s, by in args[0].items()}]\n"
    "tuner = load_target(sys.argv[1]).tuner\n"
    "if tuner is None:\n"
    "    sys.exit(f'{sys.argv[1]} has no tuner hook (Space.tuner)')\n"
    "result = getattr(tuner, name)(*args)\n"
    f"print({RESULT_MARKER!r} + json.dumps(result, default=str), flush=True)\n"
)


def tuner_in_child(target: str, name: str, args: list, settings: TuneSettings, n_configs: int):
    """Run the target Space's tuner hook, `space.tuner.<name>(*args)` ("pick" or "feed_back"), in
    a fresh child process; its result comes back as JSON.

    Its own benchmark loop runs user kernels: a child keeps a hang (timeout: the per-config
    timeout times the number of configs) or a lost CUDA context out of nsprof's process, and
    the GPU lock keeps other nsprof runs off the GPU meanwhile. A fresh process also computes
    the tuner's cache key exactly as the user's own next process will (TileLang's key is not
    the same in a process that has compiled configs already).
    """
    import subprocess
    import sys

    from nsprof.host.lock import gpu_lock

    if name not in TUNER_CALLS:
        raise ValueError(f"a tuner hook call is one of {TUNER_CALLS}, not {name!r}")
    timeout = settings.timeout_s * max(1, n_configs)
    with gpu_lock(0, wait=settings.wait):
        try:
            done = subprocess.run(
                [sys.executable, "-c", _TUNER_CHILD, target, name, json.dumps(args)],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise NsprofError(f"it ran past {timeout:g} s (--timeout times the number of configs)") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    raise NsprofError(
        f"its process exited with status {done.returncode}" + (f": {lines[-1]}" if lines else "")
    )


def tuner_pick_in_child(target: str, settings: TuneSettings, n_configs: int) -> dict | None:
    """What the target's own autotuner picks with its own timer (its Space's tuner.pick())."""
    return tuner_in_child(target, "pick", [], settings, n_configs)


# -- a target with shapes -------------------------------------------------------------------------


def tune_shapes(target: str, space, settings: TuneSettings, wanted: list[int], stage) -> TuneResult:
    """tune() for a Space with shapes: every (shape, config) pair of `wanted` measured in one profiled
    session per truth, then each shape ranked on its own (as rank_truth ranks a space without shapes),
    the truths compared per shape, and every shape's deploy winner fed back to the target's tuner in one
    child process, under the key the tuner computes for that shape's call (TunerHook.feed_back_shapes).

    Returns the first shape's ranking, carrying every shape's in `shapes` (each with its own `truths`
    and `cross` when several truths are ranked). Not yet per shape, each said in the notes: adaptive
    reps, the probes that explain a disagreement, the tuner's own pick; refused: --prescreen, a cluster.
    """
    if settings.cluster is not None:
        raise NsprofError("a target with shapes is not spread over a cluster yet: drop --devices/--scheduler")
    if settings.prescreen:
        raise NsprofError("--prescreen does not take a target with shapes yet")
    layout = space.points
    n = len(space.configs)
    points = layout.all(wanted)  # each truth's session compiles them beside itself (profile_result)
    if _a_timer_ranks(settings):
        from nsprof.profile import precompile

        precompile(space, config_ids=points)  # a fast timer's sessions (FastTimers) do not compile
    per_truth = {
        truth: rank_shapes(target, space, truth, settings, wanted, stage(truth, len(points)))
        for truth in settings.ranked_truths
    }
    deploy = settings.deploy_truth
    shapes = []
    for shape in range(layout.n_shapes):
        results = {truth: rankings[shape] for truth, rankings in per_truth.items()}
        result = results[deploy]
        result.deploy = deploy
        if len(results) > 1:
            result.truths = results
            result.cross = cross_truth(target, space, results, settings)
        shapes.append(result)
    first = shapes[0]
    first.shapes = shapes
    tuner = space.tuner
    notes = first.notes
    if settings.tuner_pick and tuner is not None and tuner.can_pick:
        notes.append(f"{tuner.name}'s own pick is not asked per shape yet")
    latencies = {}
    for result in shapes:
        measured = result.table[result.table["error"].isna() & result.table["value_ns"].notna()]
        if result.best_config_id is not None:
            latencies[result.shape] = {
                int(c): float(v) / 1e6 for c, v in zip(measured["config_id"], measured["value_ns"])
            }
    if (
        settings.feed_back
        and tuner is not None
        and tuner.can_feed_back
        and latencies
        and not tuner.can_feed_back_shapes
    ):
        first.notes.append(
            f"not fed back: {tuner.name} takes the ranking of one shape only (its hook has no "
            "feed_back_shapes)"
        )
    elif settings.feed_back and tuner is not None and tuner.can_feed_back and latencies:
        try:
            if tuner.feed_back_shapes_apart:  # each shape's key computed in a process of its own
                stored = {}
                for shape, by_config in latencies.items():
                    stored.update(
                        tuner_in_child(target, "feed_back_shapes", [{shape: by_config}], settings, n)
                    )
            else:
                stored = tuner_in_child(target, "feed_back_shapes", [latencies], settings, len(points))
        except Exception as exc:
            first.errors.append(
                f"feeding the rankings back to {tuner.name} failed: "
                f"{one_line(f'{type(exc).__name__}: {exc}', 300)}"
            )
        else:
            words = crosstruth.condition_words(first.labels, first.labels.get("mode"))
            for result in shapes:
                line = stored.get(str(result.shape)) if isinstance(stored, dict) else None
                if line is not None:
                    result.notes.append(
                        f"handed to {tuner.name} for deploy condition {deploy} ({words}): {line}"
                    )
    return first


def rank_shapes(
    target: str, space, truth: str, settings: TuneSettings, wanted: list[int], on_progress
) -> list:
    """Every shape's ranking under one truth ([TuneResult], in shape order): configs `wanted` at every
    shape measured in one session (through the results store, keyed by shape, unless settings.use_store
    is off; --resume measures only the (shape, config) pairs it lacks). Raises when nothing was measured
    at any shape."""
    import time

    from nsprof.profile import check_measured

    layout = space.points
    notes: list[str] = []
    began = time.monotonic()
    runs: list[Measured] = []
    if settings.use_store:
        by_shape = _measure_stored_shapes(
            target, space, truth, settings, wanted, on_progress, notes, on_measured=runs.append
        )
    else:
        rows = measure_rows(
            target,
            len(space.configs),
            truth,
            settings,
            layout.all(wanted),
            on_progress,
            n_shapes=layout.n_shapes,
            on_measured=runs.append,
            space=space,
        )
        by_shape = {
            shape: rows[(rows["shape"] == shape).fillna(False).astype(bool)]
            for shape in range(layout.n_shapes)
        }
    first_pass_wall_s = time.monotonic() - began
    if _is_truth(truth) and settings.budget_s > 0:
        notes.append(
            f"no adaptive reps: they are not run per shape yet (this target has {layout.n_shapes} "
            "shapes); raise --reps to separate close configs"
        )
    results = []
    for shape in range(layout.n_shapes):
        import pandas as pd

        rows = by_shape[shape].copy()
        rows["shape"] = pd.Series(pd.NA, index=rows.index, dtype="Int64")  # one shape: ranked as configs are
        result = _ranked(
            space,
            truth,
            settings,
            rows,
            list(notes),
            first_pass_wall_s=first_pass_wall_s,
            first_pass_phases=_timing(runs[0]) if runs else None,
        )
        result.shape, result.shape_value = shape, space.shapes[shape]
        if result.best_config_id is None:
            result.notes.append(f"no config was measured at shape {shape} ({space.shape_label(shape)})")
        results.append(result)
    if all(r.best_config_id is None for r in results):
        import pandas as pd

        check_measured(pd.concat(list(by_shape.values()), ignore_index=True))
    return results


def _measure_stored_shapes(
    target: str,
    space,
    backend: str,
    settings: TuneSettings,
    wanted: list[int],
    on_progress,
    notes: list[str],
    on_measured=None,
) -> dict:
    """_measure_stored for a target with shapes: one run, one session over every (shape, config) pair
    the store lacks, each pair's rows in one transaction, keyed by the shape's JSON beside the config's.
    Returns {shape index: the rows to rank of that shape} (_select_stored, per shape)."""
    from nsprof.host.gpu import gpu_of, which_gpu
    from nsprof.space import shape_json, target_fingerprint
    from nsprof.store import MeasurementKey, ResultStore, config_json

    layout = space.points
    truth = _is_truth(backend)
    tool_version = GroundTruth(_profile_settings(backend, settings)).tool_version() if truth else ""
    stored_backend = split_truth(backend)[0] if truth else f"{backend}:{settings.stat}"
    gpu = which_gpu(0)
    group = {
        "fingerprint": space.fingerprint or target_fingerprint(target),
        "gpu": gpu.key,
        "backend": stored_backend,
        "tool_version": tool_version,
        **key_labels(backend, settings),
    }
    wanted_json = {c: config_json(space.configs[c]) for c in wanted}
    shape_jsons = [shape_json(shape) for shape in space.shapes]
    with ResultStore(settings.store) as store:
        todo = layout.all(wanted)
        if settings.resume:
            todo = [
                layout.id(c, shape)
                for shape in range(layout.n_shapes)
                for c in store.missing(
                    group,
                    wanted,
                    config_jsons=wanted_json,
                    retry_failed=settings.retry_failed,
                    retry_if=lambda failure: retryable(failure, settings.timeout_s),
                    shape_json=shape_jsons[shape],
                )
            ]
            total = len(wanted) * layout.n_shapes
            notes.append(
                f"resumed: {total - len(todo)} of {total} (shape, config) pairs came from the results store"
            )
        if todo:
            run_id = store.start_run(target=target, settings=settings, gpu_uuid=gpu.uuid, **group)
            status = "failed"
            stored_ids: set[tuple[int, int]] = set()

            def store_rows(frame) -> None:
                # Each (shape, config) once, as soon as it is whole: Ctrl-C or SIGTERM keeps it.
                for (shape, config_id), pair_rows in frame.groupby(["shape", "config_id"], sort=True):
                    shape, config_id = int(shape), int(config_id)
                    if (shape, config_id) in stored_ids or config_id not in wanted_json:
                        continue
                    store.add(
                        run_id,
                        MeasurementKey(
                            config_id=config_id,
                            config_json=wanted_json[config_id],
                            shape_json=shape_jsons[shape],
                            shape=shape,
                            **group,
                        ),
                        pair_rows,
                    )
                    stored_ids.add((shape, config_id))

            try:
                devices: list[dict | None] = []
                rows = measure_rows(
                    target,
                    len(space.configs),
                    backend,
                    settings,
                    todo,
                    on_progress,
                    on_rows=store_rows,
                    on_device=devices.append,
                    n_shapes=layout.n_shapes,
                    on_measured=on_measured,
                    space=space,
                )
                store_rows(rows)  # what was not handed over yet
                status = "ok" if rows["error"].isna().any() else "nothing measured"
            except KeyboardInterrupt:
                status = "interrupted"
                raise
            finally:
                store.finish_run(run_id, status)
            ran_on = gpu_of(devices[0] if devices else None)
            if ran_on is not None and ran_on.uuid != gpu.uuid:
                store.relabel_gpu(run_id, ran_on.key, ran_on.uuid)
                notes.append(
                    f"measured on {ran_on.key}, not {gpu.key or 'the GPU nvidia-smi names'}: stored as such"
                )
                group["gpu"] = ran_on.key
        return {
            shape: _Stored(settings, group, wanted_json, gpu.uuid, shape_jsons[shape]).rows(store)
            for shape in range(layout.n_shapes)
        }
