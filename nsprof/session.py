"""One profiling session: all configs in one profiled worker process, restarted after faults.

The parent writes a job file, starts the profiler (which starts the worker), and follows
the worker's status file: it counts progress, kills a config that runs past its timeout,
and when the worker dies (illegal address, abort, out of memory, timeout) records that
config as failed with the reason and starts a new worker at the next config. Each worker
run writes its own report part; every part is read, so nothing measured is lost.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nsprof.drivers.base import ProfileSettings
from nsprof.errors import NsprofError, ToolFailed
from nsprof.reports.checks import one_line
from nsprof.worker import START_MARKER, Job

POLL_S = 0.1
MAX_LOST_RETRIES = 2  # a config measured but lost with a crashed run's report is measured again
GRACE_S = 60.0  # after killing a worker, how long the profiler gets to write its report

# Log lines that name why a worker died, most specific first.
_REASON_MARKERS = ("ERR_NVGPUCTRPERM", "illegal memory access", "an illegal", "out of memory",
                   "CUDA error", "Error", "error", "Killed", "Aborted", "Segmentation fault")


@dataclass
class RunStatus:
    """What one worker run's status file says."""

    pid: int | None = None
    started: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    ended: bool = False

    @property
    def current(self) -> int | None:
        if self.started and self.started[-1] not in self.done and self.started[-1] not in self.failed:
            return self.started[-1]
        return None


def parse_status(text: str) -> RunStatus:
    status = RunStatus()
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "pid" and rest.strip().isdigit():
            status.pid = int(rest)
        elif word == "start":
            status.started.append(int(rest))
        elif word == "done":
            status.done.append(int(rest))
        elif word == "fail":
            cfg, _, reason = rest.partition(" ")
            try:
                status.failed[int(cfg)] = json.loads(reason)
            except json.JSONDecodeError:
                status.failed[int(cfg)] = reason
        elif word == "end":
            status.ended = True
    return status


PERMISSION_FIX = ("profiling counters are not permitted for this user (ERR_NVGPUCTRPERM): run as root, "
                  "or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
                  "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)")


def failure_reason(log: Path, returncode: int | None) -> str:
    """One line saying why a worker died, from its log after the last config-start marker."""
    lines = []
    if log.exists():
        text = log.read_text(errors="replace")
        text = text[text.rfind(START_MARKER) + 1:] if START_MARKER in text else text
        lines = [ln.strip() for ln in text.splitlines()[1:] if ln.strip()]
    if any("ERR_NVGPUCTRPERM" in line for line in lines):
        return PERMISSION_FIX
    for marker in _REASON_MARKERS:
        for line in reversed(lines[-200:]):
            if marker in line and not line.startswith("==PROF=="):
                return line[:300]
    if returncode is not None and returncode < 0:
        return f"worker killed by signal {signal.Signals(-returncode).name}"
    return f"worker exited with status {returncode}" + (f": {lines[-1][:200]}" if lines else "")


# How the tools and the kernel say that the disk is full.
_DISK_FULL = ("No space left on device", "Disk quota exceeded", "ENOSPC")


def _log_lines(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]


def disk_full(log: Path) -> str | None:
    """A one-line message when the profiler's log says the disk filled up, else None."""
    line = next((ln for ln in _log_lines(log) if any(marker in ln for marker in _DISK_FULL)), None)
    if line is None:
        return None
    return (f"the disk holding {log.parent} is full ({line[:200]}); free space there or pass --work-dir "
            "on another disk")


def tool_failure_reason(log: Path, returncode: int | None) -> str:
    """One line saying why the profiler wrote no report (or started nothing).

    Unlike a worker's crash, the profiler's own errors (counter permission, a full disk,
    ncu's ==ERROR== lines) can come anywhere in the log, before the first config started.
    """
    lines = _log_lines(log)
    if any("ERR_NVGPUCTRPERM" in line for line in lines):
        return PERMISSION_FIX
    full = disk_full(log)
    if full:
        return full
    errors = [line for line in lines if line.startswith("==ERROR==")]
    if errors:
        return errors[-1][:300]
    return failure_reason(log, returncode)


def _explained(exc: NsprofError, log: Path) -> NsprofError:
    """A full disk explains a missing or truncated report better than the parser can."""
    full = disk_full(log)
    return ToolFailed(f"{full} (log: {log})") if full else exc


def make_driver(settings: ProfileSettings):
    if settings.backend == "ncu":
        from nsprof.drivers.ncu import NcuDriver
        from nsprof.drivers.tools import find_ncu

        return NcuDriver(find_ncu().path)
    if settings.backend == "nsys":
        from nsprof.drivers.nsys import NsysDriver
        from nsprof.drivers.tools import find_nsys

        return NsysDriver(find_nsys().path)
    from nsprof.drivers.none import PlainDriver

    return PlainDriver()


@dataclass
class SessionResult:
    frame: object  # the tidy DataFrame: measurements plus one row per failed config
    reports: list[Path]  # empty when the temporary work dir was removed
    failures: dict[int, str]
    # Reports and logs. None: a temporary folder that was removed after a clean run (no
    # failures); a folder the user named, or any folder of a run with failures, is kept.
    work_dir: Path | None
    wall_s: float


def _complete_configs(measured, done: list[int], settings: ProfileSettings) -> set[int]:
    """The configs of `done` whose every (mode, rep) range is in the report."""
    rows = measured[measured["config_id"].isin(done)]
    expected = len(set(settings.modes)) * settings.reps
    if rows.empty:
        return set()
    ranges = rows.drop_duplicates(["config_id", "mode", "rep"]).groupby("config_id").size()
    return {int(c) for c, count in ranges.items() if count >= expected}


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _follow(proc, status_file: Path, settings: ProfileSettings, notify) -> tuple[int, int | None]:
    """Follow one worker run until it ends: progress events, and the per-config timeout.

    Returns (exit status, config killed for running past its timeout or None).
    """
    import subprocess

    seen = RunStatus()
    current_since = time.monotonic()
    timed_out: int | None = None
    while True:
        returncode = proc.poll()
        status = parse_status(status_file.read_text(errors="replace"))
        for cfg in status.done[len(seen.done):]:
            notify("done", cfg, "")
        for cfg in status.failed:
            if cfg not in seen.failed:
                notify("fail", cfg, status.failed[cfg])
        if status.current != seen.current:
            current_since = time.monotonic()
        seen = status
        if returncode is not None:
            return returncode, timed_out
        if status.current is not None and time.monotonic() - current_since > settings.timeout_s:
            timed_out = status.current
            _kill(status.pid)  # the worker only: the profiler stays to write its report
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
            continue
        time.sleep(POLL_S)


def _kill(pid: int | None) -> None:
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_session(target: str, n_configs: int, settings: ProfileSettings, config_ids: list[int] | None = None,
                on_progress: Callable[[str, int, str], None] | None = None,
                job_extra: dict | None = None) -> SessionResult:
    """Measure `config_ids` (default: all) of `target` under settings.backend.

    Every session holds the GPU lock (nsprof.gpulock), the fast timers' too: two nsprof runs
    never measure on the same GPU at once.
    """
    from nsprof.gpulock import gpu_lock

    with gpu_lock(0, wait=settings.wait_gpu):
        return _run_session(target, n_configs, settings, config_ids, on_progress, job_extra)


def _run_session(target: str, n_configs: int, settings: ProfileSettings,
                config_ids: list[int] | None = None,
                on_progress: Callable[[str, int, str], None] | None = None,
                job_extra: dict | None = None) -> SessionResult:
    """Measure `config_ids` (default: all) of `target` under settings.backend.

    Without settings.work_dir the reports and logs go to a temporary folder, removed after
    a clean run (every config measured) and kept, named in SessionResult.work_dir or in the
    exception's message, when anything failed.
    """
    driver = make_driver(settings)
    temporary = settings.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="nsprof-")) if temporary else Path(settings.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        result = _run_parts(target, n_configs, settings, config_ids, on_progress, job_extra, driver, work_dir)
    except NsprofError as exc:
        # The logs explain the failure: keep them and say where they are.
        if temporary and str(work_dir) not in str(exc):
            raise type(exc)(f"{exc} (reports and logs kept in {work_dir})") from exc
        raise
    if temporary and not result.failures:
        import shutil

        try:
            shutil.rmtree(work_dir)
        except OSError:
            return result  # not all of it could go: the result still names the folder
        result.work_dir, result.reports = None, []
    return result


def _run_parts(target: str, n_configs: int, settings: ProfileSettings, config_ids: list[int] | None,
               on_progress: Callable[[str, int, str], None] | None, job_extra: dict | None, driver,
               work_dir: Path) -> SessionResult:
    """The session proper: worker runs ("parts") until every config is measured or failed."""
    import subprocess

    import pandas as pd

    from nsprof.schema import make_frame

    remaining = list(config_ids if config_ids is not None else range(n_configs))
    reports: list[Path] = []
    failures: dict[int, str] = {}
    frames = []
    retries: dict[int, int] = {}
    started_at = time.monotonic()
    notify = on_progress or (lambda event, cfg, detail: None)
    for part in range(settings.max_restarts + 1):
        if not remaining:
            break
        base = work_dir / f"part{part}"
        status_file = base.with_suffix(".status")
        status_file.write_text("")
        log = base.with_suffix(".log")
        job = Job(target=target, config_ids=remaining, status=str(status_file),
                  modes=list(settings.modes), reps=settings.reps, warmup=settings.warmup, **(job_extra or {}))
        job_file = job.write(base.with_suffix(".job.json"))
        command = driver.build_command(settings, job_file, base)
        with open(log, "w") as log_handle:
            proc = subprocess.Popen(command, stdout=log_handle, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                returncode, timed_out = _follow(proc, status_file, settings, notify)
            except BaseException:
                # Ctrl-C (or an error here): the profiler and worker run in their own process
                # session, so they would outlive nsprof and keep the GPU unless killed.
                _kill_group(proc)
                raise
            # A profiler that died (killed, crashed) can leave its worker running: stop
            # whatever is left of the group before reading the status, so nothing writes to it.
            _kill_group(proc)
        status = parse_status(status_file.read_text(errors="replace"))
        failures.update(status.failed)
        crashed = status.current
        if crashed is not None:
            reason = (f"timeout: still running after {settings.timeout_s:g} s" if crashed == timed_out
                      else failure_reason(log, returncode))
            failures[crashed] = reason
            notify("fail", crashed, reason)
        # A worker that did not reach its end (crashed, timed out, lost its CUDA context,
        # killed with its profiler) may take its report, or the report's kernels, with it.
        abnormal = crashed is not None or not status.ended or (returncode is not None and returncode < 0)
        report, measured, lost_reason = None, None, ""
        try:
            report = driver.finish(base, log)
        except NsprofError as exc:
            if status.done and not abnormal:
                raise _explained(exc, log) from None
            lost_reason = str(exc)
        if report is not None:
            try:
                measured = driver.read(report, settings)
            except NsprofError as exc:
                if not abnormal:
                    raise _explained(exc, log) from None
                # A profiler whose target was killed may write a report without its kernels
                # (nsys: CUPTI buffers are flushed at a clean exit only).
                lost_reason = str(exc)
            else:
                reports.append(report)
                # Only configs with every (mode, rep) range in the report count as measured: a
                # report can be cut off mid-write (ncu's streams to disk) when the profiler is
                # killed, even after its orphaned worker reached its end. A partial config is
                # measured again whole.
                complete = _complete_configs(measured, status.done, settings)
                partial = (set(measured["config_id"].dropna().astype(int)) & set(status.done)) - complete
                if partial and not lost_reason:
                    lost_reason = "the report held only some of its reps"
                frames.append(measured[measured["config_id"].isin(complete)])
        elif status.done and not abnormal and settings.backend != "none":
            raise ToolFailed(f"{settings.backend} wrote no report: {tool_failure_reason(log, returncode)} "
                             f"(log: {log})")
        lost = []
        if settings.backend != "none" and status.done:
            # Lost: not in the report, or only partly (a profiler killed mid-write, as ncu's
            # report streams to disk): its partial rows were not kept above.
            have = set() if measured is None else complete
            lost = [c for c in status.done if c not in have]
        requeued = []
        for config_id in lost:
            # Measured but not in the report: measure again once, then call it a failure.
            retries[config_id] = retries.get(config_id, 0) + 1
            if retries[config_id] > MAX_LOST_RETRIES:
                failures[config_id] = (f"measured {MAX_LOST_RETRIES + 1} times, but {settings.backend}'s report lost it each time"
                                       + (f" ({one_line(lost_reason, 120)})" if lost_reason else ""))
            else:
                requeued.append(config_id)
        for config_id in requeued:
            notify("retry", config_id, "its report was lost with the crashed run; measuring again")
        progressed = (set(status.done) - set(requeued)) | set(status.failed) | (
            {crashed} if crashed is not None else set())
        if not progressed and not requeued:
            raise ToolFailed(f"the profiled worker measured nothing: {tool_failure_reason(log, returncode)} "
                             f"(log: {log})")
        # Lost configs go last, after the configs that have not run yet: a config that crashes
        # the worker again then cannot take them down with it a second time.
        remaining = [c for c in remaining if c not in progressed and c not in requeued] + requeued
    for config_id in remaining:  # the restart budget ran out before these ran
        failures[config_id] = (f"not run: the worker was restarted {settings.max_restarts} times "
                               "(raise ProfileSettings.max_restarts)")
        notify("fail", config_id, failures[config_id])
    failure_rows = [{"source": settings.backend, "config_id": cfg, "error": reason, **settings.labels}
                    for cfg, reason in sorted(failures.items())]
    if failure_rows:
        frames.append(make_frame(failure_rows))
    frame = pd.concat(frames, ignore_index=True) if frames else make_frame([])
    return SessionResult(frame=frame, reports=reports, failures=failures, work_dir=work_dir,
                         wall_s=time.monotonic() - started_at)
