"""`ncu --csv` output (`--page raw` and `--page details`) -> the tidy table.

raw:     one header row, one units row, then one row per profiled workload.
details: long format, one row per (workload, section, metric) with unit and value.
What the cells mean (metric names, units, the locale's numbers) is in nsprof.reports.ncu_cells;
a small plain raw page is read without pandas by nsprof.reports.ncu_csv_small.
"""

from __future__ import annotations

import io
from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.checks import blank_impossible, one_line, read_head
from nsprof.reports.names import short_kernel_name
from nsprof.reports.ncu_cells import (
    CLOCK_METRICS,
    CYCLES_METRICS,
    DURATION_METRICS,
    ID_PATTERN,
    csv_engine,
    detect_decimal_mark,
    duration_warning,
    nvtx_columns,
    pick,
    raw_columns,
    scale,
    small_int,
    to_numbers,
)
from nsprof.reports.ncu_csv_small import raw_small
from nsprof.reports.nvtx_cells import parse_csv_columns
from nsprof.reports.signatures import UTF16_BOMS, find_header
from nsprof.schema import column_list, make_frame, tidy_rows


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
        small = raw_small(body, columns, path, domain, decimal)
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
    mapping = {raw: small_int(str(raw)) for raw in values.unique()}
    return values.map({raw: pd.NA if v is None else v for raw, v in mapping.items()}).astype("Int64")


def _raw(body: bytes, columns: list[str], path: Path, domain, decimal):
    import pandas as pd

    named, usecols = raw_columns(columns)
    duration, cycles, clock = named["duration"], named["cycles"], named["clock"]
    push_pop, start_end = named["push_pop"], named["start_end"]
    if duration is None:
        raise ReportError(
            f"{path.name}: ncu CSV has no gpu__time_duration column; profile with "
            "--metrics gpu__time_duration.sum (nsprof's drivers do)"
        )
    data = _read_columns(body, usecols, path)
    if data.empty:
        raise ReportError(f"{path.name}: ncu CSV holds no profiled kernels")
    units = data.iloc[0]
    if str(units["ID"]).strip() == "":  # the units row
        data = data.iloc[1:].reset_index(drop=True)
    else:
        units = pd.Series({c: "" for c in data.columns})
    data = data[data["ID"].str.strip().str.fullmatch(ID_PATTERN, na=False)].reset_index(drop=True)
    if data.empty:
        raise ReportError(f"{path.name}: ncu CSV holds no profiled kernels")
    metric_cols = [c for c in (duration, cycles, clock) if c]
    # One decimal mark for the file, from the metric columns the units row names.
    mark = decimal or detect_decimal_mark([v for c in metric_cols for v in data[c].tolist()[:2000]])
    out = _identity(data, push_pop, start_end, domain)
    problems: dict = {}
    out["duration_ns"] = to_numbers(data[duration], mark, problems) * scale("duration", units[duration], path)
    for key, column, kind in (("cycles", cycles, "cycles"), ("clock_hz", clock, "clock")):
        if column:
            out[key] = to_numbers(data[column], mark) * scale(kind, units[column], path)
    return pd.DataFrame(out), problems


def _details(body: bytes, columns: list[str], path: Path, domain, decimal):
    import pandas as pd

    push_pop, start_end = nvtx_columns(columns)
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
    data = data[data["ID"].str.strip().str.fullmatch(ID_PATTERN, na=False)]
    names = set(data["Metric Name"].unique())
    duration = pick(names, DURATION_METRICS)
    if duration is None:
        raise ReportError(
            f"{path.name}: ncu details CSV has no duration metric; profile with "
            "--metrics gpu__time_duration.sum or --section SpeedOfLight"
        )
    cycles, clock = pick(names, CYCLES_METRICS), pick(names, CLOCK_METRICS)
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
        factors = rows["Metric Unit"].map(lambda u, kind=kind: scale(kind, u, path))
        numbers = to_numbers(rows["Metric Value"], mark, problems if key == "duration_ns" else None)
        values = (numbers * factors.astype("float64")).tolist()
        by_id = dict(zip(pd.to_numeric(rows["ID"]).tolist(), values))
        out[key] = [by_id.get(i) for i in out["launch_id"].tolist()]
    # A workload without a duration row has no duration either: count what is empty at the end.
    problems["missing"] = int(out["duration_ns"].isna().sum()) - problems.get("unreadable", 0)
    return out, problems
