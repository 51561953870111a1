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


def middle(value: str, width: int | None = 48) -> str:
    """`value` within `width` characters (None: whole), cut from the middle so that its start and
    its end stay (where kernel names differ: template arguments, tile sizes), an ellipsis marking
    the cut."""
    if width is None or len(value) <= width:
        return value
    if width < 3:
        return value[:width]
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    return value[:head] + "…" + (value[-tail:] if tail else "")


TIME_UNITS = {"ns": (1.0, ",.0f"), "us": (1e3, ",.3f"), "ms": (1e6, ",.6f")}
UNIT_LABELS = {"ns": "ns", "us": "µs", "ms": "ms"}


def duration(value: Any, unit: str = "us") -> str:
    """A duration in ns in `unit` (ns, us, ms), to the nanosecond, or "-"."""
    scale, fmt = TIME_UNITS[unit]
    return "-" if is_missing(value) else format(value / scale, fmt)


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


def render_markdown(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """A GitHub-flavoured Markdown table; columns in `right` (default: all but the first) right-aligned."""
    right = right if right is not None else set(range(1, len(headers)))

    def cell(value: str) -> str:
        return value.replace("|", "\\|")

    out = ["| " + " | ".join(cell(h) for h in headers) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def drop_empty_columns(headers: list[str], rows: list[list[str]], keep: int,
                       right: set[int] | None = None) -> tuple[list[str], list[list[str]], set[int]]:
    """Headers, rows and right-aligned columns without the columns past the first `keep` whose
    every cell is "-" (cycles and clock of an nsys report, say)."""
    right = right if right is not None else set(range(1, len(headers)))
    kept = [i for i in range(len(headers)) if i < keep or not rows or any(r[i] != "-" for r in rows)]
    return ([headers[i] for i in kept], [[r[i] for i in kept] for r in rows],
            {n for n, i in enumerate(kept) if i in right})
