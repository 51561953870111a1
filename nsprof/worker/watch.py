"""The worker's end when nsprof ends: watch_parent (a thread that ends the worker once nsprof is gone,
by the death pipe nsprof holds the only write end of, or else by its parent process), Stopped and
request_stop (SIGTERM from nsprof: stop at once but cleanly), stopped (the stop written) and
release_if_orphaned (the run's GPU lock holders killed when nsprof died before the worker noticed).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from nsprof.worker.protocol import EXIT_PARENT_GONE, EXIT_STOPPED, Job, Status


class Stopped(BaseException):
    """nsprof asked the worker to stop. A BaseException, so that no config's `except Exception`
    records it as that config's failure."""


def request_stop(signum, frame) -> None:
    # Raised wherever the worker is: the current config is dropped anyway (only whole configs
    # count), and a clean exit keeps the configs already done (nsys flushes them at exit).
    raise Stopped


def stopped(status: Status) -> int:
    """After Stopped: no SIGTERM from here on (the worker only exits: one now would cost nsys the kernels
    it flushes at exit), the stop written; the worker's exit status."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    status.write("stopped")
    return EXIT_STOPPED


def release_if_orphaned(job: Job) -> None:
    """Ended before it noticed nsprof's death: nothing of the run may keep the GPU locked."""
    if _inherited_pipe(job.watch_fd, job.watch_inode) and _pipe_closed(job.watch_fd, 0):
        _kill_run_lock_holders()


def _inherited_pipe(fd: int, inode: int) -> bool:
    if fd < 0:
        return False
    import stat

    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return stat.S_ISFIFO(info.st_mode) and info.st_ino == inode


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill_run_lock_holders() -> None:
    """nsprof is dead: what else of its run holds its GPU lock (the profiler, nsys's agent, which
    no signal of nsprof's reaches) goes too, so that the GPU is free once this worker is gone.
    (Only then: while nsprof lives, it is one of the holders.)"""
    from nsprof.host.lock_holders import inherited_lock_holders

    for pid, command in inherited_lock_holders():
        print(
            f"==NSPROF== worker kills pid {pid}, which holds the GPU lock: {command[:200]}",
            file=sys.stderr,
            flush=True,
        )
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # gone already


def _parent_gone(why: str, nsprof_dead: bool = False) -> None:
    try:
        print(f"==NSPROF== worker exits: {why}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # its log gone with the profiler: it exits all the same
        pass
    if nsprof_dead:
        _kill_run_lock_holders()
    os._exit(EXIT_PARENT_GONE)


def _pipe_closed(fd: int, wait_s: float) -> bool:
    """nsprof never writes to its pipe: readable means EOF, its last holder is gone."""
    import select

    readable, _, _ = select.select([fd], [], [], wait_s)
    if not readable:
        return False
    try:
        return not os.read(fd, 1)
    except OSError:
        return True


def _watch(fd: int | None, parent: int) -> None:
    import time

    while True:
        if fd is not None:
            if _pipe_closed(fd, 1.0):
                _parent_gone("nsprof is gone (its pipe closed)", nsprof_dead=True)
        else:
            time.sleep(0.5)
            if os.getppid() != parent:
                _parent_gone(f"its parent (pid {parent}) is gone")


def watch_parent(job: Job) -> dict:
    """Start the thread that ends this worker once nsprof is gone; what it watches, for the status.

    The parent-process fallback is armed only where the pipe did not arrive: a profiler that
    started the worker through a short-lived helper would otherwise stop every run at once.
    """
    parent = os.getppid()
    pipe = _inherited_pipe(job.watch_fd, job.watch_inode)
    info = {"pipe": pipe, "parent": parent, "parent_name": _process_name(parent)}
    if job.watch_fd < 0:
        return info
    if pipe:
        os.set_inheritable(job.watch_fd, False)  # the target's own subprocesses need not hold it
    threading.Thread(
        target=_watch, args=(job.watch_fd if pipe else None, parent), daemon=True, name="nsprof-parent-watch"
    ).start()
    return info
