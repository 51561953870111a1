"""Shared guards of the parsers: one-line messages, values no kernel can have."""

from __future__ import annotations

MEASURED = ("duration_ns", "cycles", "clock_hz")


def one_line(text: object, limit: int = 300) -> str:
    """Foreign text (SQLite, pandas, ncu_report messages) as one short line for a ReportError.

    Their messages may quote a whole schema or a megabyte of data over many lines; the CLI
    promises one line on stderr.
    """
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def blank_impossible(frame, columns: tuple[str, ...] = MEASURED) -> list[str]:
    """Set negative or infinite measurements to NaN in place; one warning per column touched.

    A kernel cannot take negative or infinite time, cycles or clock: such a value comes
    from a corrupt or hand-edited report. The row stays (nothing measured is dropped
    silently), its value becomes "not known", and the warning says how many.
    """
    import numpy as np

    warnings = []
    for column in columns:
        values = frame[column].to_numpy(dtype="float64", na_value=np.nan)
        bad = np.isinf(values) | (values < 0)
        if bad.any():
            frame[column] = frame[column].mask(bad)
            warnings.append(f"{int(bad.sum())} {column} value(s) negative or infinite (corrupt report?); "
                            "left empty")
    return warnings


def read_head(path, size: int, *, empty_hint: str = ""):
    """The first `size` bytes of a report file, or a one-line ReportError for the ways a path
    is not a readable, non-empty file (missing, a folder, unreadable, empty)."""
    from pathlib import Path

    from nsprof.errors import ReportError

    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such file")
    if path.is_dir():
        raise ReportError(f"{path}: is a folder, not a report file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(size)
    except OSError as exc:
        raise ReportError(f"{path.name}: cannot read ({exc.strerror})") from None
    if not head.strip():
        raise ReportError(f"{path.name}: empty file{empty_hint}")
    return head
