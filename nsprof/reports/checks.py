"""Shared guards of the parsers: one-line messages, values no kernel can have."""

from __future__ import annotations

import os
import stat

MEASURED = ("duration_ns", "cycles", "clock_hz")


def one_line(text: object, limit: int = 300) -> str:
    """Foreign text (SQLite, pandas, ncu_report messages) as one short line for a ReportError.

    Their messages may quote a whole schema or a megabyte of data over many lines; the CLI
    promises one line on stderr.
    """
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def nothing_measured(failed: dict[int, str]) -> str:
    """The one line of a run that measured no config: how many failed, and the first one's reason (`failed`:
    config id -> reason, the first in id order)."""
    first = next(iter(failed.items()), None)
    why = f" (config {first[0]}: {one_line(first[1], 200)})" if first is not None else ""
    return f"no config was measured: all {len(failed)} failed{why}"


def blank_impossible(frame, columns: tuple[str, ...] = MEASURED) -> list[str]:
    """Set negative or infinite measurements to NaN in place; one warning per column touched.

    A kernel cannot take negative or infinite time, cycles or clock: such a value comes
    from a corrupt or hand-edited report. The row stays (nothing measured is dropped
    silently), its value becomes "not known", and the warning says how many.
    """
    import numpy as np

    warnings = []
    for column in columns:
        if isinstance(frame[column], list):  # a ListTable (nsprof.schema): floats, NaN where missing
            values = np.array(frame[column], dtype="float64")
        else:
            values = frame[column].to_numpy(dtype="float64", na_value=np.nan)
        bad = np.isinf(values) | (values < 0)
        if bad.any():
            if isinstance(frame[column], list):
                frame[column] = np.where(bad, np.nan, values).tolist()
            else:
                frame[column] = frame[column].mask(bad)
            warnings.append(
                f"{int(bad.sum())} {column} value(s) negative or infinite (corrupt report?); left empty"
            )
    return warnings


def stat_report(path) -> os.stat_result:
    """os.stat of a report path, or a one-line ReportError naming the real cause and the path
    as given: missing, a symbolic-link loop, a link to nothing, a folder, not permitted."""
    import errno

    from nsprof.errors import ReportError

    shown = os.fspath(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReportError(f"{shown}: a loop of symbolic links") from None
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise ReportError(
                f"{shown}: a symbolic link to nothing (it points to {os.readlink(path)})"
            ) from None
        if exc.errno == errno.ENOENT:
            raise ReportError(f"{shown}: no such file") from None
        raise ReportError(f"{shown}: cannot read ({_reason(exc)})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ReportError(f"{shown}: is a folder, not a report file")
    return info


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def read_head(path, size: int, *, empty_hint: str = "") -> bytes:
    """The first `size` bytes of a report file, or a one-line ReportError for the ways a path
    is not a readable, non-empty regular file (missing, a link loop, a folder, a FIFO or other
    stream, unreadable, empty). Messages name the path as given."""
    from nsprof.errors import ReportError

    shown = os.fspath(path)
    info = stat_report(path)
    if not stat.S_ISREG(info.st_mode):
        # Opening a FIFO blocks until a writer comes; nsprof.reports.read_report copies
        # streams to a file first.
        raise ReportError(f"{shown}: not a regular file (a FIFO or device); read it with read_report")
    try:
        with open(path, "rb") as handle:
            head = handle.read(size)
    except OSError as exc:
        raise ReportError(f"{shown}: cannot read ({_reason(exc)})") from None
    if not head.strip():
        raise ReportError(f"{shown}: empty file{empty_hint}")
    return head
