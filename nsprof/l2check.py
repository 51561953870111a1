"""The cold-L2 check of `nsprof validate --l2-check`: whether the timers that claim a cold L2 measure
the finalists cold.

The finalists (per shape: the first truth's fastest configs, nsprof.analysis.l2.FINALISTS of them,
and each cold timer's pick) run in two ncu sessions that count the L2 hit rate
(lts__t_sector_hit_rate.pct) beside the duration, nothing else, each pass a new run of the worker
(ncu --replay-mode application: kernel replay would save every reachable buffer through L2 between the
worker's flush and the kernel; nsprof.drivers.ncu):
- "ncu's flush": --cache-control all, ncu flushing every cache before the kernel: cold by the tool's
  own definition;
- the other, --cache-control none, its reps taking turns: "timers' flush" after the flush every
  nsprof cold timer uses (nsprof.timers.base.Flusher: a buffer of 4x L2, at least 256 MiB, zeroed;
  TileLang's and Triton's do_bench zero 256 MB the same way), and "no flush" after the config's own
  last launch.
A finalist was measured cold when the timers' flush leaves its hit rate within
nsprof.analysis.l2.COLD_MARGIN points of ncu's flush; one whose hit rate without a flush is as low
(a kernel whose data does not stay in L2) cannot tell cold from warm, and says so.

Holds run_check, the two sessions; nsprof.analysis.l2 reads their rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nsprof.analysis.l2 import CONDITIONS

METHOD_PREFIX = "L2 check ("  # a check session's failures are METHOD_PREFIX + "<session>)"

CHECK_REPS = 3  # reps per condition


def run_check(target: str, space, points: list[int], profile, stage, cluster=None) -> tuple[list[dict], dict]:
    """The two sessions over `points` (point ids of `space`) under ncu, `profile` the truths' session
    settings, on the GPUs of `cluster` (ClusterSettings, as validate's truths) where given: rows
    {config_id, shape, mode, condition, l2_hit_pct}, one per kernel measured, and failures
    {("L2 check (<session>)", config_id, shape): reason}, a session that failed whole (no ncu, the
    GPU held) a failure of each of its points: what validate measured before is kept."""
    from nsprof.cluster import sharded
    from nsprof.errors import NsprofError
    from nsprof.measure import GroundTruth
    from nsprof.profile import profile_result

    base = replace(profile, backend="ncu", l2_hit_rate=True, clock_control="base")
    sessions = (
        ("ncu", replace(base, cache_control="all", reps=CHECK_REPS), lambda rep: CONDITIONS[0]),
        (
            "flushed",
            replace(base, cache_control="none", reps=2 * CHECK_REPS, flushes=(True, False)),
            lambda rep: CONDITIONS[1] if rep % 2 == 0 else CONDITIONS[2],
        ),
    )
    rows, failures, layout = [], {}, space.points
    for name, settings, condition in sessions:
        settings = replace(settings, work_dir=Path(profile.work_dir) / f"l2_{name}")
        method = f"{METHOD_PREFIX}{name})"
        try:
            backend = sharded(GroundTruth(settings), cluster) if cluster else None
            progress = stage(method, len(points))
            result = profile_result(
                target, settings, space=space, points=points, on_progress=progress, backend=backend
            )
        except NsprofError as exc:
            failures.update({(method, *layout.split(p)): str(exc) for p in points})
            continue
        failures.update({(method, *layout.split(int(p))): why for p, why in result.failures.items()})
        rows += _rows(result.frame, condition)
    return rows, failures


def _rows(frame, condition) -> list[dict]:
    import pandas as pd

    frame = frame[frame["error"].isna() & frame["l2_hit_pct"].notna()]
    return [
        {
            "config_id": int(r.config_id),
            "shape": None if pd.isna(r.shape) else int(r.shape),
            "mode": r.mode,
            "condition": condition(int(r.rep)),
            "l2_hit_pct": float(r.l2_hit_pct),
        }
        for r in frame.itertuples()
    ]
