"""What one of tune's rankings measures, and under which key: measure_rows (a truth's rows for
points of a target, through nsprof.measure's Backends), key_labels and truth_labels (the
conditions a row is taken under), retryable (which stored failure a resume measures
again), shape_keys (a target without shapes is one shape)."""

from __future__ import annotations

from collections.abc import Callable

from nsprof.analysis.adaptive import Plan
from nsprof.cluster import sharded
from nsprof.drivers import registry
from nsprof.errors import NsprofError
from nsprof.measure import FastTimers, GroundTruth, Measured, Request
from nsprof.schema import Failure
from nsprof.settings import Truth, TuneSettings

__all__ = [
    "key_labels",
    "measure_rows",
    "retryable",
    "shape_keys",
    "truth_labels",
]


def truth_labels(truth: Truth, settings: TuneSettings) -> dict[str, str]:
    """The conditions ground truth `truth`'s rows are labelled with (its driver's labels)."""
    return registry.driver_class(truth.backend).labels(settings.truth_profile(truth))


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
    ahead=None,
):
    """Tidy rows for `config_ids` under `truth`: kernels for ground truths (profile_result); for a
    fast timer one row per config, the timer's statistic as rep 0. Failed configs: rows with an error.

    With `n_shapes` (a target with shapes), config_ids are point ids (nsprof.schema.Points): every
    (shape, config) pair in the one session; the rows carry their shape.

    on_rows(frame) gets whole configs' rows as they are known (each worker run's, and on Ctrl-C
    or SIGTERM what was finished), so that they can be stored before the run ends. on_device(device)
    gets what the worker measured on ({"uuid", "name"}, or None where it did not say).
    on_measured gets the whole Measured (its phases among the rest).

    With `plan` (a ground truth only): one interleaved session of adaptive reps over plan.configs
    (nsprof.measure.Request.plan) instead of a first pass over config_ids. Either in the worker `ahead`
    started for it (nsprof.session.ahead.Ahead) when one is given.

    `space`: the target as tune read it (nsprof.space.load_target), under whose configs the rows are
    stored: every worker checks that it loads the same (Space.as_read), or measures nothing
    (nsprof.errors.TargetChanged). None: read here (profile_result), or not checked nor compiled.
    """
    expect = space.as_read() if space is not None else None
    compiles = space.compiles if space is not None else ""
    if plan is not None:
        request = Request(
            target, plan.configs, n, n_shapes, expect=expect, plan=plan, compiles=compiles, ahead=ahead
        )
        measured = GroundTruth(settings.truth_profile(truth)).measure(
            request, on_progress=on_progress, on_rows=on_rows
        )
    elif truth.profiler:
        measured = _first_pass(
            target, truth, settings, config_ids, n_shapes, on_progress, on_rows, space, ahead
        )
    else:
        request = Request(target, config_ids, n, n_shapes, expect=expect, compiles=compiles)
        measured = _timer_measured(truth, settings, request, on_progress, on_rows)
    if on_device is not None:
        on_device(measured.device)
    if on_measured is not None:
        on_measured(measured)
    return measured.frame


def serving_worker(truth: Truth, settings: TuneSettings) -> int | None:
    """The pid of the worker of the `nsprof serve` that would measure a session of `truth` (one process
    for every session it measures), or None where none would: no server, one that does not fit this
    run, a cluster."""
    if settings.cluster:
        return None
    from nsprof.serve_client import find_server

    try:
        profile = settings.truth_profile(truth)
        driver = registry.get_driver(profile.backend)
    except NsprofError:  # no tool here (a fully stored --resume): no server either; the session says why
        return None
    server, _ = find_server(driver, profile)
    pid = (server or {}).get("worker_pid")
    return pid if isinstance(pid, int) else None


def _first_pass(
    target, truth, settings, config_ids, n_shapes, on_progress, on_rows, space, ahead
) -> Measured:
    """A ground truth's first pass over `config_ids` (point ids with `n_shapes`): profile_result (in
    `ahead`'s worker where one was started for it), sharded over the cluster's GPUs when the settings
    give one."""
    from nsprof.profile import profile_result

    profile_settings = settings.truth_profile(truth)
    return profile_result(
        target,
        profile_settings,
        **({"points": config_ids} if n_shapes else {"config_ids": config_ids}),
        on_progress=on_progress,
        on_rows=on_rows,
        space=space,
        backend=sharded(GroundTruth(profile_settings), settings.cluster) if settings.cluster else None,
        ahead=ahead,
    )


def _timer_measured(truth: Truth, settings: TuneSettings, request: Request, on_progress, on_rows) -> Measured:
    """A fast timer's measurement of `request` in the bare worker (FastTimers), in settings.work_dir
    or a temporary folder, removed after it."""
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
        measured = timers.measure(request, on_progress=on_progress, on_rows=on_rows)
    if settings.work_dir is None:
        measured.work_dir = None
    return measured
