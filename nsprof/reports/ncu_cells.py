"""What the cells of ncu's CSV pages mean, whichever reader reads them: the column names (metrics,
NVTX), the units, and numbers in the locale's notation (the decimal mark detected once per file
from the values themselves; thousands separators of any kind)."""

from __future__ import annotations

import re
from pathlib import Path

from nsprof.errors import NsprofError, ReportError

PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
START_END_PREFIX = "Id:Domain:Start/Stop_Range"

# Metric names, most specific first; the details page of ncu's default sections uses the
# human-readable names.
DURATION_METRICS = ("gpu__time_duration.sum", "gpu__time_duration.avg", "Duration")
CYCLES_METRICS = ("gpc__cycles_elapsed.max", "Elapsed Cycles")
L2_HIT_METRICS = ("lts__t_sector_hit_rate.pct",)
CLOCK_METRICS = ("gpc__cycles_elapsed.avg.per_second", "SM Frequency", "sm__cycles_elapsed.avg.per_second")

_TIME_NS = {
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}
_CYCLES = {"cycle": 1.0, "kcycle": 1e3, "mcycle": 1e6, "gcycle": 1e9}
_FREQ_HZ = {
    "hz": 1.0,
    "khz": 1e3,
    "mhz": 1e6,
    "ghz": 1e9,
    "cycle/second": 1.0,
    "cycle/usecond": 1e6,
    "cycle/nsecond": 1e9,
    "cycle/msecond": 1e3,
}
_SCALES = {"duration": _TIME_NS, "cycles": _CYCLES, "clock": _FREQ_HZ}


def scale(kind: str, unit: str, path: Path) -> float:
    unit = (unit or "").strip().lower()
    table = _SCALES[kind]
    if unit == "" and kind == "cycles":
        return 1.0
    if not unit and kind != "cycles":
        raise ReportError(
            f"{path.name}: no unit for the {kind} metric; is the units row under the header missing or moved?"
        )
    if unit not in table:
        raise ReportError(f"{path.name}: unknown unit {unit!r} for the {kind} metric")
    return table[unit]


# Digit-group separators that are never a decimal mark: space, no-break space (fr_FR),
# narrow no-break space (fr_FR in newer glibc), thin space, apostrophe and right single
# quotation mark (de_CH). '.' and ',' are either, decided once per file.
GROUP_CHARS = " \u00a0\u202f\u2009'\u2019"
_GROUP_CLASS = "[" + re.escape(GROUP_CHARS) + "]"
MISSING = ("", "n/a", "N/A", "-", "nan", "NaN")
# IDs beyond int64 cannot be ncu's (it numbers results from 0); they are not rows.
ID_PATTERN = r"[0-9]{1,18}"
SMALL_INT_PATTERN = r"[0-9]{1,15}"


def detect_decimal_mark(values) -> str:
    """'.' or ',' — which mark separates decimals in these number strings (one answer per file).

    A value votes only when its pattern settles it: both marks present (the last one is the
    decimal), one mark repeated (a group separator), one mark not followed by exactly three
    digits (a decimal), or one mark after a space/apostrophe group separator (a decimal).
    "7,785" alone does not vote; ties go to '.'.
    """
    votes = {".": 0, ",": 0}
    for value in values:
        text = value.strip().lstrip("-+")
        grouped = any(ch in text for ch in GROUP_CHARS)
        dots, commas = text.count("."), text.count(",")
        if dots and commas:
            votes["." if text.rfind(".") > text.rfind(",") else ","] += 1
        elif dots > 1:
            votes[","] += 1
        elif commas > 1:
            votes["."] += 1
        elif dots == 1 and (grouped or len(text) - text.find(".") - 1 != 3):
            votes["."] += 1
        elif commas == 1 and (grouped or len(text) - text.find(",") - 1 != 3):
            votes[","] += 1
    return "," if votes[","] > votes["."] else "."


def number_pattern(decimal: str) -> str:
    """The whole-cell pattern of a number written with `decimal` as its decimal mark."""
    thousands = "," if decimal == "." else "."
    group = f"(?:{_GROUP_CLASS}|{re.escape(thousands)})"
    return (
        rf"[+-]?(?:[0-9]{{1,3}}(?:{group}[0-9]{{3}})+|[0-9]+)(?:{re.escape(decimal)}[0-9]*)?"
        r"(?:[eE][+-]?[0-9]+)?"
    )


def to_numbers(series, decimal: str, problems: dict | None = None):
    """Locale number strings -> float64 (NaN for empty or 'n/a' cells, and for unreadable ones).

    One decimal mark for the whole column; every other mark, space or apostrophe must sit
    between groups of three digits. `problems`, when given, collects the count of empty
    cells ("missing") and of cells that are not numbers ("unreadable", with examples).
    """
    import pandas as pd

    text = series.astype("string").str.strip()
    if decimal == ".":
        # Fast path: ncu's raw page writes metric values without separators ("5.664000").
        direct = pd.to_numeric(series, errors="coerce")
        if not (direct.isna() & text.ne("") & ~text.isin(MISSING)).any():
            if problems is not None:
                problems["missing"] = problems.get("missing", 0) + int(direct.isna().sum())
            return direct.astype("float64")
    missing = text.isna() | text.isin(MISSING)
    valid = text.str.fullmatch(number_pattern(decimal), na=False)
    thousands = "," if decimal == "." else "."
    cleaned = text.where(valid).str.replace(f"{_GROUP_CLASS}|{re.escape(thousands)}", "", regex=True)
    if decimal == ",":
        cleaned = cleaned.str.replace(",", ".", regex=False)
    values = pd.to_numeric(cleaned, errors="coerce").astype("float64")
    if problems is not None:
        bad = ~missing & values.isna()
        problems["missing"] = problems.get("missing", 0) + int(missing.sum())
        problems["unreadable"] = problems.get("unreadable", 0) + int(bad.sum())
        problems.setdefault("examples", []).extend(text[bad].unique()[:3].tolist())
    return values


def duration_warning(problems: dict, total: int) -> str | None:
    """One line for the kernel rows left without a duration, or None when every row has one."""
    missing, unreadable = problems.get("missing", 0), problems.get("unreadable", 0)
    if not missing and not unreadable:
        return None
    parts = []
    if missing:
        parts.append(f"{missing} empty or 'n/a'")
    if unreadable:
        examples = ", ".join(repr(e) for e in problems.get("examples", [])[:3])
        parts.append(f"{unreadable} not a number ({examples})")
    return (
        f"{missing + unreadable} of {total} kernel row(s) have no duration: {'; '.join(parts)}; "
        "they are kept with an empty duration and left out of n, median and the other statistics"
    )


def csv_engine() -> str:
    """pyarrow's multithreaded CSV reader when installed (3x faster here), else pandas' C one."""
    import importlib.util
    import os

    wanted = os.environ.get("NSPROF_CSV_ENGINE")
    if wanted in ("c", "pyarrow"):
        return wanted
    if wanted:
        raise NsprofError(
            f"NSPROF_CSV_ENGINE={wanted!r} is not a CSV engine: set it to c or pyarrow, or unset it"
        )
    return "pyarrow" if importlib.util.find_spec("pyarrow") is not None else "c"


def pick(columns, names) -> str | None:
    return next((n for n in names if n in columns), None)


def nvtx_columns(columns: list[str]) -> tuple[str | None, str | None]:
    """The page's push/pop and start/end NVTX columns (None where it has none)."""
    push_pop = next((c for c in columns if c.startswith(PUSH_POP_PREFIX)), None)
    start_end = next((c for c in columns if c.startswith(START_END_PREFIX)), None)
    return push_pop, start_end


def raw_columns(columns: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """A raw page's columns that nsprof reads ("duration", "cycles", "clock", "push_pop",
    "start_end": the column's name, or None where the page lacks it), and all it reads of them
    (the header's order of wanting)."""
    push_pop, start_end = nvtx_columns(columns)
    named = {
        "duration": pick(columns, DURATION_METRICS),
        "cycles": pick(columns, CYCLES_METRICS),
        "clock": pick(columns, CLOCK_METRICS),
        "push_pop": push_pop,
        "start_end": start_end,
    }
    wanted = ["ID", "Kernel Name", *named.values(), "Process ID", "Device", "Stream"]
    return named, [c for c in dict.fromkeys(wanted) if c and c in columns]


def small_int(raw: str) -> int | None:
    """A pid, device or stream cell as an int (separators dropped), or None: a long run of digits
    (or a non-ASCII digit) is damage, not a pid/device/stream."""
    digits = re.sub(r"[,.\s]", "", raw)
    return int(digits) if re.fullmatch(SMALL_INT_PATTERN, digits) else None
