"""Cells and tables as plain text: the one place numbers, durations and missing values are worded.

A missing value (None, NaN, pandas NA) is "-" in every cell. Tables are fixed-width, without
colour, safe to pipe.
"""

from __future__ import annotations

from typing import Any

from nsprof.analysis.stats import is_missing


def num(value: Any, fmt: str) -> str:
    """`value` in the format `fmt`, or "-"."""
    return "-" if is_missing(value) else format(value, fmt)


def us(value: Any) -> str:
    """A duration in ns as µs with three decimals (thousands separated), or "-"."""
    return "-" if is_missing(value) else f"{value / 1e3:,.3f}"


def text(value: Any, width: int = 60) -> str:
    """A cell for any value, cut at `width`: missing (None/NaN/NA) -> '-'."""
    return "-" if is_missing(value) else str(value)[:width]


def short(value: str, width: int = 48) -> str:
    """`value` within `width` characters, an ellipsis marking a cut."""
    return value if len(value) <= width else value[: width - 1] + "…"


def yes_no(value: Any) -> str:
    return "-" if is_missing(value) else ("yes" if bool(value) else "no")


def pct(value: Any) -> str:
    """A fraction as a percentage with one decimal, or "n/a"."""
    return "n/a" if is_missing(value) else f"{value * 100:.1f}%"


def render_table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """A plain fixed-width table (no colour, safe to pipe); columns in `right` (default: all but
    the first) are right-aligned."""
    right = right if right is not None else set(range(1, len(headers)))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)
