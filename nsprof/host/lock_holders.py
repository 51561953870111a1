"""Who else holds an nsprof GPU lock, from /proc (nsprof.host.lock): the processes a killed profiler left
holding this thread's lock (orphaned_holders), those holding the lock a worker inherited
(inherited_lock_holders), and a process's command line (command_of)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _flock_holders(files: set[tuple[int, int]]) -> tuple[list[int], dict[int, int]]:
    """The processes other than this one with a descriptor of the open file that holds the flock
    on one of `files` ((st_dev, st_ino) pairs): its /proc fdinfo shows the lock, so another nsprof
    that merely waits on the same lock file is never one. Also every process's parent."""
    me = os.getpid()
    parent_of: dict[int, int] = {}
    holders = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        pid = int(proc.name)
        try:
            parent_of[pid] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            entries = [] if pid == me else list((proc / "fd").iterdir())
        except (OSError, IndexError, ValueError):
            continue  # gone, or another user's
        for entry in entries:
            try:
                st = entry.stat()
                if (st.st_dev, st.st_ino) in files and "FLOCK" in (proc / "fdinfo" / entry.name).read_text():
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders, parent_of


def _descends_from_me(pid: int, parent_of: dict[int, int]) -> bool:
    me, seen = os.getpid(), set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        pid = parent_of.get(pid, 0)
        if pid == me:
            return True
    return False


def command_of(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        )
    except OSError:
        return ""


def orphaned_holders(fds: tuple[int, ...]) -> list[tuple[int, str]]:
    """(pid, command line) of the processes that hold one of the GPU locks `fds` (this thread's:
    nsprof.host.lock.held_fds) through an inherited descriptor but are no longer this process's
    descendants: what a killed profiler left behind (nsys starts an agent of its own, which escapes the
    profiler's process group). Another thread's lock, and its session's children, are left alone."""
    if not Path("/proc/self/fdinfo").is_dir():
        return []
    files = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            files.add((st.st_dev, st.st_ino))
    if not files:
        return []
    holders, parent_of = _flock_holders(files)
    return [(pid, command_of(pid)) for pid in holders if not _descends_from_me(pid, parent_of)]


def inherited_lock_holders() -> list[tuple[int, str]]:
    """For a process that inherited an nsprof GPU lock (the worker): (pid, command line) of every
    other process that holds it. Once nsprof is gone, all of them are of its run (the profiler,
    nsys's agent): nobody else can hold an exclusive flock that this process holds."""
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        return []
    files = set()
    for entry in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            if (
                os.readlink(entry).rsplit("/", 1)[-1].startswith("nsprof-")
                and "FLOCK" in (Path("/proc/self/fdinfo") / entry.name).read_text()
            ):
                st = entry.stat()
                files.add((st.st_dev, st.st_ino))
    if not files:
        return []
    return [(pid, command_of(pid)) for pid in _flock_holders(files)[0]]
