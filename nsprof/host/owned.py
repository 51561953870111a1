"""Folders and files the user names (--work-dir, the results store): used only as this user's own.

The worker reads its job file from the work folder, nsprof trusts the status file's pid line there (to
stop the worker) and reads the report back: a folder another user owns, or may write, would let that
user run code as this user, have nsprof kill a process of their choosing, or plant links it writes
through. own_folder makes a missing folder mode 0700 and refuses, in one line, one that is not this
user's; check_own_file does the same for a file that is there already (a results store).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nsprof.errors import NsprofError

# Who else may change a folder or file: its group's and everyone's write bits.
OTHERS_WRITE = 0o022


def _refuse(what: str, path: Path, reason: str) -> NsprofError:
    return NsprofError(
        f"{what} {path} is not this user's own ({reason}): another user could change what nsprof runs and "
        "reads there; use one of your own that only you can write"
    )


def _check(what: str, path: Path, want_dir: bool) -> None:
    mine = os.geteuid()
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid != mine:
        raise _refuse(what, path, f"a link of uid {link.st_uid}")
    try:
        st = os.stat(path)
    except FileNotFoundError:  # a link of this user's to nothing yet: the file is made where it leads
        return
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        raise NsprofError(f"{what} {path} is not a {'folder' if want_dir else 'file'}")
    if st.st_uid != mine or st.st_mode & OTHERS_WRITE:
        mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
        raise _refuse(
            what, path, f"uid {st.st_uid}, {mode}" if st.st_uid != mine else f"{mode}: others may write it"
        )


def own_folder(folder: Path | str, what: str = "folder") -> Path:
    """`folder`, made (mode 0700, its missing parents as the umask says) where it is not there yet, once it
    is this user's own: a folder of this user's that nobody else may write, or a link of this user's to
    one. Else NsprofError in one line. `what` names it in the message (say "--work-dir")."""
    folder = Path(folder)
    try:
        folder.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise NsprofError(f"cannot create {what} {folder}: {exc.strerror or exc}") from None
    _check(what, folder, want_dir=True)
    return folder


def check_own_file(path: Path | str, what: str = "file") -> None:
    """Refuse (NsprofError, one line) a file at `path` that is not this user's own, as own_folder does a
    folder; nothing where there is none."""
    if os.path.lexists(path):
        _check(what, Path(path), want_dir=False)
