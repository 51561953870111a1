"""`ncu --csv` output (`--page raw` and `--page details`) -> the tidy table.

raw:     one header row, one units row, then one row per profiled workload.
details: long format, one row per (workload, section, metric) with unit and value.
Numbers carry the locale's thousands separators ("5,537.04" or "5.537,04"); the decimal
mark is detected once per file from the values themselves.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.checks import blank_impossible, one_line, read_head
from nsprof.reports.names import short_kernel_name
from nsprof.reports.nvtx_cells import parse_csv_columns
from nsprof.reports.signatures import UTF16_BOMS, find_header
from nsprof.schema import column_list, make_frame, tidy_rows

PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
START_END_PREFIX = "Id:Domain:Start/Stop_Range"

# Metric names, most specific first; the details page of ncu's default sections uses the
# human-readable names.
DURATION_METRICS = ("gpu__time_duration.sum", "gpu__time_duration.avg", "Duration")
CYCLES_METRICS = ("gpc__cycles_elapsed.max", "Elapsed Cycles")
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


def _scale(kind: str, unit: str, path: Path) -> float:
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
_MISSING = ("", "n/a", "N/A", "-", "nan", "NaN")


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
        if not (direct.isna() & text.ne("") & ~text.isin(_MISSING)).any():
            if problems is not None:
                problems["missing"] = problems.get("missing", 0) + int(direct.isna().sum())
            return direct.astype("float64")
    missing = text.isna() | text.isin(_MISSING)
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


def _read_bytes(path: Path) -> bytes:
    read_head(path, 4096)  # missing, folder, unreadable, empty: the checks every parser shares
    data = path.read_bytes()
    if data.startswith(UTF16_BOMS):
        # PowerShell's `>` writes ncu's output as UTF-16; the parser below reads UTF-8.
        data = data.decode("utf-16", errors="replace").encode("utf-8")
    if not data[:4096].strip() and not data.strip():
        raise ReportError(f"{path.name}: empty file")
    if b"\0" in data[:4096]:
        raise ReportError(f"{path.name}: binary data, not an ncu CSV export")
    return data


# ncu's own notes when it leaves clocks or caches alone (--clock-control none,
# --cache-control none); a CSV captured straight from the profiling run has them above the
# table, a CSV exported later with --import has no such lines.
_PREAMBLE_LABELS = (
    (b"Running with unmodified GPU clocks", "clock_control", "none"),
    (b"Running with uncontrolled GPU caches", "cache_control", "none"),
)


def preamble_labels(preamble: bytes) -> dict[str, str]:
    """clock_control / cache_control that ncu's notes above the table record."""
    return {key: value for marker, key, value in _PREAMBLE_LABELS if marker in preamble}


# IDs beyond int64 cannot be ncu's (it numbers results from 0); they are not rows.
_ID_PATTERN = r"[0-9]{1,18}"
_SMALL_INT_PATTERN = r"[0-9]{1,15}"
_DETAILS_COLUMNS = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")


def read_ncu_csv(
    path,
    *,
    domain: str | None = None,
    clock_control: str | None = None,
    cache_control: str | None = None,
    decimal: str | None = None,
    as_rows: bool = False,
):
    """Parse an `ncu --csv --page raw|details` export into the tidy table: a DataFrame, or with
    `as_rows` a ListTable (nsprof.schema) where the page is small and plain (else the frame)."""
    import csv

    path = Path(path)
    data = _read_bytes(path)
    start = find_header(data)
    if start is None:
        raise ReportError(f'{path.name}: not an ncu CSV export (no "ID" header row)')
    # ncu may print ==PROF== or program lines before the table; bytes avoid a 2nd copy
    body = data[start:] if start else data
    recorded = preamble_labels(data[:start])
    warnings = []
    if not body.endswith(b"\n") and b"\n" in body:
        # ncu ends every row with a newline: a cut-off last row is dropped, the rest kept.
        body = body[: body.rfind(b"\n") + 1]
        warnings.append("the file ends in the middle of a row (truncated?); that row was dropped")
    first_line = body[: body.find(b"\n")] if b"\n" in body else body
    try:
        columns = next(csv.reader([first_line.decode("utf-8-sig", errors="replace")]))
    except csv.Error as exc:  # e.g. a bare carriage return inside the header row
        raise ReportError(f"{path.name}: malformed ncu CSV header ({one_line(exc, 120)})") from None
    small = None  # _raw_small's columns, for a small plain raw page
    if "Metric Name" in columns:
        missing = [c for c in _DETAILS_COLUMNS if c not in columns]
        if missing:
            raise ReportError(f"{path.name}: ncu details CSV without column(s) {', '.join(missing)}")
        frame, problems = _details(body, columns, path, domain, decimal)
    elif "Kernel Name" in columns:
        small = _raw_small(body, columns, path, domain, decimal)
        frame, problems = small if small is not None else _raw(body, columns, path, domain, decimal)
    else:
        raise ReportError(f"{path.name}: CSV is not an ncu raw or details page (no 'Kernel Name' column)")
    # A label given by the caller (nsprof's own runs know their settings) wins over the file.
    rows = len(frame["duration_ns"])
    frame["clock_control"] = [clock_control or recorded.get("clock_control")] * rows
    frame["cache_control"] = [cache_control or recorded.get("cache_control")] * rows
    result = tidy_rows(frame) if as_rows and small is not None else None
    if result is None:
        result = make_frame(frame)
    if not len(result):
        raise ReportError(f"{path.name}: ncu CSV holds no profiled kernels")
    no_duration = duration_warning(problems, len(result))
    warnings += blank_impossible(result) + ([no_duration] if no_duration else [])
    result.attrs["warnings"] = warnings
    result.attrs["labels_from"] = {key: "ncu's notes above the table" for key in recorded}
    # ncu profiles graphs whole (--graph-profiling graph) for the whole run or not at all.
    if any(type(workload) is str and workload == "graph" for workload in column_list(result, "workload")):
        result.attrs["graph_profiling"] = "graph"
    return result


def csv_engine() -> str:
    """pyarrow's multithreaded CSV reader when installed (3x faster here), else pandas' C one."""
    import importlib.util
    import os

    wanted = os.environ.get("NSPROF_CSV_ENGINE")
    if wanted in ("c", "pyarrow"):
        return wanted
    return "pyarrow" if importlib.util.find_spec("pyarrow") is not None else "c"


def _read_columns(body: bytes, usecols: list[str], path: Path):
    import pandas as pd

    if csv_engine() == "pyarrow":
        try:
            frame = pd.read_csv(
                io.BytesIO(body), usecols=usecols, dtype=str, engine="pyarrow", encoding="utf-8-sig"
            )
            return frame.fillna("")
        except Exception:  # noqa: BLE001 - invalid UTF-8, ragged rows: the C reader below decides
            pass
    try:
        return pd.read_csv(
            io.BytesIO(body),
            usecols=usecols,
            dtype=str,
            keep_default_na=False,
            engine="c",
            encoding="utf-8-sig",
            encoding_errors="replace",
        )
    except (pd.errors.ParserError, ValueError, UnicodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReportError(f"{path.name}: malformed ncu CSV ({first})") from None


def _nvtx_columns(columns: list[str]) -> tuple[str | None, str | None]:
    push_pop = next((c for c in columns if c.startswith(PUSH_POP_PREFIX)), None)
    start_end = next((c for c in columns if c.startswith(START_END_PREFIX)), None)
    return push_pop, start_end


def _pick(columns, names) -> str | None:
    return next((n for n in names if n in columns), None)


def _identity(data, push_pop: str | None, start_end: str | None, domain: str | None) -> dict:
    """Columns shared by both pages: ids, kernel, NVTX attribution."""
    import pandas as pd

    n = len(data)
    nvtx = parse_csv_columns(
        data[push_pop] if push_pop else None, data[start_end] if start_end else None, domain, rows=n
    )
    kernel = data["Kernel Name"]
    return {
        "source": ["ncu"] * n,
        **nvtx,
        "kernel": kernel.map(_short_names(kernel)),
        "kernel_full": kernel,  # rows group by the full name; `kernel` is its short form
        "workload": ["graph" if k == "graph" else "kernel" for k in kernel.tolist()],
        "launch_id": pd.to_numeric(data["ID"], errors="coerce").astype("Int64"),
        "pid": _ints(data, "Process ID", n),
        "device": _ints(data, "Device", n),
        "stream": _ints(data, "Stream", n),
    }


def _short_names(kernel) -> dict:
    return {name: short_kernel_name(name) for name in kernel.unique()}


def _ints(data, column: str, n: int):
    import pandas as pd

    if column not in data:
        return [pd.NA] * n
    # Few distinct values (pids, devices, streams): clean each once.
    values = data[column]
    mapping = {}
    for raw in values.unique():
        digits = re.sub(r"[,.\s]", "", str(raw))
        # A long run of digits (or a non-ASCII digit) is damage, not a pid/device/stream.
        mapping[raw] = int(digits) if re.fullmatch(_SMALL_INT_PATTERN, digits) else pd.NA
    return values.map(mapping).astype("Int64")


def _raw(body: bytes, columns: list[str], path: Path, domain, decimal):
    import pandas as pd

    duration = _pick(columns, DURATION_METRICS)
    if duration is None:
        raise ReportError(
            f"{path.name}: ncu CSV has no gpu__time_duration column; profile with "
            "--metrics gpu__time_duration.sum (nsprof's drivers do)"
        )
    cycles, clock = _pick(columns, CYCLES_METRICS), _pick(columns, CLOCK_METRICS)
    push_pop, start_end = _nvtx_columns(columns)
    wanted = [
        "ID",
        "Kernel Name",
        duration,
        cycles,
        clock,
        push_pop,
        start_end,
        "Process ID",
        "Device",
        "Stream",
    ]
    usecols = [c for c in dict.fromkeys(wanted) if c and c in columns]
    data = _read_columns(body, usecols, path)
    if data.empty:
        raise ReportError(f"{path.name}: ncu CSV holds no profiled kernels")
    units = data.iloc[0]
    if str(units["ID"]).strip() == "":  # the units row
        data = data.iloc[1:].reset_index(drop=True)
    else:
        units = pd.Series({c: "" for c in data.columns})
    data = data[data["ID"].str.strip().str.fullmatch(_ID_PATTERN, na=False)].reset_index(drop=True)
    if data.empty:
        raise ReportError(f"{path.name}: ncu CSV holds no profiled kernels")
    metric_cols = [c for c in (duration, cycles, clock) if c]
    # One decimal mark for the file, from the metric columns the units row names.
    mark = decimal or detect_decimal_mark([v for c in metric_cols for v in data[c].tolist()[:2000]])
    out = _identity(data, push_pop, start_end, domain)
    problems: dict = {}
    out["duration_ns"] = to_numbers(data[duration], mark, problems) * _scale(
        "duration", units[duration], path
    )
    for key, column, kind in (("cycles", cycles, "cycles"), ("clock_hz", clock, "clock")):
        if column:
            out[key] = to_numbers(data[column], mark) * _scale(kind, units[column], path)
    return pd.DataFrame(out), problems


# Up to this many rows a raw page is read by the csv module into lists, cell by cell (a few
# ms); pandas' whole-column path costs some 50 ms whatever the size, and wins on large files.
SMALL_ROWS = 2000
_PLAIN_NUMBER = re.compile(r"-?[0-9]{1,17}(?:\.[0-9]{1,17})?")  # what float() and pandas read alike


def _table_rows(body: bytes, columns: list[str], wanted: list[str]) -> list[list[str]] | None:
    """The cells of `wanted` columns, row by row, as _read_columns would give them, or None where
    the table is not one the csv module reads exactly as pandas (invalid UTF-8, ragged rows, a
    line break inside a cell, repeated column names, more than SMALL_ROWS rows)."""
    import csv

    if len(set(columns)) != len(columns) or body.count(b"\n") > SMALL_ROWS + 2:
        return None
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        records = list(reader)
    except csv.Error:
        return None
    if len(records) != reader.line_num or records[0] != columns:
        return None  # a record over several lines (a quoted line break)
    positions = [columns.index(c) for c in wanted]
    # pandas' pyarrow reader reads its default NA spellings as empty cells; its C reader keeps them.
    if csv_engine() == "pyarrow":
        from pandas._libs.parsers import STR_NA_VALUES as empty
    else:
        empty = ()
    rows = []
    for record in records[1:]:
        if not record:  # a blank line: both readers skip it
            continue
        if len(record) != len(columns):
            return None
        rows.append(["" if record[i] in empty else record[i] for i in positions])
    return rows


def _plain_numbers(cells: list[str], problems: dict | None) -> list[float] | None:
    """to_numbers(cells, ".") for cells that are plain numbers or empty ('n/a', ...), else None."""
    values = []
    missing = 0
    for cell in cells:
        if _PLAIN_NUMBER.fullmatch(cell):
            values.append(float(cell))
        elif cell.strip() in _MISSING:
            values.append(float("nan"))
            missing += 1
        else:
            return None
    if problems is not None:
        problems["missing"] = problems.get("missing", 0) + missing
    return values


def _raw_small(body: bytes, columns: list[str], path: Path, domain, decimal):
    """_raw's columns (as lists) and problems for a small raw page of plain numbers, or None for
    _raw to read it: the same answers, without pandas' cost per column."""
    import numpy as np

    duration = _pick(columns, DURATION_METRICS)
    if duration is None:
        return None
    cycles, clock = _pick(columns, CYCLES_METRICS), _pick(columns, CLOCK_METRICS)
    push_pop, start_end = _nvtx_columns(columns)
    wanted = [
        c
        for c in dict.fromkeys(
            [
                "ID",
                "Kernel Name",
                duration,
                cycles,
                clock,
                push_pop,
                start_end,
                "Process ID",
                "Device",
                "Stream",
            ]
        )
        if c and c in columns
    ]
    read = _small_cells(body, columns, wanted)
    if read is None:
        return None
    cells, units, n = read
    metrics = {"duration_ns": duration, "cycles": cycles, "clock_hz": clock}
    read = _small_metrics(cells, metrics, decimal)
    if read is None:
        return None
    numbers, problems = read
    kernel = cells["Kernel Name"]
    short = {name: short_kernel_name(name) for name in dict.fromkeys(kernel)}
    out = {
        "source": ["ncu"] * n,
        **_small_nvtx(cells, push_pop, start_end, n, domain),
        "kernel": [short[k] for k in kernel],
        "kernel_full": kernel,
        "workload": ["graph" if k == "graph" else "kernel" for k in kernel],
        "launch_id": [int(i) for i in cells["ID"]],
        **{
            key: _small_ints(cells.get(column), n)
            for key, column in (("pid", "Process ID"), ("device", "Device"), ("stream", "Stream"))
        },
    }
    for key in ("tid", "pid", "device", "stream"):  # ints beside None: kept exact, not read as floats
        out[key] = np.array(out[key], dtype=object)
    scale = _scale("duration", units[duration], path)
    out["duration_ns"] = [v * scale for v in numbers["duration_ns"]]
    for key, column, kind in (("cycles", cycles, "cycles"), ("clock_hz", clock, "clock")):
        if column:
            scale = _scale(kind, units[column], path)
            out[key] = [v * scale for v in numbers[key]]
    return out, problems


def _small_cells(body: bytes, columns: list[str], wanted: list[str]):
    """The `wanted` columns' cells (as lists), their units and the row count, or None when
    the page has no rows or an ID that is not plain."""
    rows = _table_rows(body, columns, wanted)
    if not rows:
        return None  # no rows: _raw says so
    at = {c: i for i, c in enumerate(wanted)}
    units = {c: "" for c in wanted}
    if rows[0][0].strip() == "":  # the units row
        units = dict(zip(wanted, rows[0]))
        rows = rows[1:]
    rows = [r for r in rows if re.fullmatch(_ID_PATTERN, r[0].strip())]
    if not rows or any(r[0] != r[0].strip() for r in rows):
        return None
    cells = {c: [r[at[c]] for r in rows] for c in wanted}
    return cells, units, len(rows)


def _small_metrics(cells: dict, metrics: dict, decimal):
    """The metric columns (key -> column, None where absent) as plain numbers, and the
    duration's problems; None unless the decimal mark is "." and every number is plain."""
    metric_cols = [c for c in metrics.values() if c]
    mark = decimal or detect_decimal_mark([v for c in metric_cols for v in cells[c][:2000]])
    if mark != ".":
        return None
    problems: dict = {}
    numbers = {}
    for key, column in metrics.items():
        if column:
            numbers[key] = _plain_numbers(cells[column], problems if key == "duration_ns" else None)
            if numbers[key] is None:
                return None
    return numbers, problems


def _small_nvtx(cells: dict, push_pop, start_end, n: int, domain) -> dict:
    """The NVTX columns (range, domain, nvtx_path, tid) as lists, from the NVTX cells."""
    from nsprof.reports.nvtx_cells import cell_attribution

    if not (push_pop or start_end):
        return {key: [None] * n for key in ("range", "domain", "nvtx_path", "tid")}
    pairs = list(zip(cells[push_pop] if push_pop else [""] * n, cells[start_end] if start_end else [""] * n))
    attributed = {pair: cell_attribution(*pair, domain) for pair in dict.fromkeys(pairs)}
    nvtx = dict(zip(("range", "domain", "nvtx_path", "tid"), zip(*(attributed[pair] for pair in pairs))))
    return {key: list(values) for key, values in nvtx.items()}


def _small_ints(values: list[str] | None, n: int) -> list:
    """_ints for a column as a list."""
    if values is None:
        return [None] * n
    mapping = {}
    for raw in dict.fromkeys(values):
        digits = re.sub(r"[,.\s]", "", raw)
        mapping[raw] = int(digits) if re.fullmatch(_SMALL_INT_PATTERN, digits) else None
    return [mapping[v] for v in values]


def _details(body: bytes, columns: list[str], path: Path, domain, decimal):
    import pandas as pd

    push_pop, start_end = _nvtx_columns(columns)
    usecols = [
        c
        for c in [
            "ID",
            "Kernel Name",
            push_pop,
            start_end,
            "Process ID",
            "Device",
            "Stream",
            "Metric Name",
            "Metric Unit",
            "Metric Value",
        ]
        if c
    ]
    usecols = [c for c in usecols if c in columns]
    data = _read_columns(body, usecols, path)
    data = data[data["ID"].str.strip().str.fullmatch(_ID_PATTERN, na=False)]
    names = set(data["Metric Name"].unique())
    duration = _pick(names, DURATION_METRICS)
    if duration is None:
        raise ReportError(
            f"{path.name}: ncu details CSV has no duration metric; profile with "
            "--metrics gpu__time_duration.sum or --section SpeedOfLight"
        )
    cycles, clock = _pick(names, CYCLES_METRICS), _pick(names, CLOCK_METRICS)
    mark = decimal or detect_decimal_mark(data["Metric Value"].tolist()[:5000])
    first = data.drop_duplicates("ID").reset_index(drop=True)
    out = pd.DataFrame(_identity(first, push_pop, start_end, domain))
    problems: dict = {}
    for key, metric, kind in (
        ("duration_ns", duration, "duration"),
        ("cycles", cycles, "cycles"),
        ("clock_hz", clock, "clock"),
    ):
        if metric is None:
            continue
        rows = data[data["Metric Name"] == metric].drop_duplicates("ID")
        scale = rows["Metric Unit"].map(lambda u, kind=kind: _scale(kind, u, path))
        numbers = to_numbers(rows["Metric Value"], mark, problems if key == "duration_ns" else None)
        values = (numbers * scale.astype("float64")).tolist()
        by_id = dict(zip(pd.to_numeric(rows["ID"]).tolist(), values))
        out[key] = [by_id.get(i) for i in out["launch_id"].tolist()]
    # A workload without a duration row has no duration either: count what is empty at the end.
    problems["missing"] = int(out["duration_ns"].isna().sum()) - problems.get("unreadable", 0)
    return out, problems
