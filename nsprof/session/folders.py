"""The folders a session's reports and logs go to.

Holds work_folder (a command's folder: the one given, or a temporary one kept only when an error
names it), kept_in (an error, its message naming the folder kept) and claim_base (a name for a run's
files in a folder that may hold an earlier run's: --work-dir used again).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from nsprof.errors import NsprofError, ToolFailed
from nsprof.host.owned import own_folder

CLAIMS = 10000  # the names claim_base tries in one folder


def numbered(stem: str, first: int = 0, bare_first: bool = False) -> Iterator[str]:
    """`stem0`, `stem1`, ... from `first` (with bare_first: `stem`, `stem1`, ...): CLAIMS names."""
    for number in range(first, first + CLAIMS):
        yield stem if bare_first and number == 0 else f"{stem}{number}"


def claim_base(
    folder: Path, names: Iterable[str], marker: str, taken: Callable[[Path], Iterable[Path]] = lambda base: ()
) -> Path:
    """The first of `names` in `folder` that no run has used, as a base path (no suffix): its `marker`
    file (`.status`) is created here exclusively, so that two runs, at once or one after another, never
    share a name, and a name beside which one of `taken(base)` lies (an earlier run's report) is passed
    over: nothing an earlier run in a reused --work-dir measured is overwritten, or read as this run's."""
    for name in names:
        base = folder / name
        if any(path.exists() for path in taken(base)):
            continue
        try:
            os.close(os.open(base.with_suffix(marker), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            continue
        return base
    raise ToolFailed(f"{folder} holds the files of {CLAIMS} earlier runs already: pass another --work-dir")


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


def say_kept_on_interrupt(folder: Path) -> None:
    """The line naming a temporary folder kept because its command was interrupted (what it measured is
    in its reports)."""
    with contextlib.suppress(OSError):  # a terminal gone with its SIGHUP: the interrupt goes on
        print(f"nsprof: interrupted: reports and logs kept in {folder}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def work_folder(given: Path | None, prefix: str) -> Iterator[Path]:
    """The folder a command's sessions put their reports and logs in: `given` (--work-dir: kept), or
    a temporary one (prefix `prefix`) that is removed when the body ends, unless it ends in an
    NsprofError or an interrupt with something in the folder, which then names the folder kept (as a
    session's own temporary folder does)."""
    if given is not None:
        yield own_folder(given, "--work-dir")
        return
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    except NsprofError as exc:
        if not any(folder.iterdir()):  # nothing ran there (the GPU was busy, say): nothing to keep
            folder.rmdir()
            raise
        raise kept_in(exc, folder) from exc
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: what was measured stays, named
        if any(folder.iterdir()):
            say_kept_on_interrupt(folder)
        else:
            folder.rmdir()
        raise
    except BaseException:  # an internal error: nothing there is named to the user
        shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
