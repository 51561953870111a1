"""Report inputs that are not regular files: FIFOs, pipes, `<(...)`, `-` for standard input.

Parsers read a file more than once (a kind sniff, then the parse; SQLite seeks anywhere),
which a pipe cannot give. So a non-regular input is read once, with a size bound and a
bounded wait for data, into a temporary copy that the parser reads instead; a stream whose
first HEADER_SCAN_BYTES (as far as a kind's sniff reads) are no report is refused there
(/dev/zero never ends).
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from nsprof.errors import ReportError
from nsprof.host.children import MAX_WAIT_S
from nsprof.host.owned import others_could_change
from nsprof.reports.checks import stat_report

STDIN = "-"
STDIN_LABEL = "standard input"
# Environment overrides (read per call): the bound on what a stream may hold, and how long
# to wait for its next bytes (a FIFO that nobody opens for writing would wait forever).
MAX_STREAM_BYTES_ENV = "NSPROF_MAX_STREAM_BYTES"
STREAM_WAIT_ENV = "NSPROF_STREAM_WAIT_S"
MAX_STREAM_BYTES = 8 << 30
STREAM_WAIT_S = 60.0
_CHUNK_BYTES = 1 << 20
_SLICE_MS = 100  # poll slices: a FIFO whose writers left before this reader came never signals


def shown_name(path: str | os.PathLike) -> str:
    """How messages name an input: the path as the user gave it, `-` as standard input."""
    text = os.fspath(path)
    return STDIN_LABEL if text == STDIN else text


def env_number(name: str, default: float, most: float = math.inf) -> float:
    """$name as a positive number of at most `most`, `default` where it is unset or empty; ReportError (one
    line) otherwise."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ReportError(f"{name}={raw} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ReportError(f"{name}={raw} must be a positive finite number")
    if value > most:
        raise ReportError(f"{name}={raw} must be at most {most:g}")
    return value


@contextlib.contextmanager
def local_copy(path: str | os.PathLike) -> Iterator[Path]:
    """A path parsers may read as often as they like: `path` itself when it is a regular file only this
    user can change, else a temporary copy of its bytes (removed on exit): a stream's, or the file's as
    one descriptor read it, where another user could change it meanwhile (others_could_change).

    Raises ReportError (one line, naming the input as given) when the input is missing, a
    folder, a terminal, larger than the bound, or sends no data for the wait.
    """
    text = os.fspath(path)
    if text == STDIN:
        if os.isatty(0):
            raise ReportError(f"{STDIN_LABEL} is a terminal; pipe a report into `-` or name a file")
        fd, owned, copy_name = 0, False, "stdin"
    else:
        info = stat_report(path)
        if stat.S_ISREG(info.st_mode) and not others_could_change(Path(path), info):
            yield Path(path)
            return
        if stat.S_ISREG(info.st_mode):  # read once, from one descriptor, into a copy nobody else can touch
            with tempfile.TemporaryDirectory(prefix="nsprof-input-") as folder:
                yield _copied(path, Path(folder) / (Path(text).name or "input"))
            return
        try:
            # O_NONBLOCK: opening a FIFO for reading otherwise blocks until a writer opens it.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise ReportError(f"{text}: cannot open ({(exc.strerror or str(exc)).lower()})") from None
        owned, copy_name = True, Path(text).name or "input"
    try:
        with tempfile.TemporaryDirectory(prefix="nsprof-input-") as folder:
            copy = Path(folder) / copy_name
            _copy_stream(fd, copy, shown_name(text), nonblocking=owned)
            yield copy
    finally:
        if owned:
            os.close(fd)


def open_regular(path, limit: int) -> tuple[BinaryIO, int]:
    """(the regular file at `path` opened for reading, its size). ValueError, saying why, for anything else
    (a FIFO is not waited for: O_NONBLOCK) or a file of more than `limit` bytes; OSError where it cannot be
    opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    why = "not a regular file" if not stat.S_ISREG(info.st_mode) else ""
    why = why or (f"{info.st_size} bytes, more than {limit}" if info.st_size > limit else "")
    if why:
        os.close(fd)
        raise ValueError(why)
    return os.fdopen(fd, "rb"), info.st_size


def _copied(path, copy: Path) -> Path:
    """`copy`, holding the bytes of the regular file at `path` as one descriptor read them (within the
    stream bound: another user's file may be huge, or grow)."""
    shown = shown_name(path)
    limit = int(env_number(MAX_STREAM_BYTES_ENV, MAX_STREAM_BYTES))
    try:
        source, size = open_regular(path, limit)
        with source, open(copy, "wb") as out:
            for chunk in iter(lambda: source.read(_CHUNK_BYTES), b""):
                if out.tell() + len(chunk) > size:
                    raise ValueError("it grew while nsprof read it (another user writes it?)")
                out.write(chunk)
    except OSError as exc:
        raise ReportError(f"{shown}: cannot read ({(exc.strerror or str(exc)).lower()})") from None
    except ValueError as exc:  # changed since it was looked at, or too large to copy
        raise ReportError(
            f"{shown}: cannot read a copy of a file another user could change: {exc} "
            f"({MAX_STREAM_BYTES_ENV} sets the bound; or copy it to a folder of your own first)"
        ) from None
    return copy


def _copy_stream(fd: int, copy: Path, shown: str, *, nonblocking: bool) -> None:
    import select
    import time

    from nsprof.reports.kinds import sniff_kind
    from nsprof.reports.signatures import HEADER_SCAN_BYTES

    limit = int(env_number(MAX_STREAM_BYTES_ENV, MAX_STREAM_BYTES))
    wait_s = env_number(STREAM_WAIT_ENV, STREAM_WAIT_S, MAX_WAIT_S)
    poller = select.poll()
    # POLLIN: data. POLLHUP: every writer has closed; on Linux a FIFO reports it only for
    # writers that opened after this reader did, so when poll stays silent, a non-blocking
    # read tells "no writer left" (b"") from "a writer, no data yet" (EAGAIN).
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    total = 0
    quiet_since = time.monotonic()
    with open(copy, "wb") as out:
        while True:
            ready = poller.poll(_SLICE_MS)
            if not ready and not nonblocking:
                if time.monotonic() - quiet_since > wait_s:
                    raise _no_data(shown, wait_s)
                continue
            try:
                chunk = os.read(fd, _CHUNK_BYTES)
            except BlockingIOError:  # a writer is there, with nothing to say yet
                chunk = None
            except OSError as exc:
                raise ReportError(f"{shown}: cannot read ({(exc.strerror or str(exc)).lower()})") from None
            if chunk == b"" and (ready or total):
                return  # end of the stream
            if not chunk:  # EAGAIN, or no writer has come yet
                if time.monotonic() - quiet_since > wait_s:
                    raise _no_data(shown, wait_s)
                continue
            quiet_since = time.monotonic()
            before, total = total, total + len(chunk)
            if total > limit:
                raise ReportError(
                    f"{shown}: more than {limit} bytes from a stream; save it to a file first"
                    f" ({MAX_STREAM_BYTES_ENV} sets the bound)"
                )
            out.write(chunk)
            if before < HEADER_SCAN_BYTES <= total:  # as far as any kind's sniff reads: no report, no more
                out.flush()
                sniff_kind(copy, shown=shown)


def _no_data(shown: str, wait_s: float) -> ReportError:
    return ReportError(
        f"{shown}: no data for {wait_s:g} s (a FIFO that nothing writes to?); {STREAM_WAIT_ENV} sets the wait"
    )
