"""Supervising one worker run: start the profiler (which starts the worker), follow the worker's
status file within its bounds, and leave nothing of the run alive however it ends.

Holds follow (the one loop that follows a running worker's status file: a session's part here, a
served job in nsprof.serve), RunEnd (how a run ended), run_worker (one part's run, start to end),
and the waits they keep (POLL_S, GRACE_S, STOP_GRACE_S).

Every phase of a worker run is bounded: a config's window by settings.timeout_s, and the rest
(starting, between configs, exiting) by settings.phase_bound_s without a status line. No child
outlives nsprof: the profiler gets SIGKILL when nsprof dies (Linux's parent-death signal), the
worker ends when nsprof's pipe closes (see nsprof.worker), and what a run leaves holding the GPU
lock outside the profiler's process group (nsys's agent) is killed once the run has ended, however
it ended (run_worker). On Ctrl-C the worker is asked to stop cleanly, so that its part's report
can still be read.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
from nsprof.serve_files import read_or_empty
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import Bounds, Progress, RunStatus, parse_status

POLL_S = 0.1
GRACE_S = 60.0  # after killing a worker, how long the profiler gets to write its report
STOP_GRACE_S = 15.0  # after asking a worker to stop (nsprof interrupted), how long before it is killed


def follow(
    status_file: Path, timeout_s: float, bound_s: float, check: Callable, decide: Callable, notify=None
):
    """Follow a running worker's status file until `decide` gives a result, which is returned.

    Each round, `check()` is asked first (what ends the run: the profiler's exit, a served job's end
    line), then the status file is read, its new `done` and `fail` lines go to `notify`
    (nsprof.worker.protocol.Progress), and `decide(checked, status, passed)` is asked, with what
    check gave, the status, and the bound the worker went past ("timeout": the current config ran
    past `timeout_s`; "stalled": no line for `bound_s` outside a config; None: neither). It returns
    the follower's result, or None to go on (after a wait of its own). check comes before the read:
    the status read once a run has ended is the whole of it.
    """
    progress = Progress(notify)
    bounds = Bounds(timeout_s, bound_s, time.monotonic())
    while True:
        checked = check()
        text = read_or_empty(status_file)
        status = progress.tell(parse_status(text))
        result = decide(checked, status, bounds.passed(text, status, time.monotonic()))
        if result is not None:
            return result


def import_for_reading() -> None:
    """Import pandas, which reading the reports needs (about 0.7 s in a fresh process), while the
    worker starts rather than after it ends; in this thread (in another, a second import of pandas
    could meet a half-imported one), with the stopping signals held back meanwhile: a Ctrl-C (SIGTERM,
    SIGHUP) in the middle would leave pandas half-imported, and the interrupted part's finished
    configs could not be read and kept. A signal that came meanwhile is taken right after."""
    import signal
    import sys
    import threading

    if "pandas" in sys.modules:
        return
    if threading.current_thread() is not threading.main_thread():  # no handlers to set there
        import pandas  # noqa: F401

        return
    came: list[int] = []
    stopping = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    handlers = {
        signum: signal.signal(signum, lambda signum, frame: came.append(signum)) for signum in stopping
    }
    try:
        import pandas  # noqa: F401
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    for signum in came[:1]:
        signal.raise_signal(signum)


@dataclass
class RunEnd:
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


class _PartFollower:
    """follow's check and decide for one standalone part: the profiler's exit ends it; a bound
    passed ends the worker (the profiler then writes its report and exits)."""

    def __init__(self, proc, settings: ProfileSettings, log_handle) -> None:
        self.proc, self.settings, self.log_handle = proc, settings, log_handle
        self.timed_out: int | None = None
        self.stalled: str | None = None
        self.worker_gone: float | None = None

    def check(self) -> tuple[int | None, float]:
        return exit_code(self.proc), time.monotonic()

    def decide(self, checked, status: RunStatus, passed: str | None) -> RunEnd | None:
        returncode, polled = checked
        if (
            self.worker_gone is None
            and status.pid is not None
            and (status.ended or status.stopped or returncode is not None)
            and not pid_alive(status.pid)
        ):
            self.worker_gone = polled
        if returncode is not None:
            return RunEnd(
                returncode, self.timed_out, self.stalled, worker_gone=self.worker_gone, exited=polled
            )
        if self.timed_out is None and self.stalled is None and passed is not None:
            self._end(status, passed)
            return None  # no wait: the profiler has exited, or is writing its report
        # Once the worker said it ended, poll faster: its exit and the profiler's are timed by it.
        time.sleep(POLL_S / 5 if status.ended or status.stopped else POLL_S)
        return None

    def _end(self, status: RunStatus, passed: str) -> None:
        if passed == "timeout":
            self.timed_out = status.current
            _end_run(self.proc, status.pid)
            return
        self.stalled = _phase(status)
        note(
            self.log_handle,
            f"no progress for {self.settings.phase_bound_s:g} s {_PHASE_WORDS[self.stalled]}: nsprof stopped the run",
        )
        # A worker already gone ("report") is not killed: its pid may be another's by now.
        _end_run(self.proc, status.pid, kill_worker=self.stalled != "report")


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


def worker_pid(status_file: Path, job_file: Path) -> int | None:
    """The pid of this run's worker while it runs (its status's `pid`), where that process's command line
    names this run's job file: the pid may belong to another process by now."""
    try:
        pid = parse_status(status_file.read_text(errors="replace")).pid
    except OSError:
        return None
    if not pid_alive(pid):
        return None
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return pid if os.fsencode(str(job_file)) in command else None


def kill_left_worker(status_file: Path, job_file: Path) -> None:
    """Kill this run's worker if it outlived its profiler outside the profiler's process group
    (a profiler may start its target in a group of its own)."""
    pid = worker_pid(status_file, job_file)
    if pid is not None:
        kill_pid(pid)


def run_worker(
    command: list[str],
    log: Path,
    status_file: Path,
    job_file: Path,
    settings: ProfileSettings,
    notify,
    pipe: DeathPipe,
    ahead=None,
    job=None,
) -> RunEnd:
    """Start the profiler (which starts the worker) and follow it to its end; nothing of it is
    left running on return, nor when an interrupt or an error goes through. With `ahead` (an
    nsprof.session.ahead.Ahead taken for this run), its profiler and worker, launched earlier, are the
    run's, handed `job` here: its start counts from the handing."""
    with open(log, "w") if ahead is None else ahead.log_handle as log_handle:
        proc = None
        try:
            launched = time.monotonic()
            proc = launch_child(command, log_handle, pipe) if ahead is None else ahead.proc
            if ahead is not None:
                ahead.hand(job)  # the run's own from here: whatever goes through stops it (below)
            follower = _PartFollower(proc, settings, log_handle)
            import_for_reading()  # while the worker starts
            timeout_s, bound_s = settings.timeout_s, settings.phase_bound_s
            end = follow(status_file, timeout_s, bound_s, follower.check, follower.decide, notify)
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
                kill_left_worker(status_file, job_file)
                kill_lock_holders_left(log_handle)
        end.cleaned = time.monotonic()
    return end
