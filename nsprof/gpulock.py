"""One profiler per GPU: an exclusive flock on a lock file per GPU, shared by every nsprof process.

    with gpu_lock(0):             # GpuBusy at once if another nsprof is profiling GPU 0
        ...
    with gpu_lock(0, wait=True):  # or wait for it, silently

Two profilers on one GPU corrupt each other's numbers (ncu serialises kernels and locks
clocks; another process's kernels share the SMs). flock is released by the kernel when the
holder's process dies, however it dies, so a crashed nsprof never leaves a stale lock.
The file holds the holder's pid, command line and start time as JSON, for the busy message.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from nsprof.errors import NsprofError

_POLL_S = 0.05
# Lock files this process holds: a second gpu_lock on the same GPU would wait on itself forever.
_held: set[str] = set()
_held_lock = threading.Lock()


class GpuBusy(NsprofError):
    """Another process holds the GPU's lock (or this one already does)."""

    def __init__(self, message: str, *, device: int, path: Path, holder: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.device = device
        self.path = path
        self.holder = holder


def lock_dir() -> Path:
    return Path(os.environ.get("NSPROF_LOCK_DIR") or tempfile.gettempdir())


def physical_device(device: int, environ: Mapping[str, str] | None = None) -> int:
    """The GPU index to lock for CUDA device `device`: mapped through CUDA_VISIBLE_DEVICES when that
    lists indices, so that `cuda:0` under CUDA_VISIBLE_DEVICES=2 locks GPU 2 like an unmasked
    `cuda:2`. UUID or MIG entries cannot be mapped without NVML; the index is then used as given."""
    environ = os.environ if environ is None else environ
    visible = [entry.strip() for entry in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    if visible and all(entry.isdigit() for entry in visible) and 0 <= device < len(visible):
        return int(visible[device])
    return device


def lock_path(device: int) -> Path:
    return lock_dir() / f"nsprof-gpu{device}.lock"


def _open_lock_file(path: Path) -> tuple[int, bool]:
    """(fd, writable). Never O_CREAT on an existing file: with fs.protected_regular (the default on
    many distributions) that fails in /tmp for a file another user created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            return os.open(path, os.O_RDWR), True
        except FileNotFoundError:
            pass
        except PermissionError:
            # another user's lock file without write permission: flock works on a read-only fd too
            return os.open(path, os.O_RDONLY), False
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue  # created by someone else between the two opens
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # the umask took write permission away from other users
        return fd, True


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        holder = json.loads(os.pread(fd, 65536, 0).decode("utf-8", "replace") or "null")
    except (OSError, ValueError):
        return None  # empty (the holder has not written yet) or half written
    return holder if isinstance(holder, dict) else None


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another nsprof"
    parts = []
    if "pid" in holder:
        parts.append(f"pid {holder['pid']}")
    started = holder.get("started_unix")
    if isinstance(started, (int, float)):
        when = datetime.fromtimestamp(started)
        parts.append("started " + when.strftime("%H:%M:%S" if when.date() == datetime.now().date()
                                                else "%Y-%m-%d %H:%M:%S"))
    text = ", ".join(parts)
    command = str(holder.get("command") or "")
    if command:
        command = command if len(command) <= 80 else command[:79] + "…"
        text = f"{text}: {command}" if text else command
    return f"another nsprof ({text})" if text else "another nsprof"


def _command_line() -> str:
    # "nsprof tune x.py:space" reads better than "/usr/local/bin/nsprof tune x.py:space"
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        program = "python -m " + spec.name.removesuffix(".__main__")
    else:
        program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return " ".join([program, shlex.join(sys.argv[1:])]).strip()


@contextlib.contextmanager
def gpu_lock(device: int = 0, *, wait: bool = False, timeout_s: float | None = None) -> Iterator[Path]:
    """Hold GPU `device` (a CUDA index, see physical_device) for the body; yields the lock file's path.

    Busy: wait=False raises GpuBusy naming the holder; wait=True blocks, up to timeout_s if
    given (then GpuBusy), and prints nothing.
    """
    gpu = physical_device(device)
    path = lock_path(gpu)
    key = str(path.resolve())
    with _held_lock:
        if key in _held:
            raise GpuBusy(f"GPU {gpu} is already locked by this process ({path})", device=gpu, path=path,
                          holder={"pid": os.getpid()})
        _held.add(key)
    fd = -1
    try:
        fd, writable = _open_lock_file(path)
        _acquire(fd, gpu, path, wait=wait, timeout_s=timeout_s)
        if writable:
            record = {"pid": os.getpid(), "command": _command_line(), "started_unix": time.time(),
                      "started": datetime.now().astimezone().isoformat(timespec="seconds")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        try:
            yield path
        finally:
            if writable:
                # Cleared before unlocking so the file never names a process that is gone (a killed
                # holder's record stays, but only until the next holder overwrites it).
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
    finally:
        if fd >= 0:
            os.close(fd)  # closing the only descriptor releases the flock
        with _held_lock:
            _held.discard(key)


def _acquire(fd: int, gpu: int, path: Path, *, wait: bool, timeout_s: float | None) -> None:
    if wait and timeout_s is None:
        fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C still interrupts the wait (PEP 475)
        return
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        if not wait or (deadline is not None and time.monotonic() >= deadline):
            holder = _read_holder(fd)
            advice = "wait for it or pass --wait" if not wait else f"still busy after {timeout_s:g} s"
            raise GpuBusy(f"GPU {gpu} is being profiled by {_describe(holder)}; {advice}",
                          device=gpu, path=path, holder=holder)
        time.sleep(_POLL_S)
