"""What one finished worker run ("part") leaves for its session, read from its status file and its report:
Part and read_part (its whole configs, its failures, what it lost and why), complete_configs (which configs
a report holds whole), rows_of, drop_empty_stacks, and timeout_failure (a config that ran past its window)."""

from __future__ import annotations

import time
from pathlib import Path

from nsprof.drivers.base import Driver, disk_full
from nsprof.errors import NsprofError, ToolFailed
from nsprof.schema import Failure, Points
from nsprof.session.request import SessionRun
from nsprof.session.supervise import RunEnd
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import RunStatus, parse_status


def timeout_failure(timeout_s: float) -> Failure:
    """A config that ran past its window of `timeout_s` (kind timeout, its bound kept as a number)."""
    return Failure(f"timeout: still running after {timeout_s:g} s", "timeout", timeout_s)


def _incomplete(measured, done: list[int], settings: ProfileSettings, points: Points) -> dict[int, str]:
    """For each config of `done` with rows in the report that is not whole there: why not.

    Whole means every (mode, rep) range is there and every rep of a mode has as many kernels
    as that mode's other reps: a report cut off mid-write (a profiler killed, ncu streaming its
    report to disk) can lose a rep's last kernels without losing its range. (With one rep per
    mode there is nothing to compare a rep with; modes are not compared with each other, since
    a whole-graph workload is one row per rep.) `done` and the keys are point ids of `points`.
    """
    point = points.of_frame(measured)
    rows = measured.assign(point=point)[point.isin(done).fillna(False).astype(bool)]
    if rows.empty:
        return {}
    expected = len(set(settings.modes)) * settings.reps
    per_rep = rows.groupby(["point", "mode", "rep"], dropna=False).size()
    reasons = {}
    for config_id, counts in per_rep.groupby(level="point"):
        if len(counts) < expected:
            reasons[int(config_id)] = "the report held only some of its reps"
            continue
        for mode, mode_counts in counts.groupby(level="mode", dropna=False):
            if mode_counts.nunique() > 1:
                per = ", ".join(str(int(n)) for n in mode_counts)
                reasons[int(config_id)] = f"its {mode} reps held different numbers of kernels ({per})"
                break
    return reasons


def complete_configs(
    measured, done: list[int], settings: ProfileSettings, points: Points | None = None
) -> set[int]:
    """The configs (point ids of `points`; config ids without it) of `done` that are whole in the
    report (see _incomplete)."""
    points = points or Points(0)
    point = points.of_frame(measured)
    present = set(point[point.isin(done).fillna(False).astype(bool)].astype(int))
    return present - set(_incomplete(measured, done, settings, points))


def rows_of(measured, ids: set[int], points: Points):
    """The rows of `measured` that belong to these point ids."""
    return measured[points.of_frame(measured).isin(list(ids)).fillna(False).astype(bool)]


def _explained(exc: NsprofError, log: Path) -> NsprofError:
    """A full disk explains a missing or truncated report better than the parser can."""
    full = disk_full(log)
    return ToolFailed(f"{full} (log: {log})") if full else exc


class Part:
    """What one worker run leaves for the session."""

    def __init__(self, status: RunStatus) -> None:
        self.status = status
        self.kept = None  # the rows of its whole configs
        self.failures: dict[int, str] = dict(status.failed)  # configs that failed in it, for good
        self.lost: dict[int, str] = {}  # done, but not whole in the report: why
        # the config charged with the run's end: killed for its timeout, or current when the worker died
        self.crashed: int | None = None
        self.report: Path | None = None
        self.export_s = 0.0  # the driver's finish (nsys: export to SQLite)
        self.parse_s = 0.0  # the driver's read


def _lost_reason(end: RunEnd, settings: ProfileSettings, driver: Driver) -> str:
    """Why a run that went past its phase bound may have lost what it measured ("" if it did not)."""
    if end.stalled == "exit":
        return f"the worker hung at exit and was killed after {settings.phase_bound_s:g} s" + (
            f"; {driver.clean_exit_note}" if driver.clean_exit_note else ""
        )
    if end.stalled == "report":
        return (
            f"{settings.backend} was still writing its report {settings.phase_bound_s:g} s "
            "after the worker's last status line"
        )
    return ""


def read_part(run: SessionRun, base: Path, log: Path, end: RunEnd) -> Part:
    """The status and report of one finished worker run: what it measured whole, what failed."""
    settings, driver = run.settings, run.driver
    part = Part(parse_status(base.with_suffix(".status").read_text(errors="replace")))
    drop_empty_stacks(base)
    # the timeout's config, even where the profiler ran the worker again; one whose `done` came just before
    # the kill is whole, and the config the kill cut short is measured again, nobody's failure
    timed_out = None if end.timed_out in part.status.done else end.timed_out
    part.crashed = crashed = part.status.current if end.timed_out is None else timed_out
    if crashed is not None:
        part.failures[crashed] = (
            timeout_failure(settings.timeout_s)
            if crashed == timed_out
            else driver.crash_reason(log, end.returncode)
        )
    # A worker that did not reach its end (crashed, timed out, lost its CUDA context, killed
    # with its profiler or for hanging) may take its report, or the report's kernels, with it.
    abnormal = crashed is not None or not part.status.ended or end.stalled is not None or end.returncode < 0
    complete, incomplete, lost_reason = _read_report(
        part, run, base, log, end, abnormal, _lost_reason(end, settings, driver)
    )
    if driver.writes_report:
        done = part.status.done
        part.lost = {c: incomplete.get(c) or lost_reason for c in done if c not in complete}
    return part


def _read_report(part: Part, run: SessionRun, base, log, end: RunEnd, abnormal: bool, lost_reason: str):
    """Read the part's report into `part` (report, kept, export_s, parse_s): (its whole configs, why
    each other config it ran is not whole, why the report lost what it did). A report that cannot be
    read after a normal run that finished configs is an error; after an abnormal one, a loss."""
    settings, driver, done = run.settings, run.driver, part.status.done
    measured, incomplete, complete = None, {}, set()
    began = time.monotonic()
    try:
        part.report = driver.finish(base, log)
    except NsprofError as exc:
        if done and not abnormal:
            raise _explained(exc, log) from None
        lost_reason = lost_reason or str(exc)
    finally:
        part.export_s = time.monotonic() - began
    if part.report is not None:
        began = time.monotonic()
        try:
            try:
                measured = driver.read(part.report, settings)
            finally:
                part.parse_s = time.monotonic() - began
        except NsprofError as exc:
            if done and not abnormal:
                raise _explained(exc, log) from None
            # A profiler whose target was killed may write a report without its kernels (nsys:
            # CUPTI buffers are flushed at a clean exit only); and where no config of the run got
            # to `done` (each failed: to compile, to build), no kernel of ours was launched: an
            # empty report (nsys: no kernel table) is what it should be, the status says why.
            part.report = None
            lost_reason = lost_reason or str(exc)
        else:
            # Only whole configs count as measured: a report can be cut off mid-write (ncu's
            # streams to disk) when the profiler is killed, even after its orphaned worker
            # reached its end. A partial config is measured again whole.
            incomplete = _incomplete(measured, done, settings, run.points)
            complete = complete_configs(measured, done, settings, run.points)
            part.kept = rows_of(measured, complete, run.points)
    elif done and not abnormal and driver.writes_report:
        raise ToolFailed(
            f"{settings.backend} wrote no report: {driver.diagnose(log, end.returncode)} (log: {log})"
        )
    return complete, incomplete, lost_reason


def drop_empty_stacks(base: Path) -> None:
    """The worker's crash-stack file (nsprof.worker.__main__) once it ended: a worker killed from outside
    (a timeout, Ctrl-C) leaves it empty, with nothing to keep."""
    stacks = base.with_suffix(".job.stack")
    if stacks.exists() and not stacks.stat().st_size:
        stacks.unlink()
