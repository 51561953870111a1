"""The folders a session's reports and logs go to.

Holds work_folder (a command's folder: the one given, or a temporary one kept only when an error
names it) and kept_in (an error, its message naming the folder kept).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from nsprof.errors import NsprofError


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


@contextlib.contextmanager
def work_folder(given: Path | None, prefix: str) -> Iterator[Path]:
    """The folder a command's sessions put their reports and logs in: `given` (--work-dir: kept), or
    a temporary one (prefix `prefix`) that is removed when the body ends, unless it ends in an
    NsprofError with something in the folder, whose message then names the folder kept (as a
    session's own temporary folder)."""
    if given is not None:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    except NsprofError as exc:
        if not any(folder.iterdir()):  # nothing ran there (the GPU was busy, say): nothing to keep
            folder.rmdir()
            raise
        raise kept_in(exc, folder) from exc
    except BaseException:  # Ctrl-C, SIGTERM, an internal error: nothing there is named to the user
        shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
