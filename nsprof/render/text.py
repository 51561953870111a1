"""Cells and tables as plain text: the one place numbers, durations and missing values are worded.

A missing value (None, NaN, pandas NA) is "-" in every cell. Tables are fixed-width, without
colour, safe to pipe.
"""

from __future__ import annotations

from typing import Any

from nsprof.analysis.stats import is_missing
from nsprof.errors import printable


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


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _word(value: str, i: int, step: int, reach: int = 12) -> int:
    """Position i moved out to the edge of the identifier it is in (step -1: to its start, +1: to
    its end), where that edge is at most `reach` characters away; else i."""

    def inside(ch: str) -> bool:
        return ch.isalnum() or ch == "_"

    j = i
    if step < 0:
        while j > 0 and inside(value[j - 1]):
            j -= 1
    else:
        while j < len(value) and inside(value[j]):
            j += 1
    return j if abs(j - i) <= reach else i


PIECE = 8  # the shortest differing part apart() shows: enough to read, as `instance 5` or `(int)4`


def _argument_start(value: str, i: int, reach: int = 8) -> int:
    """Position i moved back to the start of the template or call argument it is in (after `<`,
    `,` or a space) where that is at most `reach` characters back, else to its identifier's start:
    `(int)8` rather than `8`."""
    start = max(value.rfind(mark, 0, i) for mark in "<, ") + 1
    return start if 0 < start and i - start <= reach else _word(value, i, -1, reach)


def apart(value: str, others, width: int | None = 48) -> str:
    """`value` within `width` characters (None: whole), cut so that what tells it from `others`
    (the names it could be confused with) stays: the start and end it shares with all of them go
    first, an ellipsis marking each cut, then what room is left holds its start and its end.
    Where even the differing part is too long, the window starts where it differs from as many
    of `others` as a window can; without `others` it is `middle`."""
    if width is None or len(value) <= width:
        return value
    others = [o for o in others if o != value]
    if not others or width < 5:
        return middle(value, width)
    prefixes = [_common_prefix(value, o) for o in others]
    suffixes = [
        min(_common_prefix(value[::-1], o[::-1]), min(len(value), len(o)) - p)
        for o, p in zip(others, prefixes)
    ]
    lo = _argument_start(value, min(prefixes))
    hi = _word(value, len(value) - min(suffixes), +1)

    # widened, a word at a time, until it reads as itself: a piece of some length that none of `others` holds
    def vague() -> bool:
        return hi - lo < PIECE or any(value[lo:hi] in o for o in others)

    while vague() and (lo > 0 or hi < len(value)) and hi - lo + 2 < width:
        lo = _argument_start(value, lo - 1) if lo > 0 else lo
        if vague() and hi < len(value):
            hi = _word(value, hi + 1, +1)
    end = len(value) - hi  # characters after the differing part
    if (hi - lo) + (lo > 0) + (end > 0) > width:

        def window(start: int) -> str:
            room = width - (start > 0)
            text = value[start : start + room]
            return ("…" if start > 0 else "") + (text if start + room >= len(value) else text[:-1] + "…")

        starts = sorted({_argument_start(value, p) for p in prefixes})
        return max(
            (window(b) for b in starts),
            key=lambda w: sum(any(piece not in o for piece in w.split("…") if piece) for o in others),
        )
    head = tail = 0  # characters kept of the start (up to lo) and of the end (up to `end`)

    def length(h: int, t: int) -> int:
        return h + (h < lo) + (hi - lo) + (t < end) + t

    grew = True
    while grew:
        grew = False
        if head < lo and length(head + 1, tail) <= width:
            head, grew = head + 1, True
        if tail < end and length(head, tail + 1) <= width:
            tail, grew = tail + 1, True
    return (
        value[:head]
        + ("…" if head < lo else "")
        + value[lo:hi]
        + ("…" if tail < end else "")
        + (value[len(value) - tail :] if tail else "")
    )


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


def _one_line(rows: list[list[str]]) -> list[list[str]]:
    # A cell is one line of plain text: a line break, tab or other control character in a name (a report
    # edited, an odd demangling) is shown escaped, never passed to the terminal.
    return [[printable(cell) for cell in row] for row in rows]


def render_table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """A plain fixed-width table (no colour, safe to pipe); columns in `right` (default: all but
    the first) are right-aligned."""
    right = right if right is not None else set(range(1, len(headers)))
    rows = _one_line(rows)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def render_markdown(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """A GitHub-flavoured Markdown table; columns in `right` (default: all but the first) right-aligned."""
    right = right if right is not None else set(range(1, len(headers)))

    def cell(value: str) -> str:
        return printable(value).replace("|", "\\|")

    out = [
        "| " + " | ".join(cell(h) for h in headers) + " |",
        "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|",
    ]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def drop_empty_columns(
    headers: list[str], rows: list[list[str]], keep: int, right: set[int] | None = None
) -> tuple[list[str], list[list[str]], set[int]]:
    """Headers, rows and right-aligned columns without the columns past the first `keep` whose
    every cell is "-" (cycles and clock of an nsys report, say)."""
    right = right if right is not None else set(range(1, len(headers)))
    kept = [i for i in range(len(headers)) if i < keep or not rows or any(r[i] != "-" for r in rows)]
    return (
        [headers[i] for i in kept],
        [[r[i] for i in kept] for r in rows],
        {n for n, i in enumerate(kept) if i in right},
    )
