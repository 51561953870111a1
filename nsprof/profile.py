"""`nsprof profile`: compile every config of a target, measure them with one Backend
(nsprof.measure), and summarise them per config and mode.

    from nsprof.settings import ProfileSettings
    from nsprof.profile import config_summary, profile_result

    result = profile_result("examples/gemm_tilelang.py:space", ProfileSettings(backend="nsys"))
    config_summary(result.frame, result.configs)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nsprof.errors import NsprofError
from nsprof.measure import Backend, GroundTruth, Measured, Request
from nsprof.settings import ProfileSettings
from nsprof.space import config_label


def config_ids_of(space, config_ids) -> list[int]:
    """check_config_ids against `space`; before an id it does not list is refused, a saved view of the
    target is confirmed (nsprof.space_view.SpaceView.confirm: the config may have been added since)."""
    try:
        return check_config_ids(config_ids, len(space.configs))
    except NsprofError:
        space.confirm()
        raise


def measured_as_read(space) -> dict:
    """What a worker of profile or validate checks of the target: as_read() without the tuner, which
    neither of them asks."""
    return {key: value for key, value in space.as_read().items() if key != "tuner"}


def check_config_ids(config_ids, n_configs: int) -> list[int]:
    """The ids as a list, or an NsprofError naming the first that is not a config of the space."""
    ids = list(config_ids)
    if not ids:
        raise NsprofError("no config ids given")
    for config_id in ids:
        if not isinstance(config_id, int) or not 0 <= config_id < n_configs:
            raise NsprofError(f"config id {config_id!r} is not in the space (0 to {n_configs - 1})")
    return ids


def check_measured(frame) -> None:
    """An NsprofError, in one line, when no row of `frame` is a measurement (every config failed)."""
    from nsprof.errors import NsprofError
    from nsprof.reports.checks import nothing_measured

    if (frame["error"].isna() & frame["duration_ns"].notna()).any():
        return
    failed = frame[frame["error"].notna() & frame["config_id"].notna()].sort_values(
        "config_id", kind="stable"
    )
    reasons: dict[int, str] = {}
    for config, error in zip(failed["config_id"], failed["error"]):
        reasons.setdefault(int(config), str(error))
    raise NsprofError(nothing_measured(reasons))


@dataclass
class ProfileResult(Measured):
    """What profile_result measured (frame, failures (the compile failures among them), device, reports,
    work_dir, wall_s: see nsprof.measure.Measured), and under what: everything about the rows
    that a CSV of them would not keep."""

    target: str = ""
    backend: str = ""
    configs: list = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # the conditions every row is labelled with


def profile_result(
    target: str,
    settings: ProfileSettings | None = None,
    *,
    config_ids: list[int] | None = None,
    on_progress: Callable[[str, int, str], None] | None = None,
    on_rows: Callable[[object], None] | None = None,
    backend: Backend | None = None,
    space=None,
    points: list[int] | None = None,
    expect: dict | None = None,
    ahead=None,
) -> ProfileResult:
    """Measure every config (or `config_ids`) of `target` with `backend` (default: the ground truth
    settings.backend names). A target's compile step runs beside each session, or in its served
    worker (nsprof.session.run_session); a config that does not compile is a failure of kind compile.

    A target with shapes (Space.shapes) is measured at every shape in the one session: `points`
    names (shape, config) pairs by point id (Space.points; default `config_ids` at every shape), and
    the result's failures and the progress ids are point ids too; every row has its `shape`.

    on_rows(frame) gets the rows of configs as they become final (see run_session): each worker
    run's whole configs and failures. On Ctrl-C it has had every whole config measured before the
    KeyboardInterrupt goes on.

    The worker measures the target only as it was read (`expect`, default measured_as_read(space): the
    space given or loaded here); one edited since is refused (nsprof.errors.TargetChanged). `ahead`: a
    worker started ahead for this session (nsprof.session.ahead.Ahead), where one was.
    """
    from nsprof.space import load_target

    settings = settings or ProfileSettings()
    backend = backend or GroundTruth(settings)
    space = space or load_target(target)
    expect = expect or measured_as_read(space)
    n_configs = len(space.configs)
    wanted, layout = _wanted_points(space, config_ids, points)
    request = Request(
        target, wanted, n_configs, layout.n_shapes, expect=expect, compiles=space.compiles, ahead=ahead
    )
    measured = backend.measure(request, on_progress=on_progress, on_rows=on_rows)
    return ProfileResult(
        frame=measured.frame,
        target=target,
        backend=backend.name,
        configs=space.configs,
        labels=backend.labels,
        failures=dict(measured.failures),
        reports=list(measured.reports),
        work_dir=measured.work_dir,
        wall_s=measured.wall_s,
        device=measured.device,
        notes=list(measured.notes),
        phases=dict(measured.phases),
        config_phases=dict(measured.config_phases),
    )


def _wanted_points(space, config_ids: list[int] | None, points: list[int] | None):
    """profile_result's ids to measure and the space's points: `points` as given, else
    `config_ids` (default: all) at every shape of a shaped space."""
    wanted = list(range(len(space.configs))) if config_ids is None else config_ids_of(space, config_ids)
    layout = space.points
    if points is not None:
        for point in points:
            layout.split(point)  # a ValueError for an id that is no point of this space
        wanted = list(points)
    elif layout.shaped:
        wanted = layout.all(wanted)
    return wanted, layout


def config_summary(frame, configs: list | None = None):
    """One row per config × mode: per-rep durations summed over the rep's kernels, then
    median, min, max, spread ((max-min)/median), the median's interval (ci_low_ns, ci_high_ns
    and its achieved coverage ci_coverage: nsprof.analysis.confidence), reps, kernels per rep,
    cycles, clock. Rows of a target with shapes (a `shape` set) are one per shape × config × mode,
    with a `shape` column first; never pooled over shapes."""
    import pandas as pd

    shaped = "shape" in frame and frame["shape"].notna().any()
    keys = ["shape", "config_id"] if shaped else ["config_id"]
    per_rep = _per_rep(frame[frame["error"].isna() & frame["config_id"].notna()], keys)
    rows = []
    for key, group in per_rep.groupby(level=[*keys, "mode"], sort=True):
        *where, mode = key
        rows.append({**{k: int(v) for k, v in zip(keys, where)}, "mode": mode, **_rep_stats(group)})
    for rec in frame[frame["error"].notna()].itertuples():
        where = {"config_id": int(rec.config_id)}
        if shaped:
            where["shape"] = None if pd.isna(rec.shape) else int(rec.shape)
        rows.append({**where, "mode": None, "reps": 0, "kernels": 0, **_NO_STATS, "error": rec.error})
    summary = pd.DataFrame(rows, columns=[*keys, "mode", "reps", "kernels", *_NO_STATS, "error"])
    if configs is not None:
        summary.insert(len(keys), "config", [config_label(configs[c]) for c in summary["config_id"]])
    return summary.sort_values([*keys, "mode"], na_position="last").reset_index(drop=True)


# config_summary's numbers of a config that failed, in its column order.
_NO_STATS = dict.fromkeys(
    (
        "median_ns",
        "min_ns",
        "max_ns",
        "spread",
        "median_cycles",
        "median_clock_hz",
        "ci_low_ns",
        "ci_high_ns",
        "ci_coverage",
    ),
    float("nan"),
)


def _per_rep(measured, keys: list[str]):
    """The measured rows' totals per (keys, mode, rep): duration and cycles summed over the
    rep's kernels, the median clock, and the kernel count."""
    grouped = measured.groupby([*keys, "mode", "rep"], sort=True)
    per_rep = grouped.agg(clock_hz=("clock_hz", "median"), kernels=("duration_ns", "size"))
    # min_count=1: a rep without cycles (nsys) stays NaN instead of summing to 0
    per_rep["duration_ns"] = grouped["duration_ns"].sum(min_count=1)
    per_rep["cycles"] = grouped["cycles"].sum(min_count=1)
    return per_rep


def _rep_stats(group) -> dict:
    """config_summary's columns from reps to error for one config × mode's per-rep totals."""
    from nsprof.analysis.confidence import median_interval

    median = float(group["duration_ns"].median())
    interval = median_interval(group["duration_ns"].to_numpy())
    return {
        "reps": len(group),
        "kernels": int(group["kernels"].median()),
        "median_ns": median,
        "min_ns": float(group["duration_ns"].min()),
        "max_ns": float(group["duration_ns"].max()),
        "spread": float((group["duration_ns"].max() - group["duration_ns"].min()) / median)
        if median
        else float("nan"),
        "median_cycles": float(group["cycles"].median()),
        "median_clock_hz": float(group["clock_hz"].median()),
        "ci_low_ns": interval.low,
        "ci_high_ns": interval.high,
        "ci_coverage": interval.coverage,
        "error": None,
    }
