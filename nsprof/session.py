"""One profiling session: all configs in one profiled worker process, restarted after faults.

The parent writes a job file, starts the profiler (which starts the worker), and follows
the worker's status file: it counts progress, kills a config that runs past its timeout,
and when the worker dies (illegal address, abort, out of memory, timeout) records that
config as failed with the reason and starts a new worker at the next config. Each worker
run writes its own report part; every part is read, so nothing measured is lost.

Every phase of a worker run is bounded: a config's window by settings.timeout_s, and the
rest (starting, between configs, exiting) by settings.phase_bound_s without a status line.
No child outlives nsprof: the profiler gets SIGKILL when nsprof dies (Linux's parent-death
signal), the worker ends when nsprof's pipe closes (see nsprof.worker), and what a run leaves
holding the GPU lock outside the profiler's process group (nsys's agent) is killed once the run
has ended, however it ended (_run_worker). On Ctrl-C (and
SIGTERM/SIGHUP, which interrupt_on_termination turns into Ctrl-C) the worker is asked to stop
cleanly, the interrupted part's report is read, and its whole configs are handed to on_rows
before the KeyboardInterrupt goes on.

This module only supervises (parts, timeouts, requeues). The profiler is a Driver
(nsprof.drivers.base) from nsprof.drivers.registry: it gives the command line, the report,
its rows, their labels and the one-line reason for a failure; the session never asks which
profiler it runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nsprof.drivers import registry
from nsprof.drivers.base import Driver, disk_full
from nsprof.errors import NsprofError, TargetChanged, ToolFailed
from nsprof.host.children import (
    DeathPipe,
    exit_code,
    kill_group,
    kill_lock_holders_left,
    kill_pid,
    launch_child,
    note,
    pid_alive,
    wait_exit,
)
from nsprof.reports.checks import one_line
from nsprof.schema import FAILURE_KINDS, Failure, Points, failure_frame
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import Bounds, Job, RunStatus, parse_status, run_phases

POLL_S = 0.1
MAX_LOST_RETRIES = 2  # a config measured but lost with a crashed run's report is measured again
GRACE_S = 60.0  # after killing a worker, how long the profiler gets to write its report
STOP_GRACE_S = 15.0  # after asking a worker to stop (nsprof interrupted), how long before it is killed


def _explained(exc: NsprofError, log: Path) -> NsprofError:
    """A full disk explains a missing or truncated report better than the parser can."""
    full = disk_full(log)
    return ToolFailed(f"{full} (log: {log})") if full else exc


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
    # Where wall_s went, in seconds, summed over the worker runs: the phases seen, in order
    # (nsprof.worker.protocol.run_phases: tool_start ... tool_exit, then the session's own
    # cleanup, export and parse; see PHASES). They sum to at most wall_s; empty where not recorded.
    phases: dict[str, float] = field(default_factory=dict)
    # Per config: {"build": s, "measure": s} from the worker's own times (summed over runs).
    config_phases: dict[int, dict[str, float]] = field(default_factory=dict)


def _incomplete(
    measured, done: list[int], settings: ProfileSettings, points: Points | None = None
) -> dict[int, str]:
    """For each config of `done` with rows in the report that is not whole there: why not.

    Whole means every (mode, rep) range is there and every rep of a mode has as many kernels
    as that mode's other reps: a report cut off mid-write (a profiler killed, ncu streaming its
    report to disk) can lose a rep's last kernels without losing its range. (With one rep per
    mode there is nothing to compare a rep with; modes are not compared with each other, since
    a whole-graph workload is one row per rep.) `done` and the keys are point ids (`points`,
    nsprof.schema.Points: config ids for a target without shapes).
    """
    point = (points or Points(0)).of_frame(measured)
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


def _complete_configs(
    measured, done: list[int], settings: ProfileSettings, points: Points | None = None
) -> set[int]:
    """The configs (point ids) of `done` that are whole in the report (see _incomplete)."""
    point = (points or Points(0)).of_frame(measured)
    present = set(point[point.isin(done).fillna(False).astype(bool)].astype(int))
    return present - set(_incomplete(measured, done, settings, points))


def _rows_of(measured, ids: set[int], points: Points):
    """The rows of `measured` that belong to these point ids."""
    return measured[points.of_frame(measured).isin(list(ids)).fillna(False).astype(bool)]


def _kill_left_worker(status_file: Path, job_file: Path) -> None:
    """Kill this run's worker if it outlived its profiler outside the profiler's process group
    (a profiler may start its target in a group of its own). Only a process whose command line
    names this run's job file is killed: the pid may belong to another process by now."""
    try:
        pid = parse_status(status_file.read_text(errors="replace")).pid
    except OSError:
        return
    if not pid_alive(pid):
        return
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if os.fsencode(str(job_file)) in command:
        kill_pid(pid)


# Every phase a session records, in order: a worker run's (nsprof.worker.protocol.run_phases),
# then nsprof's own after each run: cleanup (making sure nothing of the run is left), export (the
# driver's finish: nsys export to SQLite) and parse (the driver's read).
PHASES = (
    "tool_start",
    "worker_start",
    "target_import",
    "cuda_init",
    "compile_wait",
    "build",
    "measure",
    "between",
    "worker_exit",
    "tool_exit",
    "cleanup",
    "export",
    "parse",
)


@dataclass
class _RunEnd:
    """How one worker run ended."""

    returncode: int
    timed_out: int | None = None  # the config killed for running past settings.timeout_s
    stalled: str | None = None  # the phase that went past settings.phase_bound_s (see _phase)
    # time.monotonic() when nsprof started the profiler, first saw the worker gone, saw the
    # profiler exit, and had cleaned up after it
    launched: float = 0.0
    worker_gone: float | None = None
    exited: float = 0.0
    cleaned: float = 0.0


def _phase(status: RunStatus) -> str:
    """What a worker is doing while no config is current."""
    if status.pid is None:
        return "start"  # the profiler, or Python, has not started it yet
    if not pid_alive(status.pid):
        return "report"  # the worker is gone; the profiler is still writing its report
    if status.ended or status.stopped:
        return "exit"
    if not status.started:
        return "start"
    return "between"


_PHASE_WORDS = {
    "start": "while starting",
    "between": "between two configs",
    "exit": "at exit (after its last config)",
    "report": "while the profiler wrote its report (the worker had exited)",
}


def _end_run(proc, pid: int | None, kill_worker: bool = True) -> None:
    """Kill a worker that went past a bound; the profiler gets GRACE_S to write its report."""
    if pid is None:
        kill_group(proc)  # nothing ran: nothing to write
        return
    if kill_worker:
        kill_pid(pid)  # the worker only: the profiler stays to write its report
    if wait_exit(proc, GRACE_S) is None:
        kill_group(proc)


def _follow(proc, status_file: Path, settings: ProfileSettings, notify, log_handle) -> _RunEnd:
    """Follow one worker run until it ends: progress events, and the bound on every phase.

    A config may run settings.timeout_s from its start line; outside a config (starting,
    between configs, exiting) the worker may go settings.phase_bound_s without a new line.
    """
    seen = RunStatus()
    bounds = Bounds(settings.timeout_s, settings.phase_bound_s, time.monotonic())
    timed_out: int | None = None
    stalled: str | None = None
    worker_gone: float | None = None
    while True:
        returncode = exit_code(proc)
        polled = time.monotonic()
        text = status_file.read_text(errors="replace")
        status = parse_status(text)
        if (
            worker_gone is None
            and status.pid is not None
            and (status.ended or status.stopped or returncode is not None)
            and not pid_alive(status.pid)
        ):
            worker_gone = polled
        for cfg in status.done[len(seen.done) :]:
            notify("done", cfg, "")
        for cfg in status.failed:
            if cfg not in seen.failed:
                notify("fail", cfg, status.failed[cfg])
        passed = bounds.passed(text, status, time.monotonic())
        seen = status
        if returncode is not None:
            return _RunEnd(returncode, timed_out, stalled, worker_gone=worker_gone, exited=polled)
        if timed_out is None and stalled is None:
            if passed == "timeout":
                timed_out = status.current
                _end_run(proc, status.pid)
                continue
            if passed == "stalled":
                stalled = _phase(status)
                note(
                    log_handle,
                    f"no progress for {settings.phase_bound_s:g} s {_PHASE_WORDS[stalled]}: "
                    "nsprof stopped the run",
                )
                # A worker already gone ("report") is not killed: its pid may be another's by now.
                _end_run(proc, status.pid, kill_worker=stalled != "report")
                continue
        # Once the worker said it ended, poll faster: its exit and the profiler's are timed by it.
        time.sleep(POLL_S / 5 if status.ended or status.stopped else POLL_S)


def _stop_cleanly(proc, status_file: Path) -> None:
    """nsprof was interrupted: ask the worker to stop (it exits cleanly, so that nsys still
    flushes what it measured), kill it after STOP_GRACE_S, give the profiler GRACE_S for its
    report, then kill whatever is left of the process group."""
    pid = parse_status(status_file.read_text(errors="replace")).pid
    if pid is None:
        kill_group(proc)  # the worker has not started: nothing measured in this part
        return
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + STOP_GRACE_S
        while pid_alive(pid) and exit_code(proc) is None and time.monotonic() < deadline:
            time.sleep(POLL_S / 2)
        kill_pid(pid if pid_alive(pid) else None)
    wait_exit(proc, GRACE_S)
    kill_group(proc)


def interrupt_on_termination() -> None:
    """Make SIGTERM and SIGHUP act like Ctrl-C (a KeyboardInterrupt in the main thread).

    `timeout`, Slurm, systemd and a closed terminal send these to nsprof's own process only:
    as a KeyboardInterrupt they stop the session's children and keep what was measured. A
    signal that is ignored already (nohup) stays ignored. Call it from the main thread.
    """

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, interrupt)


def run_session(
    target: str,
    n_configs: int,
    settings: ProfileSettings,
    config_ids: list[int] | None = None,
    on_progress: Callable[[str, int, str], None] | None = None,
    job_extra: dict | None = None,
    on_rows: Callable[[object], None] | None = None,
    driver: Driver | None = None,
    n_shapes: int = 0,
) -> Measured:
    """Measure `config_ids` (default: all) of `target` under settings.backend (its driver from
    nsprof.drivers.registry, unless `driver` is given).

    For a target with `n_shapes` shapes the ids are point ids (nsprof.schema.Points(n_configs,
    n_shapes): every (shape, config) pair of one session), and so are the keys of
    Measured.failures and the ids given to on_progress; every row names its own config_id and
    shape.

    Every session holds the GPU lock (nsprof.host.lock), the fast timers' too: two nsprof runs
    never measure on the same GPU at once. The profiler and worker inherit the lock's
    descriptor, so it stays held while either lives. Where an `nsprof serve` of the same backend
    runs for the GPU (nsprof.serve; not with NSPROF_SERVE=0), the session is one job of its
    long-lived worker instead: the server holds the lock, and what a fault there leaves
    unmeasured is measured here, standalone, once the server has ended.

    on_rows(frame) is called once per worker run ("part"), as soon as its report is read, with
    the tidy rows (nsprof.schema.make_frame) of every config that became final in it: the
    measurements of whole configs, and a row with `error` set for each config that failed;
    configs left unrun at the end come in a last call. Every row of Measured.frame comes
    through on_rows exactly once. On KeyboardInterrupt the interrupted part's whole configs
    (and the failures it recorded) are handed over before the interrupt goes on; the config it
    was measuring is neither measured nor failed. An exception raised by on_rows goes through
    (the children are stopped first).
    """
    import contextlib

    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock

    driver = driver or registry.get_driver(settings.backend)
    server, unfit = None, None
    if getattr(
        driver, "serves", False
    ):  # an `nsprof serve` of this GPU (it holds the lock): measure through it
        from nsprof.serve_client import find_server

        server, unfit = find_server(driver, settings)
    if server is not None:
        return _run_session(
            driver,
            target,
            n_configs,
            settings,
            config_ids,
            on_progress,
            job_extra,
            on_rows,
            n_shapes,
            server=server,
        )
    try:
        with gpu_lock(0, wait=settings.wait_gpu) if driver.locks_gpu else contextlib.nullcontext():
            return _run_session(
                driver, target, n_configs, settings, config_ids, on_progress, job_extra, on_rows, n_shapes
            )
    except GpuBusy as exc:
        if unfit and unfit not in str(exc):
            raise GpuBusy(f"{exc} ({unfit})", device=exc.device, path=exc.path, holder=exc.holder) from None
        raise


def _run_session(
    driver: Driver,
    target: str,
    n_configs: int,
    settings: ProfileSettings,
    config_ids: list[int] | None = None,
    on_progress: Callable[[str, int, str], None] | None = None,
    job_extra: dict | None = None,
    on_rows: Callable[[object], None] | None = None,
    n_shapes: int = 0,
    server: dict | None = None,
) -> Measured:
    """Measure `config_ids` (default: all) of `target` under settings.backend (through the `nsprof
    serve` of `server`, its state, when given: _run_served).

    Without settings.work_dir the reports and logs go to a temporary folder, removed after
    a clean run (every config measured) and kept, named in Measured.work_dir or in the
    exception's message, when anything failed.
    """
    temporary = settings.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="nsprof-")) if temporary else Path(settings.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        if server is not None:
            result = _run_served(
                server,
                driver,
                target,
                n_configs,
                settings,
                config_ids,
                on_progress,
                job_extra,
                on_rows,
                work_dir,
                Points(n_configs, n_shapes),
            )
        else:
            result = _run_parts(
                target,
                n_configs,
                settings,
                config_ids,
                on_progress,
                job_extra,
                driver,
                work_dir,
                on_rows,
                Points(n_configs, n_shapes),
            )
    except NsprofError as exc:
        # The logs explain the failure: keep them and say where they are.
        if temporary:
            raise kept_in(exc, work_dir) from exc
        raise
    if temporary and not result.failures:
        import shutil

        try:
            shutil.rmtree(work_dir)
        except OSError:
            return result  # not all of it could go: the result still names the folder
        result.work_dir, result.reports = None, []
    return result


def kept_in(exc: NsprofError, folder: Path) -> NsprofError:
    """`exc`, its message naming `folder` (kept: its logs explain the failure), of the same class
    and attributes (GpuBusy's holder among them)."""
    if str(folder) in str(exc):
        return exc
    noted = type(exc).__new__(
        type(exc)
    )  # not copy.copy: it calls __init__ with args alone (GpuBusy's need keywords)
    noted.__dict__.update(exc.__dict__)
    noted.args = (f"{exc} (reports and logs kept in {folder})",)
    return noted


@contextlib.contextmanager
def work_folder(given: Path | None, prefix: str) -> Iterator[Path]:
    """The folder a command's sessions put their reports and logs in: `given` (--work-dir: kept), or
    a temporary one (prefix `prefix`) that is removed when the body ends, unless it ends in an
    NsprofError with something in the folder, whose message then names the folder kept (as a
    session's own temporary folder)."""
    if given is not None:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    import shutil

    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    except NsprofError as exc:
        if not any(folder.iterdir()):  # nothing ran there (the GPU was busy, say): nothing to keep
            folder.rmdir()
            raise
        raise kept_in(exc, folder) from exc
    except BaseException:  # Ctrl-C, SIGTERM, an internal error: nothing there is named to the user
        shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)


def _failure_rows(
    failures: dict[int, str], settings: ProfileSettings, driver: Driver, points: Points | None = None
):
    """nsprof.schema.failure_frame's rows, labelled as `driver`'s measurements under `settings` are."""
    return failure_frame(failures, points, source=settings.backend, **driver.labels(settings))


def _job(
    target: str,
    ids: list[int],
    status_file: Path,
    settings: ProfileSettings,
    points: Points,
    job_extra: dict | None,
    **more,
) -> Job:
    """The worker's job for `ids` under `settings` (a standalone part's, or a served one's)."""
    shapes = {"n_configs": points.n_configs, "n_shapes": points.n_shapes} if points.shaped else {}
    return Job(
        target=target,
        config_ids=ids,
        status=str(status_file),
        modes=list(settings.modes),
        reps=settings.reps,
        warmup=settings.warmup,
        compile_timeout_s=settings.compile_timeout_s,
        **shapes,
        **more,
        **(job_extra or {}),
    )


def _refuse_changed(status: RunStatus, log: Path) -> None:
    """A worker that found the target changed since nsprof read it (Job.expect) measured nothing: the
    session ends there, whatever the earlier parts measured (handed over already, of the target as read)."""
    if status.changed:
        raise TargetChanged(
            f"{status.changed}; the worker measured nothing of it (run nsprof again to measure "
            f"the target as it is now; log: {log})"
        )


def _remove_leftovers(driver: Driver, base: Path) -> None:
    """Remove the report files an earlier run of this driver left under this part's name in a
    reused work folder: a profiler that writes no report this time must not have the old one read
    as this run's (the driver's finish takes whatever lies at the part's report path)."""
    for path in driver.report_files(base):
        path.unlink(missing_ok=True)


def _salvage(driver, settings: ProfileSettings, base: Path, log: Path, hand_over, points: Points) -> None:
    """After an interrupt: hand over what the interrupted part finished (whole configs only,
    and the failures it recorded). A report that cannot be read loses only this part."""
    status = parse_status(base.with_suffix(".status").read_text(errors="replace"))
    frames = [_failure_rows(status.failed, settings, driver, points)] if status.failed else []
    try:
        report = driver.finish(base, log)
        if report is not None:
            measured = driver.read(report, settings)
            complete = _complete_configs(measured, status.done, settings, points) - set(status.failed)
            frames.insert(0, _rows_of(measured, complete, points))
    except NsprofError:
        pass
    frames = [frame for frame in frames if len(frame)]
    if frames:
        import pandas as pd

        hand_over(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])


def _run_worker(
    command: list[str],
    log: Path,
    status_file: Path,
    job_file: Path,
    settings: ProfileSettings,
    notify,
    pipe: DeathPipe,
) -> _RunEnd:
    """Start the profiler (which starts the worker) and follow it to its end; nothing of it is
    left running on return, nor when an interrupt or an error goes through."""
    with open(log, "w") as log_handle:
        proc = None
        try:
            launched = time.monotonic()
            proc = launch_child(command, log_handle, pipe)
            end = _follow(proc, status_file, settings, notify, log_handle)
            end.launched = launched
        except KeyboardInterrupt:
            if proc is not None:
                try:
                    _stop_cleanly(proc, status_file)
                except BaseException:
                    kill_group(proc)  # interrupted again: stop waiting
                    raise
            raise
        except BaseException:
            # An error here: the profiler and worker run in their own process session, so they
            # would outlive nsprof and keep the GPU unless killed.
            if proc is not None:
                kill_group(proc)
            raise
        else:
            # A profiler that died (killed, crashed) can leave its worker running: stop whatever is
            # left of the group before reading the status, so nothing writes to it.
            kill_group(proc)
        finally:
            if proc is not None:
                # However the run ended (its end, an interrupt, an error): what it left outside its
                # process group (a worker in a group of its own, nsys's agent holding the GPU lock)
                # goes too, or it would keep the GPU after nsprof.
                _kill_left_worker(status_file, job_file)
                kill_lock_holders_left(log_handle)
        end.cleaned = time.monotonic()
    return end


@dataclass
class _Part:
    """What one worker run leaves for the session."""

    status: RunStatus
    kept: object | None = None  # the rows of its whole configs
    failures: dict[int, str] = field(default_factory=dict)  # configs that failed in it, for good
    lost: dict[int, str] = field(default_factory=dict)  # done, but not whole in the report: why
    report: Path | None = None
    export_s: float = 0.0  # the driver's finish (nsys: export to SQLite)
    parse_s: float = 0.0  # the driver's read


def _read_part(
    driver, settings: ProfileSettings, base: Path, log: Path, end: _RunEnd, points: Points
) -> _Part:
    """The status and report of one finished worker run: what it measured whole, what failed."""
    status = parse_status(base.with_suffix(".status").read_text(errors="replace"))
    part = _Part(status=status, failures=dict(status.failed))
    crashed = status.current
    if crashed is not None:
        part.failures[crashed] = (
            timeout_failure(settings.timeout_s)
            if crashed == end.timed_out
            else driver.crash_reason(log, end.returncode)
        )
    # A worker that did not reach its end (crashed, timed out, lost its CUDA context, killed
    # with its profiler or for hanging) may take its report, or the report's kernels, with it.
    abnormal = crashed is not None or not status.ended or end.stalled is not None or end.returncode < 0
    lost_reason = ""
    if end.stalled == "exit":
        lost_reason = f"the worker hung at exit and was killed after {settings.phase_bound_s:g} s" + (
            f"; {driver.clean_exit_note}" if driver.clean_exit_note else ""
        )
    elif end.stalled == "report":
        lost_reason = (
            f"{settings.backend} was still writing its report {settings.phase_bound_s:g} s "
            "after the worker's last status line"
        )
    measured, incomplete, complete = None, {}, set()
    began = time.monotonic()
    try:
        part.report = driver.finish(base, log)
    except NsprofError as exc:
        if status.done and not abnormal:
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
            if status.done and not abnormal:
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
            incomplete = _incomplete(measured, status.done, settings, points)
            complete = _complete_configs(measured, status.done, settings, points)
            part.kept = _rows_of(measured, complete, points)
    elif status.done and not abnormal and driver.writes_report:
        raise ToolFailed(
            f"{settings.backend} wrote no report: {driver.diagnose(log, end.returncode)} (log: {log})"
        )
    if driver.writes_report:
        part.lost = {c: incomplete.get(c) or lost_reason for c in status.done if c not in complete}
    return part


def _run_parts(
    target: str,
    n_configs: int,
    settings: ProfileSettings,
    config_ids: list[int] | None,
    on_progress: Callable[[str, int, str], None] | None,
    job_extra: dict | None,
    driver,
    work_dir: Path,
    on_rows: Callable[[object], None] | None = None,
    points: Points | None = None,
) -> Measured:
    """The session proper: worker runs ("parts") until every config is measured or failed."""
    import pandas as pd

    from nsprof.schema import make_frame

    remaining = list(config_ids if config_ids is not None else range(n_configs))
    reports: list[Path] = []
    failures: dict[int, str] = {}
    frames = []
    retries: dict[int, int] = {}
    measured_any = False  # did any part keep a measurement (or, with no profiler, finish a config)?
    device: dict | None = None
    started_at = time.monotonic()
    timing = _Timing()
    notify = on_progress or (lambda event, cfg, detail: None)
    hand_over = on_rows or (lambda frame: None)
    points = points or Points(n_configs)

    def settle(new_failures: dict[int, str], kept=None) -> None:
        """Record what became final, and hand it over at once."""
        failures.update(new_failures)
        new = [
            f
            for f in (kept, _failure_rows(new_failures, settings, driver, points) if new_failures else None)
            if f is not None and len(f)
        ]
        frames.extend(new)
        if new:
            hand_over(pd.concat(new, ignore_index=True) if len(new) > 1 else new[0])

    pipe = DeathPipe()
    try:
        for part_number in range(settings.max_restarts + 1):
            if not remaining:
                break
            base = work_dir / f"part{part_number}"
            _remove_leftovers(driver, base)
            status_file = base.with_suffix(".status")
            status_file.write_text("")
            log = base.with_suffix(".log")
            job = _job(
                target,
                remaining,
                status_file,
                settings,
                points,
                job_extra,
                watch_fd=pipe.read_fd,
                watch_inode=pipe.inode,
            )
            job_file = job.write(base.with_suffix(".job.json"))
            command = driver.build_command(settings, job_file, base)
            settled = False
            try:
                end = _run_worker(command, log, status_file, job_file, settings, notify, pipe)
                _refuse_changed(parse_status(status_file.read_text(errors="replace")), log)
                part = _read_part(driver, settings, base, log, end, points)
                timing.add(part, end, log)
                status = part.status
                device = device or status.device
                if status.current is not None:
                    notify("fail", status.current, part.failures[status.current])
                if part.report is not None:
                    reports.append(part.report)
                requeued = []
                for config_id, why in part.lost.items():
                    # Measured but not (whole) in the report: measure again, then call it a failure.
                    retries[config_id] = retries.get(config_id, 0) + 1
                    if retries[config_id] > MAX_LOST_RETRIES:
                        part.failures[config_id] = Failure(
                            f"measured {MAX_LOST_RETRIES + 1} times, but {settings.backend}'s report lost it each time"
                            + (f" ({one_line(why, 120)})" if why else ""),
                            "lost",
                        )
                    else:
                        requeued.append(config_id)
                for config_id in requeued:
                    notify("retry", config_id, "its report was lost with the crashed run; measuring again")
                if not driver.writes_report and status.done or part.kept is not None and len(part.kept):
                    measured_any = True
                settled = True
                settle(part.failures, part.kept)
            except KeyboardInterrupt:
                if not settled:
                    _salvage(driver, settings, base, log, hand_over, points)
                raise
            progressed = (set(status.done) - set(requeued)) | set(part.failures)
            if not progressed and not requeued:
                # The worker never reached a config: it could not start (or hung while starting).
                reason = _start_failure(status, end, settings, log, driver)
                if not measured_any:
                    raise ToolFailed(f"the profiled worker measured nothing: {reason} (log: {log})")
                # Keep what the earlier parts measured; nothing is known against the configs left.
                not_run = {
                    c: Failure(f"not run: the worker failed to start: {reason}", "not_run") for c in remaining
                }
                for config_id, why in not_run.items():
                    notify("fail", config_id, why)
                settle(not_run)
                remaining = []
                break
            # Lost configs go last, after the configs that have not run yet: a config that crashes
            # the worker again then cannot take them down with it a second time.
            remaining = [c for c in remaining if c not in progressed and c not in requeued] + requeued
    finally:
        pipe.close()
    if remaining:  # the restart budget ran out before these ran
        not_run = {
            c: Failure(
                f"not run: the worker was restarted {settings.max_restarts} times "
                "(raise ProfileSettings.max_restarts)",
                "not_run",
            )
            for c in remaining
        }
        for config_id, why in not_run.items():
            notify("fail", config_id, why)
        settle(not_run)
    frame = pd.concat(frames, ignore_index=True) if frames else make_frame([])
    ended_at = time.monotonic()
    timing.write(work_dir / PHASES_FILE, started_at, ended_at)
    return Measured(
        frame=frame,
        reports=reports,
        failures=failures,
        work_dir=work_dir,
        wall_s=ended_at - started_at,
        device=device,
        phases=timing.total(),
        config_phases=timing.configs,
    )


def timeout_failure(timeout_s: float) -> Failure:
    """A config that ran past its window of `timeout_s` (kind timeout, its bound kept as a number)."""
    return Failure(f"timeout: still running after {timeout_s:g} s", "timeout", timeout_s)


PHASES_FILE = "phases.json"  # in the session's work folder: every run's phases (see _Timing.write)


def timing_record(
    wall_s: float, phases: dict[str, float], configs: dict[int, dict[str, float]], **extra
) -> dict:
    """Where a session's time went, as JSON takes it (PHASES_FILE, tune --json's first_pass_phases):
    {"wall_s", "phases": {name: s}, "configs": {"<id>": {"build": s, "measure": s}}, ...extra}."""
    return {
        "wall_s": wall_s,
        **extra,
        "phases": dict(phases),
        "configs": {str(c): dict(t) for c, t in sorted(configs.items())},
    }


def add_to_phases_file(work_dir: Path, **fields) -> None:
    """Add `fields` (what the caller timed around the session: precompile_s) to the session's
    PHASES_FILE in `work_dir`, when it is there."""
    import json

    path = Path(work_dir) / PHASES_FILE
    try:
        record = json.loads(path.read_text())
        record.update(fields)
        path.write_text(json.dumps(record, indent=1) + "\n")
    except (OSError, ValueError):
        pass


def phase_words(phases: dict[str, float]) -> str:
    """`tool_start 1.23 s, worker_start 0.05 s, ...`: the phases in one line."""
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items())


class _Timing:
    """Where a session's time went, run by run (Measured.phases, config_phases, PHASES_FILE)."""

    def __init__(self) -> None:
        self.runs: list[dict[str, float]] = []
        self.configs: dict[int, dict[str, float]] = {}

    def add(self, part: _Part, end: _RunEnd, log: Path) -> None:
        phases, configs = run_phases(part.status, end.launched, end.worker_gone, end.exited)
        phases.update(cleanup=max(0.0, end.cleaned - end.exited), export=part.export_s, parse=part.parse_s)
        self.runs.append(phases)
        for config_id, times in configs.items():
            entry = self.configs.setdefault(config_id, {"build": 0.0, "measure": 0.0})
            for name, seconds in times.items():
                entry[name] = entry.get(name, 0.0) + seconds
        try:
            with open(log, "a") as handle:
                note(handle, f"phases: {phase_words(phases)}")
        except OSError:
            pass

    def total(self) -> dict[str, float]:
        summed = {name: sum(run.get(name, 0.0) for run in self.runs) for name in PHASES}
        return {name: seconds for name, seconds in summed.items() if any(name in run for run in self.runs)}

    def write(self, path: Path, started_at: float, ended_at: float) -> None:
        """The phases as JSON (`began`/`ended`: the session's time.monotonic(), for a caller that timed
        the whole command on the same clock); a folder that cannot take it goes without."""
        import json

        record = {
            "began": started_at,
            "ended": ended_at,
            **timing_record(ended_at - started_at, self.total(), self.configs),
            "runs": self.runs,
        }
        try:
            path.write_text(json.dumps(record, indent=1) + "\n")
        except OSError:
            pass


def _start_failure(
    status: RunStatus, end: _RunEnd, settings: ProfileSettings, log: Path, driver: Driver
) -> str:
    """One line saying why a worker reached no config."""
    if status.abort:
        return status.abort
    if end.stalled == "start":
        doing = (
            "before it ran (the profiler's or Python's start-up)"
            if status.pid is None
            else "loading the target or initialising CUDA"
            if status.device is None
            else "before its first config"
        )
        return f"the worker did not start within {settings.phase_bound_s:g} s (it hung {doing})"
    return driver.diagnose(log, end.returncode)


def _served_base(work_dir: Path, driver) -> Path:
    """The report base of a served job in `work_dir`: `served`, or `served1`, `served2`... where an earlier
    run's job has that name. A job abandoned by its client (Ctrl-C) runs on in the server and still writes
    its status file and report: the name is taken by creating the status file exclusively, so that no two
    runs share one, and a report left under the name (its status file removed) is removed first, so that
    only this job's collection can be read."""
    for number in range(10000):
        base = work_dir / ("served" if number == 0 else f"served{number}")
        try:
            os.close(os.open(base.with_suffix(".status"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            continue
        for suffix in {driver.suffix, ".nsys-rep", ".qdstrm", ".sqlite"} - {""}:
            base.with_suffix(suffix).unlink(missing_ok=True)
        return base
    raise ToolFailed(f"{work_dir} holds 10000 served jobs' files already: pass another --work-dir")


def _run_served(
    state: dict,
    driver,
    target: str,
    n_configs: int,
    settings,
    config_ids,
    on_progress,
    job_extra,
    on_rows,
    work_dir: Path,
    points,
):
    """A session through the `nsprof serve` of `state` (nsprof.serve_client.find_server): one job of
    its worker, read as a part is read (_read_part); what a fault there left unmeasured (whole
    configs only count) is measured standalone (_run_parts), under the GPU lock once the server
    has released it."""
    import pandas as pd

    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock
    from nsprof.schema import make_frame
    from nsprof.serve_client import EXIT_WAIT_S, read_or_empty, submit

    ids = list(config_ids if config_ids is not None else range(n_configs))
    notify = on_progress or (lambda event, cfg, detail: None)
    hand_over = on_rows or (lambda frame: None)
    began = time.monotonic()
    # The server and its worker run in the server's folder: every path they are given is absolute, and
    # the worker runs the job in the client's folder (request "cwd"), where a relative target is.
    base = _served_base(Path(work_dir).absolute(), driver)
    status_file = base.with_suffix(".status")
    log = base.with_suffix(".log")
    log.write_text(
        f"==NSPROF== measured by nsprof serve (pid {state['pid']}, worker pid {state.get('worker_pid')}); "
        f"the worker's log: {state.get('log')}\n"
    )
    job = _job(target, ids, status_file, settings, points, job_extra)
    job_file = job.write(base.with_suffix(".job.json"))
    request = {
        "op": "job",
        "job": str(job_file),
        "status": str(status_file),
        "report_base": str(base),
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "timeout_s": settings.timeout_s,
        "phase_bound_s": settings.phase_bound_s,
        "wait": settings.wait_gpu,
    }
    answer, started = submit(state, request, status_file, settings, notify)
    answered = time.monotonic()
    if answer.get("busy"):
        raise GpuBusy(
            f"nsprof serve (pid {state['pid']}) is measuring another job on this GPU; wait for it or "
            "pass --wait",
            device=0,
            path=Path(state.get("socket", "")),
            holder={"pid": state["pid"]},
        )
    fault = None if answer.get("ok") else answer.get("fault") or "vanished"
    status = parse_status(read_or_empty(status_file))
    _refuse_changed(status, log)
    if fault == "abort" or status.abort:
        raise ToolFailed(
            f"the profiled worker measured nothing: {status.abort or answer.get('reason')} "
            f"(log: {state.get('log')})"
        )
    end = _RunEnd(
        returncode=0 if fault is None else -int(signal.SIGKILL),
        timed_out=answer.get("config") if fault == "timeout" else None,
        stalled="between" if fault == "stalled" else None,
        launched=began,
        exited=answered,
        cleaned=answered,
    )
    frames, failures = [], {}
    kept_ids: set[int] = set()
    part = None
    if started:
        part = _read_part(driver, settings, base, log, end, points)
        crashed = status.current
        if crashed is not None and crashed not in status.failed:
            if fault in ("crash", "timeout") and answer.get("config") == crashed:
                # The server knows the cause: its timeout (the bound this request gave it), or its
                # worker's crash with the kind the server's driver read from the log.
                part.failures[crashed] = (
                    timeout_failure(settings.timeout_s)
                    if fault == "timeout"
                    else Failure(
                        answer.get("reason") or part.failures[crashed],
                        answer.get("kind") if answer.get("kind") in FAILURE_KINDS else "crash",
                    )
                )
                notify("fail", crashed, part.failures[crashed])
            else:  # the server went away under it: not this config's fault, it is measured again
                part.failures.pop(crashed, None)
        failures = dict(part.failures)
        if part.kept is not None and len(part.kept):
            frames.append(part.kept)
            kept_ids = set(int(c) for c in points.of_frame(part.kept).dropna())
        if failures:
            frames.append(_failure_rows(failures, settings, driver, points))
        if frames:
            hand_over(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    remaining = [c for c in ids if c not in kept_ids and c not in failures]
    for config_id in status.done:
        if config_id in remaining:
            notify("retry", config_id, "not measured whole by nsprof serve; measuring again without it")
    timing = _Timing()
    if part is not None:
        timing.add(part, end, log)
    notes = []
    if started:
        words = f"measured by nsprof serve (pid {state['pid']}, worker pid {state.get('worker_pid')})"
        notes.append(words)
        print(f"nsprof: {words}", file=sys.stderr, flush=True)
    measured = Measured(
        frame=pd.concat(frames, ignore_index=True) if frames else make_frame([]),
        failures=failures,
        device=status.device,
        reports=[part.report] if part is not None and part.report is not None else [],
        work_dir=work_dir,
        notes=notes,
        phases=timing.total(),
        config_phases=timing.configs,
    )
    if remaining:
        why = one_line(str(answer.get("reason") or fault), 200)
        words = (
            f"nsprof serve (pid {state['pid']}) ended during this run ({why}); {len(remaining)} configs "
            "measured without it"
        )
        notes.append(words)
        print(f"nsprof: {words}", file=sys.stderr, flush=True)
        # The server releases the GPU once it has shut its worker down.
        with gpu_lock(0, wait=True, timeout_s=None if settings.wait_gpu else EXIT_WAIT_S):
            rest = _run_parts(
                target,
                n_configs,
                settings,
                remaining,
                on_progress,
                job_extra,
                driver,
                work_dir,
                on_rows,
                points,
            )
        measured = _merged(measured, rest)
        timing.runs += _runs_in_phases_file(
            work_dir / PHASES_FILE
        )  # the standalone session's, after the served run
        timing.configs = measured.config_phases
    measured.wall_s = time.monotonic() - began
    timing.write(work_dir / PHASES_FILE, began, time.monotonic())
    return measured


def _runs_in_phases_file(path: Path) -> list[dict]:
    import json

    try:
        return list(json.loads(path.read_text()).get("runs") or [])
    except FileNotFoundError:
        return []


def _merged(first, second):
    """One Measured of a served part and the standalone session after it."""
    import pandas as pd

    frames = [f for f in (first.frame, second.frame) if len(f)]
    first.frame = (
        pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else first.frame)
    )
    first.failures.update(second.failures)
    first.device = first.device or second.device
    first.reports.extend(second.reports)
    first.notes.extend(second.notes)
    for name, seconds in second.phases.items():
        first.phases[name] = first.phases.get(name, 0.0) + seconds
    for config_id, times in second.config_phases.items():
        entry = first.config_phases.setdefault(config_id, {})
        for name, seconds in times.items():
            entry[name] = entry.get(name, 0.0) + seconds
    return first
