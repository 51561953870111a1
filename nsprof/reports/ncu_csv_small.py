"""A small raw ncu page (up to SMALL_ROWS rows of plain numbers) read by the csv module into lists,
cell by cell: the same answers as ncu_csv's pandas column path, without pandas' cost per column."""

from __future__ import annotations

import io
import re
from pathlib import Path

from nsprof.reports.names import short_kernel_name
from nsprof.reports.ncu_cells import (
    ID_PATTERN,
    MISSING,
    csv_engine,
    detect_decimal_mark,
    raw_columns,
    scale,
    small_int,
)

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
        elif cell.strip() in MISSING:
            values.append(float("nan"))
            missing += 1
        else:
            return None
    if problems is not None:
        problems["missing"] = problems.get("missing", 0) + missing
    return values


def raw_small(body: bytes, columns: list[str], path: Path, domain, decimal):
    """ncu_csv's raw columns (as lists) and problems for a small raw page of plain numbers, or None
    for pandas' column path to read it: the same answers, without pandas' cost per column."""
    import numpy as np

    named, wanted = raw_columns(columns)
    duration, cycles, clock = named["duration"], named["cycles"], named["clock"]
    if duration is None:
        return None
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
        **_small_nvtx(cells, named["push_pop"], named["start_end"], n, domain),
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
    factor = scale("duration", units[duration], path)
    out["duration_ns"] = [v * factor for v in numbers["duration_ns"]]
    for key, column, kind in (("cycles", cycles, "cycles"), ("clock_hz", clock, "clock")):
        if column:
            factor = scale(kind, units[column], path)
            out[key] = [v * factor for v in numbers[key]]
    return out, problems


def _small_cells(body: bytes, columns: list[str], wanted: list[str]):
    """The `wanted` columns' cells (as lists), their units and the row count, or None when
    the page has no rows or an ID that is not plain."""
    rows = _table_rows(body, columns, wanted)
    if not rows:
        return None  # no rows: the column path says so
    at = {c: i for i, c in enumerate(wanted)}
    units = {c: "" for c in wanted}
    if rows[0][0].strip() == "":  # the units row
        units = dict(zip(wanted, rows[0]))
        rows = rows[1:]
    rows = [r for r in rows if re.fullmatch(ID_PATTERN, r[0].strip())]
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
    """A pid, device or stream column as ints (None where a cell holds none)."""
    if values is None:
        return [None] * n
    mapping = {raw: small_int(raw) for raw in dict.fromkeys(values)}
    return [mapping[v] for v in values]
