"""What a session is asked, and what it gives back.

Holds SessionRun (one session's target, point ids, settings, driver, folder and callbacks, as a
standalone run of parts and a served job both take them) and Measured (what a session measured).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from nsprof.drivers.base import Driver
from nsprof.schema import Points
from nsprof.settings import ProfileSettings


def _no_progress(event: str, point: int, detail) -> None:
    """on_progress where the caller gave none."""


def _no_rows(frame) -> None:
    """on_rows where the caller gave none."""


@dataclass(frozen=True)
class SessionRun:
    """One session, as nsprof.session.parts.run_parts and nsprof.session.served.run_served take it."""

    target: str
    ids: tuple[int, ...]  # the point ids to measure (config ids for a target without shapes)
    points: Points
    settings: ProfileSettings
    driver: Driver
    work_dir: Path  # its reports, logs, status and job files
    job_extra: dict | None = None  # more fields of the worker's Job (expect, compiled, compile_here)
    # on_progress(event, point id, detail): "done", "fail" (detail: its Failure), "retry"
    notify: Callable[[str, int, object], None] = _no_progress
    # on_rows(frame): the rows that became final, as soon as they are read (see run_session)
    hand_over: Callable[[object], None] = _no_rows
    # its first worker run's profiler and worker, started ahead (nsprof.session.ahead.Ahead), or None
    ahead: object | None = None

    def only(self, ids) -> SessionRun:
        """This session for these point ids only."""
        return replace(self, ids=tuple(ids))


@dataclass
class Measured:
    """What one session (or one nsprof.measure.Backend run) measured."""

    frame: object  # the tidy DataFrame (nsprof.schema): measurements, and a row per failed config
    failures: dict[int, str] = field(
        default_factory=dict
    )  # config_id -> why it failed (nsprof.schema.Failure: its kind too)
    # what the (first) worker measured on, as it said after CUDA init: {"uuid", "name", ...}
    device: dict | None = None
    reports: list[Path] = field(default_factory=list)  # empty when the temporary work dir was removed
    # Reports and logs. None: a temporary folder that was removed after a clean run (no
    # failures); a folder the user named, or any folder of a run with failures, is kept.
    work_dir: Path | None = None
    wall_s: float = 0.0
    notes: list[str] = field(
        default_factory=list
    )  # what the run has to say about its numbers (nsprof.cluster)
    # an interleaved timer's throttle check, per result line (nsprof.timers.interleave.throttle_counts): its
    # notes say it, and a run over several GPUs says it once for all of them
    throttle_counts: list[dict] = field(default_factory=list)
    # Where wall_s went, in seconds, summed over the worker runs: the phases seen, in order
    # (nsprof.worker.phases.run_phases: tool_start ... tool_exit, then the session's own
    # cleanup, export and parse; see nsprof.session.timing.PHASES). They sum to at most wall_s;
    # empty where not recorded.
    phases: dict[str, float] = field(default_factory=dict)
    # Per config: {"build": s, "measure": s} from the worker's own times (summed over runs).
    config_phases: dict[int, dict[str, float]] = field(default_factory=dict)
