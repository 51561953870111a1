"""Folders and files the user names (--work-dir, the results store): used only as this user's own.

The worker reads its job file from the work folder, nsprof trusts the status file's pid line there (to
stop the worker) and reads the report back: a folder another user owns, or may write, would let that
user run code as this user, have nsprof kill a process of their choosing, or plant links it writes
through. own_folder makes a missing folder mode 0700 and refuses, in one line, one that is not this
user's; check_own_file does the same for a file that is there already (a results store). An output the
user names is written by written_over: into a file it makes beside the name and holds open, then renamed
onto it (a FIFO there: once something reads it, within READER_WAIT_S). kept_folder is own_folder for what
nsprof keeps of its own accord (a cache), where no other user's folder lies on the way.

"Others may write" counts the group's write bit only where the group is not the owner's alone (a user
private group, as umask 002 systems make: the group of the owner's name, with no other member and no
other account's primary group). A folder above it that others may write must be sticky (as /tmp is) and
this user's or root's, or they could rename this one away; a link on the way there (and on the way to
where a link leads) must be this user's or root's. A folder above it that another user owns and only
they may write is not refused: they could rename this one away too, but a container run as root, in a
project folder mounted from the host's user, is the common case of it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from nsprof.errors import NsprofError


def _refuse(what: str, path: Path, reason: str) -> NsprofError:
    return NsprofError(
        f"{what} {path} is not this user's own ({reason}): another user could change what nsprof runs and "
        "reads there; use one of your own that only you can write"
    )


def _overflow_uid() -> int | None:
    """The uid that stands for every uid not mapped into this process's user namespace (the host's root
    among them: a rootless container's /), where this process is in one and that uid is mapped to no uid
    of it (a namespace that maps it has a `nobody` of its own, whose folders are no root's); else None."""
    try:
        ranges = [
            line.split() for line in Path("/proc/self/uid_map").read_text().splitlines() if line.strip()
        ]
        if ranges == [["0", "0", "4294967295"]]:  # the initial namespace
            return None
        overflow = int(Path("/proc/sys/kernel/overflowuid").read_text())
        if any(int(inside) <= overflow < int(inside) + int(count) for inside, _, count in ranges):
            return None
        return overflow
    except (OSError, ValueError):
        return None


@functools.cache
def _root_folder_uids() -> frozenset[int]:
    """The uids of root's folders, as this process sees them (read once, when first asked)."""
    return frozenset({0, _overflow_uid()} - {None})


def trusted(uid: int, folder: bool = False) -> bool:
    """Whether a file of `uid` is this user's or root's, whom nsprof trusts with its way. With `folder`, a
    folder's owner: in a user namespace root shows as the overflow uid (a rootless container's / and /tmp),
    which no process of the namespace can be. Not a link's or a FIFO's, which the overflow uid's other
    users (the host's, in a folder the container shares) could have planted."""
    return uid in (os.geteuid(), 0) or folder and uid in _root_folder_uids()


def _private_group(st: os.stat_result) -> bool:
    """Whether the group of `st` is its owner's alone: a group of the owner's name, the owner's own, with no
    other member and no other account's primary group (for this user's own files: this user's alone)."""
    import grp
    import pwd

    try:
        owner, group = pwd.getpwuid(st.st_uid), grp.getgrgid(st.st_gid)
    except KeyError:
        return False
    if st.st_gid != owner.pw_gid or group.gr_name != owner.pw_name or set(group.gr_mem) - {owner.pw_name}:
        return False
    return not any(other.pw_gid == st.st_gid and other.pw_name != owner.pw_name for other in pwd.getpwall())


def _others_may_write(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IWOTH) or bool(st.st_mode & stat.S_IWGRP) and not _private_group(st)


MAX_LINKS = 40  # links followed on the way to one path, as the kernel's own limit (ELOOP)


def _links(what: str, given: Path, path: Path, followed: list[int] | None = None) -> None:
    """Every link on the way to `path`, and on the way to where each leads: this user's or root's.
    `followed` counts the links followed, over the whole walk: past MAX_LINKS, a loop (or a fan of
    links), which the folder's own check names."""
    followed = [0] if followed is None else followed
    here = Path(path.absolute().anchor)
    for name in path.absolute().parts[1:]:
        step = here / name
        try:
            st = os.lstat(step)
        except OSError:  # nothing there yet (made by nsprof), or not to be read: the rest is checked below
            return
        if stat.S_ISLNK(st.st_mode):
            if not trusted(st.st_uid):
                raise _refuse(what, given, f"{step} is a link of uid {st.st_uid}")
            followed[0] += 1
            if followed[0] > MAX_LINKS:
                return
            _links(what, given, here / os.readlink(step), followed)
            step = Path(os.path.realpath(step))
        here = step


def _folders_there(what: str, path: Path, folders) -> Iterator[tuple[Path, os.stat_result]]:
    """Each of `folders` that is there, with its os.stat (one not there yet is made by nsprof, next); one
    that cannot be looked at (a file where a folder should be, a folder that cannot be entered):
    NsprofError naming `path`, one line."""
    for folder in folders:
        try:
            yield folder, os.stat(folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise NsprofError(f"cannot use {what} {path}: {exc.strerror or exc}: {folder}") from None


def _check_way(what: str, path: Path) -> None:
    """The links on the way to `path` (_links), and the folders above where it leads: one that others may
    write must be sticky and this user's or root's (else they could rename `path` away)."""
    try:
        _links(what, path, path)
    except OSError as exc:  # a link that cannot be read
        raise NsprofError(f"cannot use {what} {path}: {exc.strerror or exc}") from None
    for folder, st in _folders_there(what, path, Path(os.path.realpath(path)).parents):
        if _others_may_write(st) and (not st.st_mode & stat.S_ISVTX or not trusted(st.st_uid, folder=True)):
            mode = f"{stat.S_IMODE(st.st_mode):04o}"
            why = "not sticky" if not st.st_mode & stat.S_ISVTX else f"a folder of uid {st.st_uid}"
            raise _refuse(what, path, f"it lies in {folder}, which others may write (mode {mode}, {why})")


def check_shared_folder(what: str, folder: Path) -> None:
    """A folder that every user of the machine shares (the GPU lock's): the way to it as _check_way says, it
    and every folder above where it leads root's or this user's (a folder's owner may remove or rename any
    file in it, sticky or not), and sticky where others may write it. Else NsprofError, one line."""
    _check_way(what, folder)
    _check_owners(what, folder)
    st = os.stat(os.path.realpath(folder))
    if _others_may_write(st) and not st.st_mode & stat.S_ISVTX:
        raise NsprofError(
            f"cannot use {what} {folder}: others may write it and it is not sticky, so another user could "
            "move what nsprof keeps there away; use a sticky folder (chmod +t, as /tmp) or another"
        )


def _check_owners(what: str, folder: Path) -> None:
    """Every folder there from where `folder` leads up to /: root's or this user's (a folder's owner may
    remove or rename any file in it, sticky or not). Else NsprofError, one line."""
    real = Path(os.path.realpath(folder))
    for each, st in _folders_there(what, folder, (real, *real.parents)):
        if not trusted(st.st_uid, folder=True):
            where = "it is" if each == real else f"it lies in {each},"
            raise NsprofError(
                f"cannot use {what} {folder}: {where} a folder of uid {st.st_uid}, who could remove what "
                "nsprof keeps there while it is in use; use a folder of root's (as /tmp) or your own"
            )


def kept_folder(folder: Path | str, what: str) -> Path:
    """A folder nsprof keeps files in of its own accord (saved target views), as own_folder makes it, where
    no one else can rename it or a folder above it away between two uses: every folder on the way root's
    or this user's (_check_owners), checked before anything is made. Else NsprofError, one line."""
    folder = Path(folder)
    _check_way(what, folder)
    _check_owners(what, folder)
    own_folder(folder, what)
    _check_owners(what, folder)  # again: a folder of another user's put on the way since the first look
    return folder


def others_could_change(path: Path, st: os.stat_result | None = None) -> bool:
    """Whether another user could change the file at `path`, or put another in its place, between two opens
    of it: a file not this user's, reached through a link of another user's, or in a folder (where it
    leads) of another user's or that others may write without the sticky bit. `st`: its os.stat."""
    try:
        st = os.stat(path) if st is None else st
        _links("file", Path(path), Path(path))
        folder = os.stat(Path(os.path.realpath(path)).parent)
    except (OSError, NsprofError):
        return True
    if st.st_uid != os.geteuid() or not trusted(folder.st_uid, folder=True):
        return True
    return _others_may_write(folder) and not folder.st_mode & stat.S_ISVTX


def _check(what: str, path: Path, want_dir: bool) -> None:
    """The folder or file at `path` itself (the way to it is _check_way's): this user's, nobody else's to write;
    a folder there (made now, if it was not)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:  # a link of this user's to nothing yet: the file is made where it leads
        if want_dir:
            raise NsprofError(f"cannot create {what} {path}: it is a link to nothing") from None
        return
    if not (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)):
        raise NsprofError(f"{what} {path} is not a {'folder' if want_dir else 'file'}")
    mine = os.geteuid()
    if st.st_uid != mine or _others_may_write(st):
        mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
        raise _refuse(
            what, path, f"uid {st.st_uid}, {mode}" if st.st_uid != mine else f"{mode}: others may write it"
        )


def own_folder(folder: Path | str, what: str = "folder") -> Path:
    """`folder`, made (mode 0700, its missing parents as the umask says; through a link of this user's to
    nothing yet, where the link leads) where it is not there yet, once it is this user's own: a folder of
    this user's that nobody else may write. Else NsprofError in one line. `what` names it in the message
    (say "--work-dir")."""
    folder = Path(folder)
    _check_way(what, folder)
    try:
        Path(os.path.realpath(folder)).mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise NsprofError(f"cannot create {what} {folder}: {exc.strerror or exc}") from None
    _check_way(what, folder)  # again: another user's link planted at the name since the first look
    _check(what, folder, want_dir=True)
    return folder


def check_own_file(path: Path | str, what: str = "file") -> None:
    """Refuse (NsprofError, one line) a file at `path` that is not this user's own, as own_folder does a
    folder; nothing where there is none."""
    if os.path.lexists(path):
        _check_way(what, Path(path))
        _check(what, Path(path), want_dir=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import: os.umask is process-wide, and threads create files too
READER_WAIT_S = 60.0  # how long an output that is a FIFO waits for something to open it for reading


def _reader_came(path: Path) -> int:
    """The FIFO at `path` opened for writing once something opened it for reading: held while the caller
    writes through the path, whose own open then does not wait for good. NsprofError after READER_WAIT_S."""
    deadline = time.monotonic() + READER_WAIT_S
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if time.monotonic() > deadline:
            raise NsprofError(f"{path}: nothing opened it for reading within {READER_WAIT_S:g} s (a FIFO)")
        time.sleep(0.05)


@contextlib.contextmanager
def written_over(path: Path | str) -> Iterator[BinaryIO]:
    """An output the user names, as a binary file open for writing: a new file beside `path` (its folder
    made), renamed onto it once written, so that a link at the name is replaced, never written through
    (another user's link on the way, or a folder they may write and rename in, is refused in one line:
    _check_way), and a write that fails or is interrupted leaves what was there; a file of this user's there
    keeps its permissions (a new one, or one replacing another user's, gets the umask's: _kept_mode). What
    is written goes into the file opened here, whatever its name comes to lead to meanwhile (a folder of
    another user's, which is not refused, is hers to rename in). A pipe or a device at the name
    (/dev/stdout: _written_through), or a folder this user cannot write in, is written as it is; a FIFO once
    something reads it (_reader_came)."""
    path = Path(path)
    _check_way("output", path)  # another user's link on the way, or a folder they may write and rename in
    standard = _standard_stream(path)
    if standard is not None:  # /dev/stderr, say, in a file: written where the stream is, never replaced
        with _named(path), os.fdopen(os.dup(standard), "wb") as out:
            yield out
        return
    through = _written_through(path)
    if through is not None:
        with _named(path):
            fd = (
                _reader_came(path)
                if stat.S_ISFIFO(through.st_mode)
                else os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            )
            os.set_blocking(fd, True)
            with os.fdopen(fd, "wb") as out:
                yield out
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file, or a link to nothing, at a folder's name
        raise NsprofError(f"writing {path} failed: {exc.strerror or exc}") from None
    _check_way("output", path)  # again: another user's link planted at a folder's name since the first look
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    except PermissionError:  # a folder this user cannot write in: its file there, if it is no one else's way
        with contextlib.suppress(OSError):
            _links("output", path, path)  # another user's link on the way: refused, in one line
        with _named(path), os.fdopen(_opened_as_it_is(path), "wb") as out:
            yield out
        return
    except OSError as exc:  # /proc, say: named as the user gave it, not as the file beside it
        raise NsprofError(f"writing {path} failed: {exc.strerror or exc}") from None
    try:
        with _named(path), os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fchmod(fd, _kept_mode(path))
            os.replace(name, path)
            _check_renamed(path, os.fstat(fd))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def _standard_stream(path: Path) -> int | None:
    """1 or 2 where `path` names the file this process's standard output or error is open on (/dev/stdout,
    /dev/stderr, the file a shell redirected it to): written through that stream, at its place, and never
    replaced by a new file (root would replace /dev/stdout, a link, with a file for the whole machine)."""
    import sys

    try:
        st = os.stat(path)
    except OSError:
        return None
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        try:
            std = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (std.st_dev, std.st_ino):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()  # what was printed before comes first
            return fd
    return None


def _opened_as_it_is(path: Path) -> int:
    """The file at `path`, in a folder this user cannot write in, opened for writing as it is; a link at
    the name only where _links finds every link on the way this user's or root's (checked again now that
    one is there: another user may own the folder and put hers there since the first look)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    _links("output", path, path)
    return os.open(path, flags, 0o666)


def _check_renamed(path: Path, written: os.stat_result) -> None:
    """NsprofError, one line, where the name `path` does not lead to the file just written and renamed onto
    it: the owner of its folder put another file at the temporary name meanwhile."""
    st = os.lstat(path)
    if (st.st_dev, st.st_ino) != (written.st_dev, written.st_ino):
        owner = os.stat(path.parent).st_uid
        raise NsprofError(
            f"writing {path} failed: the folder's owner (uid {owner}) replaced the file while it was written; "
            "write it into a folder of your own"
        )


def _kept_mode(path: Path) -> int:
    """The mode an output replacing the file at `path` takes: that file's permissions where it is this user's
    own (never its setuid, setgid or sticky bit), else the umask's, as a new file's: another user's file
    there must not make this user's rows hers to rewrite."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:  # a new output (or one removed while it was written)
        return 0o666 & ~_UMASK
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
        return stat.S_IMODE(st.st_mode) & 0o777
    return 0o666 & ~_UMASK


def _written_through(path: Path) -> os.stat_result | None:
    """What an output at `path` is written into as it is: a pipe or a device (a FIFO, /dev/stdout, a terminal,
    /dev/null) reached through links of this user's or root's alone, made by this user or root or lying where
    no other user could have put it (a folder others may not write: /proc/self/fd, /dev/pts). None where the
    output is a file of its own, written beside and renamed onto the name: nothing there, a file, or another
    user's link on the way (replaced, never written through). Another user's pipe or device in a folder
    others may write, or a block device: NsprofError, one line."""
    try:
        _links("output", path, path)
        st = os.stat(path)
    except (OSError, NsprofError):
        return None
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    if stat.S_ISBLK(st.st_mode):
        raise NsprofError(f"the output {path} is a block device: nsprof writes no output onto a disk")
    if trusted(st.st_uid):
        return st
    try:
        planted = _others_may_write(os.stat(Path(os.path.realpath(path)).parent))
    except OSError:
        planted = True
    if not planted:
        return st
    kind = "FIFO" if stat.S_ISFIFO(st.st_mode) else "device"
    raise _refuse("output", path, f"a {kind} of uid {st.st_uid} in a folder others may write")


@contextlib.contextmanager
def _named(path: Path) -> Iterator[None]:
    """A write that fails names the output the user gave (not the file beside it), in one line."""
    try:
        yield
    except BrokenPipeError:
        raise  # a reader that left: nsprof's exit for a closed output, not an error
    except OSError as exc:
        raise NsprofError(f"writing {path} failed: {exc.strerror or exc}") from None
