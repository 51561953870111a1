"""The child processes nsprof starts (profilers, workers, the compile step, a server's worker)
and how they end: each in a process session of its own, with the parent-death signal and
nsprof's death pipe, so that none outlives nsprof however it dies; the kills that make sure; and
interrupt_on_termination, which makes SIGTERM and SIGHUP stop nsprof as Ctrl-C does;
process_began, when this process began; and python_module, the command line of every Python child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The longest time bound nsprof takes (--timeout, --idle-exit, NSPROF_*_TIMEOUT_S): a wait of more overflows
# poll()'s milliseconds (an int: 24.8 days)
MAX_WAIT_S = 1_000_000
# `python -m` and `-c` put the current folder first on sys.path: a folder another user may write (/tmp)
# could hold an `nsprof` or a `torch` of theirs, imported as this user. Every Python child nsprof starts
# drops it before it imports anything; a target's import puts it back, after nsprof's own
# (nsprof.space.load_target).
DROP_CWD = "import sys; sys.path[:1] == [''] and sys.path.pop(0)"
_RUN_MODULE = "; import runpy; runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"


def python_module(python: str, module: str, *args: str) -> list[str]:
    """`python -m module args`, without the current folder on sys.path (DROP_CWD)."""
    return [python, "-c", DROP_CWD + _RUN_MODULE, module, *args]


def pid_alive(pid: int | None) -> bool:
    """Running and not a zombie (a worker that exited waits for its profiler to reap it)."""
    if not pid:
        return False
    if Path("/proc/self/stat").exists():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")
    try:  # no /proc here: a zombie counts as alive
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def exit_code(proc) -> int | None:
    """proc.poll() that no Ctrl-C can break, for a child only this thread waits for.

    Popen.poll() and Popen.wait(timeout) take the Popen's wait lock without blocking and only
    then enter the `try` that releases it: a KeyboardInterrupt (Ctrl-C; SIGTERM, SIGHUP: see
    interrupt_on_termination below) handled in between leaves the lock held for good,
    and every later poll says None and every wait blocks: nsprof hung on Ctrl-C. Here the child
    is reaped by waitpid itself, without that lock."""
    if proc.returncode is None:
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:  # no status to get (SIGCHLD ignored): as Popen, take it as 0
            if proc.returncode is None:  # (a wait of Popen's own may have set it meanwhile)
                proc.returncode = 0
            return proc.returncode
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def wait_exit(proc, timeout_s: float | None) -> int | None:
    """proc.wait(timeout_s) that no Ctrl-C can break (see exit_code): the exit status, or None
    once timeout_s passed (None: no bound)."""
    import time

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    delay = 0.001
    while (code := exit_code(proc)) is None:
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return code


def kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    wait_exit(proc, None)  # SIGKILLed: it ends


def kill_pid(pid: int | None) -> None:
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def note(log_handle, text: str) -> None:
    """A line of nsprof's own in the part's log, where the user looks for what happened."""
    try:
        log_handle.write(f"==NSPROF== {text}\n")
        log_handle.flush()
    except (OSError, ValueError):
        pass


def dies_with_nsprof():
    """A preexec_fn giving the profiler (or bare worker) SIGKILL when this nsprof thread dies,
    even by SIGKILL (Linux's parent-death signal); None where that is not available."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # nsprof died before the signal was armed
            os._exit(1)

    return arm


class DeathPipe:
    """A pipe whose write end only this nsprof process holds (os.pipe's ends are not inherited):
    once nsprof is gone, however it died, the worker holding the read end sees EOF."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        self.inode = os.fstat(self.read_fd).st_ino

    def close(self) -> None:
        """Close both ends, once: a descriptor number closed again could be another file's by then."""
        fds, self.read_fd, self._write_fd = (self.read_fd, self._write_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


def launch_child(command: list[str], log_handle, pipe: DeathPipe, fds: tuple[int, ...] | None = None):
    """Start a worker run (the profiler, or the bare worker). Its own process session, so that the whole
    tree (profiler, worker, their helpers) can be killed as one group and a terminal's Ctrl-C reaches
    only nsprof, which stops it cleanly. The GPU locks this thread holds go along (the lock stays held
    while any of them lives), or `fds` instead: a worker started ahead of its session takes none
    (nsprof.session.ahead: a lock it kept would keep the GPU from the session it waits for) but the
    socket its session sends them on."""
    import subprocess

    from nsprof.host.gpu import child_environ
    from nsprof.host.lock import held_fds

    return subprocess.Popen(
        command,
        stdout=log_handle,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        pass_fds=(pipe.read_fd, *(held_fds() if fds is None else fds)),
        preexec_fn=dies_with_nsprof(),
        env=child_environ(),
    )


def kill_lock_holders_left(log_handle) -> None:
    """Kill what a dead profiler left holding the GPU lock outside its process group (nsys's
    helpers inherit the lock's descriptor): the next run, or the next nsprof, needs the GPU."""
    from nsprof.host.lock import held_fds
    from nsprof.host.lock_holders import orphaned_holders

    for pid, command in orphaned_holders(held_fds()):
        note(log_handle, f"killed pid {pid}, left holding the GPU lock by this run: {command[:200]}")
        kill_pid(pid)


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


def process_began() -> float | None:
    """When this process began, on time.monotonic()'s clock (from /proc/self/stat's start time, in
    clock ticks of CLOCK_BOOTTIME: to 10 ms); None where that cannot be read."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        hz = os.sysconf("SC_CLK_TCK")
        boot, now = time.clock_gettime(time.CLOCK_BOOTTIME), time.monotonic()
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    began = now - (boot - ticks / hz)
    return began if began <= now else None
