"""One profiler per GPU: an exclusive flock on a lock file per GPU, shared by every nsprof process.

    with gpu_lock(0):             # GpuBusy at once if another nsprof is profiling CUDA device 0
        ...
    with gpu_lock(0, wait=True):  # or wait for it, silently

The lock file is named by the GPU's UUID (nvidia-smi's), so that every process that sees the
same card takes the same lock, whatever CUDA_VISIBLE_DEVICES or $TMPDIR it runs with; it lies
in one machine-wide folder (/tmp, or $NSPROF_LOCK_DIR). Child processes that measure pass the
lock's descriptor on (held_fds), so the lock stays held while any of them is alive, even after
nsprof itself was killed.

Two profilers on one GPU corrupt each other's numbers (ncu serialises kernels and locks
clocks; another process's kernels share the SMs). flock is released by the kernel when the
holder's process dies, however it dies, so a crashed nsprof never leaves a stale lock.

On a machine that several users share (docs/trust.md), the lock folder is writable by all:
- the lock file is created by whoever comes first, with O_CREAT|O_EXCL, mode 0644: every user
  can open it (read-only is enough for flock), only its maker could write it, and nsprof never
  writes or truncates it. It is opened with O_NOFOLLOW|O_NONBLOCK and must be a regular file: a
  link or a FIFO planted at its name is refused in one line, never followed.
- who holds it is the kernel's word (/proc/locks: the holder's pid); the holder's record (pid,
  command line, start time, as JSON) is kept for the busy message in a file of the holder's own
  user beside the lock, `<lock name>.<uid>.holder` (record_path), mode 0644, written by a
  temporary file (tempfile.mkstemp: O_EXCL, a name nobody can guess) renamed onto it, so never
  through a link. A record is believed only from a file its holder's uid owns, naming the pid
  the kernel names, and printed with its control characters escaped.
- each contender keeps a claim beside the lock from before its flock (_kept_record), and the holder's
  record too names the file locked (device, inode): a lock file moved away under its holder (its maker
  may rename it in a sticky folder) leaves the GPU busy for whoever finds a new file at the name free,
  while the kernel still names that holder (_moved_away).
Who else holds a lock, from /proc, is nsprof.host.lock_holders'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import pwd
import shlex
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from nsprof.errors import GpuBusy, NsprofError
from nsprof.host.gpu import Gpu, which_gpu
from nsprof.host.lock_holders import command_of
from nsprof.host.owned import check_shared_folder

_POLL_S = 0.05
# Lock files this process holds (path -> descriptor): a second gpu_lock on the same GPU would wait
# on itself forever.
_held: dict[str, int] = {}
_held_lock = threading.Lock()
# The lock files each thread took: one process may run several sessions at once, each in a thread
# of its own with a GPU of its own (a Dask worker's threads), and each session's children must
# inherit its own GPU's lock only, and sweep only its own lock's orphans.
_taken = threading.local()


def _taken_here() -> set[str]:
    if not hasattr(_taken, "keys"):
        _taken.keys = set()
    return _taken.keys


def lock_dir() -> Path:
    """$NSPROF_LOCK_DIR (absolute), else /tmp: one folder for the whole machine (not $TMPDIR, which batch
    systems set per job: two jobs on one node would each think the GPU free)."""
    override = os.environ.get("NSPROF_LOCK_DIR")
    if override:
        if not os.path.isabs(override):  # else each working folder would have its own lock for one GPU
            raise NsprofError(f"NSPROF_LOCK_DIR must be an absolute path, not {override!r}")
        return Path(override)
    return Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())


def lock_path(gpu: Gpu | int) -> Path:
    """The lock file of a GPU (an nvidia-smi index stands for the GPU of that index)."""
    return lock_dir() / (gpu if isinstance(gpu, Gpu) else Gpu(gpu)).lock_name


def held_fds() -> tuple[int, ...]:
    """The descriptors of the GPU locks this thread holds, for subprocess.Popen(pass_fds=...): a
    child that inherits one keeps the lock held as long as it lives (flock belongs to the open
    file, shared by every descriptor of it). Another thread's locks are its sessions' own."""
    mine = _taken_here()
    with _held_lock:
        return tuple(fd for key, fd in _held.items() if key in mine and fd >= 0)


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
LOCK_MODE = 0o644  # every user can open (and flock) it; only its maker could write it, and nobody does
RECORD_LIMIT = 65536
LOCK_FOLDER = "the GPU lock's folder (NSPROF_LOCK_DIR, else /tmp)"  # as messages name it


def _owner(path: Path) -> str:
    try:
        return f"uid {os.lstat(path).st_uid}"
    except OSError:
        return "an unknown owner"


def made_lock_folder(folder: Path) -> None:
    """The GPU lock's folder made (its missing parents too) and checked as check_shared_folder says; the first
    folder already there on the way checked before anything is made in it, so that nothing is made where
    another user's link leads. Else NsprofError, one line."""
    there = next((each for each in (folder, *folder.parents) if os.path.lexists(each)), None)
    if there is not None and there != folder and os.path.isdir(there):
        check_shared_folder(LOCK_FOLDER, there)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file at its name, say
        raise NsprofError(
            f"cannot use {LOCK_FOLDER} {folder}: {exc.strerror or exc}; set NSPROF_LOCK_DIR to a folder"
        ) from None
    check_shared_folder(LOCK_FOLDER, folder)


def open_lock_file(path: Path) -> int:
    """A read-only descriptor of the lock file, created (O_EXCL, LOCK_MODE) if there is none. A link, or
    anything but a regular file, at its name is refused (NsprofError): never followed, never written."""
    made_lock_folder(path.parent)
    while True:
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            try:
                fd = os.open(path, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, LOCK_MODE)
            except FileExistsError:
                continue  # created by someone else between the two opens
            with contextlib.suppress(OSError):
                os.fchmod(fd, LOCK_MODE)  # the umask may have taken the others' read permission
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NsprofError(
                    f"the GPU lock {path} is a symbolic link (made by {_owner(path)}), not a lock "
                    "file: nsprof does not follow it; remove it, or set NSPROF_LOCK_DIR"
                ) from None
            raise NsprofError(f"the GPU lock {path} cannot be opened ({exc.strerror})") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise NsprofError(
                f"the GPU lock {path} is not a regular file (made by {_owner(path)}): remove it, "
                "or set NSPROF_LOCK_DIR"
            )
        return fd


def record_path(lock: Path, uid: int) -> Path:
    """The holder's record of `lock` that a process of user `uid` writes while it holds it."""
    return lock.with_name(f"{lock.name}.{uid}.holder")


def _kept_record(lock: Path, record: dict[str, Any]) -> Path | None:
    """`record` in a fresh file beside `lock` (tempfile.mkstemp: O_EXCL, a name nobody can guess, mode 0644):
    where it is; None where it cannot be written."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{lock.name}.", suffix=".tmp", dir=lock.parent)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(record))
            os.fchmod(out.fileno(), 0o644)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return None
    return Path(temporary)


def _write_record(lock: Path, record: dict[str, Any]) -> Path | None:
    """This user's holder record of `lock`, where it is kept: a _kept_record file renamed onto its name, so that
    nothing is written through a link planted there; where something of another user's keeps it from that
    name, the file itself (the busy message then names the holder from /proc)."""
    kept = _kept_record(lock, record)
    if kept is None:
        return None
    try:
        os.replace(kept, record_path(lock, os.geteuid()))
    except OSError:
        return kept
    return record_path(lock, os.geteuid())


def _clear_record(path: Path | None) -> None:
    with contextlib.suppress(OSError):
        if path is not None and os.lstat(path).st_uid == os.geteuid():  # not a file another user put there
            os.unlink(path)


def _kernel_holder(fd: int) -> int | None:
    """The pid that holds the flock on the open file of `fd`, as the kernel lists it (/proc/locks)."""
    st = os.fstat(fd)
    return _flocks().get(_where(st.st_dev, st.st_ino))


def _where(dev: int, ino: int) -> str:
    return f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"


def _flocks() -> dict[str, int]:
    """{file as /proc/locks names it (device:inode): the pid that holds an flock on it}; {} unread."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return {}
    held = {}
    for line in lines:
        words = line.split()
        if len(words) >= 6 and words[1] == "FLOCK" and words[4].isdigit() and int(words[4]):
            held.setdefault(words[5], int(words[4]))  # pid 0: a process this pid namespace does not see
    return held


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _read_record(lock: Path, uid: int, file: Path | None = None) -> dict[str, Any] | None:
    """The record in `uid`'s holder file of `lock` (or in `file`), if that file is a regular file of that uid's."""
    try:
        fd = os.open(file or record_path(lock, uid), _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        holder = json.loads(os.read(fd, RECORD_LIMIT).decode("utf-8", "replace") or "null")
    except (OSError, ValueError):
        return None  # half written, or not JSON
    finally:
        os.close(fd)
    return holder if isinstance(holder, dict) else None


def holder_record(lock: Path, fd: int | None = None) -> dict[str, Any] | None:
    """Who holds `lock`: the kernel's pid, with its user's record when that record names the same pid (else
    the pid, its uid and command line from /proc); the record of this user's last holder where the kernel
    names none (this process holds no descriptor of it: `fd` None, or /proc/locks says nothing)."""
    own = fd is None
    if own:
        try:
            fd = os.open(lock, _OPEN_FLAGS)  # never made here: no lock file, no holder
        except OSError:
            return None
    try:
        pid = _kernel_holder(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        if own:
            os.close(fd)
    if pid is None:
        return _read_record(lock, os.geteuid())
    uid = _uid_of(pid)
    record = _read_record(lock, os.geteuid() if uid is None else uid)
    if not record or record.get("pid") != pid:
        record = {"pid": pid, "command": command_of(pid)}
    if uid is not None:
        record["uid"] = uid
    return record


def _moved_away(path: Path, fd: int) -> dict[str, Any] | None:
    """The record of a holder that still holds an earlier lock file of this name, moved away (renamed by its
    maker, who may be another user, in a sticky folder) or deleted: the GPU is not free, though the file now
    at the name is. Every record beside the lock is read (_write_record's, at its name or kept as its own
    file, and the claim each contender keeps from before its flock: gpu_lock); one is believed where the
    kernel names its pid as the holder of the file it locked. Whether that file ever was the lock, nothing
    tells: another user's record naming a file she holds locked keeps the GPU busy while she holds it, as
    taking the lock itself would (any user may take it), no more; its command is hers to word."""
    st, held_now = os.fstat(fd), _flocks()
    for file in [*path.parent.glob(f"{path.name}.*.holder"), *path.parent.glob(f".{path.name}.*.tmp")]:
        try:
            owner = os.lstat(file).st_uid
        except OSError:
            continue
        record = _read_record(path, owner, file) or {}
        held, pid = record.get("lock"), record.get("pid")
        if not (
            isinstance(held, list) and len(held) == 2 and all(type(n) is int and 0 <= n < 2**63 for n in held)
        ):
            continue
        # the kernel's word, even for a pid that died while a child it passed the lock to holds it on
        if held != [st.st_dev, st.st_ino] and held_now.get(_where(*held)) == pid:
            return {**record, "uid": owner}
    return None


def shown(text: str) -> str:
    """`text` with its control characters (and other unprintable ones: bidirectional overrides) escaped, as
    Python writes them: a line of another user's that cannot drive the terminal it is printed on."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _user(uid: int) -> str:
    try:
        return f"user {shown(pwd.getpwuid(uid).pw_name)}"
    except (KeyError, OverflowError):
        return f"uid {uid}"


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another nsprof"
    parts = []
    pid = holder.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        parts.append(f"pid {pid}")
    uid = holder.get("uid")
    if isinstance(uid, int) and uid != os.geteuid():
        parts.append(_user(uid))
    started = holder.get("started_unix")
    if isinstance(started, (int, float)):
        with contextlib.suppress(OverflowError, OSError, ValueError):
            when = datetime.fromtimestamp(started)
            parts.append(
                "started "
                + when.strftime("%H:%M:%S" if when.date() == datetime.now().date() else "%Y-%m-%d %H:%M:%S")
            )
    text = ", ".join(parts)
    command = str(holder.get("command") or "")
    if command:
        command = command if len(command) <= 80 else command[:79] + "…"
        command = shown(command)
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
    """Hold CUDA device `device`'s GPU (see which_gpu) for the body; yields the lock file's path. Busy:
    wait=False raises GpuBusy naming the holder; wait=True blocks, up to timeout_s if given (then GpuBusy),
    and prints nothing."""
    gpu = which_gpu(device)
    path = lock_path(gpu)
    key = str(path.parent.resolve() / path.name)  # never through a link planted at its name
    with _held_lock:
        if key in _held:
            raise GpuBusy(
                f"{gpu} is already locked by this process ({path})",
                device=device,
                path=path,
                holder={"pid": os.getpid()},
            )
        _held[key] = -1
    fd, claim = -1, None
    try:
        fd = open_lock_file(path)
        locked = os.fstat(fd)
        record = {
            "pid": os.getpid(),
            "command": _command_line(),
            "started_unix": time.time(),
            "started": datetime.now().astimezone().isoformat(timespec="seconds"),
            "gpu": dataclasses.asdict(gpu),
            "lock": [locked.st_dev, locked.st_ino],  # the file locked (_moved_away)
        }
        # Claimed before the flock: of two contenders on two files of this name (one moved away), the one
        # that takes its flock second sees the other's claim (_moved_away).
        claim = _kept_record(path, record)
        _acquire(fd, gpu, path, wait=wait, timeout_s=timeout_s, device=device)
        with _held_lock:
            _held[key] = fd
        _taken_here().add(key)
        written = _write_record(path, record)
        try:
            yield path
        finally:
            # Removed before unlocking so that it never names a process that is gone (a killed holder's
            # record stays, but the kernel then names another pid, or none, and it is not believed).
            _clear_record(written)
    finally:
        _taken_here().discard(key)
        with _held_lock:
            _held.pop(key, None)
        if fd >= 0:
            os.close(fd)  # closing this process's descriptor releases the flock (once no child has one)
        _clear_record(claim)  # after: never a moment held without it


def _acquire(fd: int, gpu: Gpu, path: Path, *, wait: bool, timeout_s: float | None, device: int) -> None:
    if wait and timeout_s is None and threading.current_thread() is threading.main_thread():
        fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C interrupts it (PEP 475); another thread polls below:
        if _moved_away(path, fd) is None:  # an exception raised in it from outside (a cancelled Dask batch)
            return  # lands between instructions
        fcntl.flock(fd, fcntl.LOCK_UN)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        moved = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            moved = _moved_away(path, fd)
            if moved is None:
                return
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        if not wait or (deadline is not None and time.monotonic() >= deadline):
            holder = moved or holder_record(path, fd)
            advice = "wait for it or pass --wait" if not wait else f"still busy after {timeout_s:g} s"
            raise GpuBusy(
                f"{gpu} is being profiled by {_describe(holder)}; {advice}",
                device=device,
                path=path,
                holder=holder,
            )
        time.sleep(_POLL_S)
