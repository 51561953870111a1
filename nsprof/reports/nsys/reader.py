"""nsys SQLite export -> the tidy table (nsprof.schema): one row per CUDA kernel.

Tables used (schema 3.20.3, nsys 2025.3; columns drift between releases, so every optional
column is looked up with ``PRAGMA table_info`` and read as NA when absent):

- ``CUPTI_ACTIVITY_KIND_KERNEL``: GPU start/end (ns), ``shortName``/``demangledName`` ->
  ``StringIds``, ``correlationId``, ``graphNodeId`` (set when the kernel ran as a node of a
  replayed CUDA graph traced with ``--cuda-graph-trace=node``), ``globalPid``.
- ``CUPTI_ACTIVITY_KIND_RUNTIME``: the CPU-side API calls (launches.py ties kernels to them).
  The table also holds every other API call (memcpy, sync, ...); only launch calls are read.
- ``NVTX_EVENTS``: the NVTX ranges (nvtx.py reads them and attributes launches to them).
- ``META_DATA_EXPORT``: export schema and nsys versions, kept in ``frame.attrs``.

The read, in steps: survey the export (tables, columns, strings), read the NVTX, runtime
and kernel tables in parallel, put kernels in GPU start order, link each kernel to its
launching call (and so to its NVTX ranges, thread and process), name kernels and ranges,
build the frame. ``read_nsys_rep`` runs ``nsys export`` first (convert.py).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nsprof.errors import ReportError
from nsprof.reports.checks import blank_impossible
from nsprof.reports.nsys.frame import build_frame, constant_strings, int_array, string_array
from nsprof.reports.nsys.launches import match_launches
from nsprof.reports.nsys.nvtx import NvtxRanges, attribute_nvtx, read_nvtx_ranges
from nsprof.reports.nsys.sqlite import (
    ID_BITS,
    ID_MASK,
    KERNEL_TABLE,
    META_TABLE,
    NULL,
    NVTX_TABLE,
    RUNTIME_TABLE,
    STRINGS_TABLE,
    as_text,
    check_sqlite_file,
    connect,
    lookup_strings,
    read_int_columns,
    read_strings,
    sqlite_errors_reported,
    submit_int_columns,
    table_columns,
    table_names,
)
from nsprof.schema import parse_range_name

if TYPE_CHECKING:
    import pandas as pd

_RUNTIME_EXPRS = ["correlationId", "globalTid", "start"]


# --- public API ----------------------------------------------------------------------------


def read_nsys_sqlite(
    path: str | os.PathLike,
    *,
    domain: str | None = None,
    clock_control: str | None = None,
    cache_control: str | None = None,
) -> pd.DataFrame:
    """One row per CUDA kernel of an nsys SQLite export (in GPU start order).

    domain: attribute kernels only to ranges of this NVTX domain ("<default domain>" for
    the default one); nvtx_path still lists every range holding the launch.
    clock_control / cache_control: labels for the conditions of the run; nsys neither
    locks clocks nor flushes caches, so both default to "none".
    """
    path = Path(path)
    check_sqlite_file(path)
    with sqlite_errors_reported(path):
        return _read(path, domain, clock_control or "none", cache_control or "none")


def read_nsys_rep(
    path: str | os.PathLike, *, out_dir: str | os.PathLike | None = None, **kwargs
) -> pd.DataFrame:
    """Export an .nsys-rep to SQLite (export_nsys_rep), then read_nsys_sqlite(**kwargs).

    Without out_dir the export goes to a temporary folder, removed after the read. The launch
    configurations (nsprof.reports.launch_config) come in frame.attrs["launch_configs"].
    """
    import shutil

    from nsprof.reports.launch_config import read_launch_configs
    from nsprof.reports.nsys.convert import export_nsys_rep

    export = export_nsys_rep(path, out_dir=out_dir)
    try:
        frame = read_nsys_sqlite(export, **kwargs)
        # read while the export exists (analyze --by kernel's grid, block, registers, shared memory)
        frame.attrs["launch_configs"] = read_launch_configs(export, "nsys-sqlite")
        return frame
    except ReportError as exc:  # name the user's report, not a temporary file
        raise ReportError(str(exc).replace(str(export), f"{os.fspath(path)} (its SQLite export)")) from None
    finally:
        if out_dir is None:
            shutil.rmtree(export.parent, ignore_errors=True)


# --- the steps -----------------------------------------------------------------------------


def _read(path: Path, domain: str | None, clock_control: str, cache_control: str):
    export = _survey(path)
    ranges, calls, kernels = _read_tables(path, export, domain)
    kernels = kernels.in_start_order()
    launch = _link_launches(path, export, kernels, calls, ranges, domain)
    pid, tid = _process_and_thread(kernels.global_pid, launch.thread)
    names = _kernel_names(kernels, export)
    labels, named_mode = _range_labels(launch.inner, ranges)
    frame = build_frame(
        {
            "source": constant_strings("nsys", kernels.n),
            **labels,
            "mode": _modes(kernels.graph_node, named_mode),
            **names,
            "duration_ns": _durations(kernels),
            "cycles": np.full(kernels.n, np.nan),
            "clock_hz": np.full(kernels.n, np.nan),
            "graph_node": int_array(kernels.graph_node),
            "workload": constant_strings("kernel", kernels.n),
            "clock_control": constant_strings(clock_control, kernels.n),
            "cache_control": constant_strings(cache_control, kernels.n),
            "start_ns": int_array(kernels.start_ns),
            "launch_id": int_array(kernels.corr),
            "pid": int_array(pid),
            "tid": int_array(tid),
            "device": int_array(kernels.device),
            "stream": int_array(kernels.stream),
            "nvtx_path": string_array(launch.nvtx_path, launch.nvtx_path == None),  # noqa: E711
        },
        kernels.n,
    )
    frame.attrs["warnings"] = _gaps(export) + blank_impossible(frame, ("duration_ns",))
    frame.attrs["nsys_schema_version"] = export.meta.get("EXPORT_SCHEMA_VERSION")
    frame.attrs["nsys_version"] = export.meta.get("EXPORT_PRODUCT_VERSION")
    return frame


@dataclass
class _Export:
    """What an export holds: its tables, their columns, StringIds and META_DATA_EXPORT."""

    tables: set[str]
    kernel_columns: set[str]
    runtime_columns: set[str]
    nvtx_columns: set[str]
    strings_columns: set[str]
    strings: dict[int, str]
    meta: dict[str, str | None]

    def kernel_column(self, name: str) -> str:
        return name if name in self.kernel_columns else "NULL"

    @property
    def short_names(self) -> bool:
        # shortName is the base name; older exports may only have demangledName.
        return "shortName" in self.kernel_columns

    @property
    def full_name_column(self) -> str:
        # Rows are keyed by the full name (template arguments tell apart e.g. the dozen torch
        # kernels that share the short name vectorized_elementwise_kernel); the short name is
        # for display. Older exports may lack either column.
        return next(
            (c for c in ("demangledName", "mangledName", "shortName") if c in self.kernel_columns), "NULL"
        )

    @property
    def has_pid(self) -> bool:
        return "globalPid" in self.kernel_columns

    @property
    def has_runtime(self) -> bool:
        return set(_RUNTIME_EXPRS) <= self.runtime_columns

    @property
    def launch_filter(self) -> str:
        # Only launch calls (cudaLaunchKernel*, cuLaunchKernel*, cudaGraphLaunch, ...) can own
        # a kernel; the runtime table also holds every memcpy, sync, event... Kernels that find
        # no launch row are matched against the whole table afterwards.
        if "nameId" in self.runtime_columns and {"id", "value"} <= self.strings_columns:
            return f"nameId IN (SELECT id FROM {STRINGS_TABLE} WHERE value GLOB '*Launch*')"
        return ""


def _survey(path: Path) -> _Export:
    """The export's tables and columns, strings and metadata; ReportError when it has no
    kernels to read."""
    with closing(connect(path)) as conn:
        tables = table_names(conn)
        if KERNEL_TABLE not in tables:
            raise ReportError(
                f"{path}: no CUDA kernel table ({KERNEL_TABLE}); was nsys run with"
                " `-t cuda` and did the program launch kernels?"
            )
        kernel_columns = table_columns(conn, KERNEL_TABLE)
        if not {"start", "end"} <= kernel_columns:
            raise ReportError(f"{path}: {KERNEL_TABLE} has no start/end columns")
        if conn.execute(f"SELECT 1 FROM {KERNEL_TABLE} LIMIT 1").fetchone() is None:
            raise ReportError(
                f"{path}: the CUDA kernel table has no rows; did a kernel run while nsys traced CUDA?"
            )
        meta: dict[str, str | None] = {}
        if META_TABLE in tables and {"name", "value"} <= table_columns(conn, META_TABLE):
            meta = {
                name: as_text(value) for name, value in conn.execute(f"SELECT name, value FROM {META_TABLE}")
            }

        def columns_of(table: str) -> set[str]:
            return table_columns(conn, table) if table in tables else set()

        strings_columns = columns_of(STRINGS_TABLE)
        strings = read_strings(conn, strings_columns)
        return _Export(
            tables=tables,
            kernel_columns=kernel_columns,
            runtime_columns=columns_of(RUNTIME_TABLE),
            nvtx_columns=columns_of(NVTX_TABLE),
            strings_columns=strings_columns,
            strings=strings,
            meta=meta,
        )


def _gaps(export: _Export) -> list[str]:
    """One line per table the export lacks (or lacks the columns of), and what that costs."""
    gaps = []

    def lacks(table: str, columns: set[str], needed: set[str]) -> str:
        if table not in export.tables:
            return f"no {table} table"
        return f"{table} lacks column(s) {', '.join(sorted(needed - columns))}"

    if not {"start", "eventType"} <= export.nvtx_columns:
        gaps.append(
            f"{lacks(NVTX_TABLE, export.nvtx_columns, {'start', 'eventType'})} (nsys run without -t nvtx?):"
            " no kernel can be given an NVTX range; every kernel is '(no range)'"
        )
    if not export.has_runtime:
        gaps.append(
            f"{lacks(RUNTIME_TABLE, export.runtime_columns, set(_RUNTIME_EXPRS))}"
            " (nsys run without -t cuda?): kernels cannot be tied to the calls that launched"
            " them, so every kernel is '(no range)' and its thread is unknown"
        )
    if not {"id", "value"} <= export.strings_columns:
        gaps.append(
            f"{lacks(STRINGS_TABLE, export.strings_columns, {'id', 'value'})}: kernel names are unknown"
            " (shown as '?') and NVTX ranges named by registered strings have no name"
        )
    return gaps


@dataclass
class _Kernels:
    """The kernel table's integer columns, one entry per kernel (NULL where unknown)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    corr: np.ndarray  # correlationId
    name_id: np.ndarray  # StringIds id of the display name
    full_id: np.ndarray  # StringIds id of the full name
    device: np.ndarray
    stream: np.ndarray
    global_pid: np.ndarray
    graph_node: np.ndarray

    @property
    def n(self) -> int:
        return len(self.start_ns)

    def in_start_order(self) -> _Kernels:
        """Rows in GPU start order (stable: table order among equal starts)."""
        start = self.start_ns
        if len(start) < 2 or not (start[1:] < start[:-1]).any():
            return self
        order = np.argsort(start, kind="stable")
        return _Kernels(**{field.name: getattr(self, field.name)[order] for field in fields(self)})


@dataclass
class _Calls:
    """Launch calls of the runtime table, and the NVTX ranges holding each."""

    corr: np.ndarray
    thread: np.ndarray  # globalTid
    start: np.ndarray
    inner: np.ndarray  # index of the innermost range (of the wanted domain) or -1
    nvtx_path: np.ndarray  # object: the path of every range holding the call, or None


def _read_tables(
    path: Path, export: _Export, domain: str | None
) -> tuple[NvtxRanges | None, _Calls, _Kernels]:
    """NVTX ranges, launch calls (attributed to the ranges) and kernels, read in parallel.

    Independent reads in parallel threads (sqlite3 drops the GIL while SQLite works); the
    small NVTX and runtime reads go first so that attributing launches to ranges overlaps
    the big kernel-table reads.
    """
    column = export.kernel_column
    name_column = "shortName" if export.short_names else export.full_name_column
    # deviceId and a CUPTI streamId (uint32) travel as one value: one text column less.
    placement = f"({column('deviceId')} << 32) | {column('streamId')}"
    empty = np.empty(0, np.int64)
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        nvtx = pool.submit(read_nvtx_ranges, path, export.strings)
        runtime = (
            submit_int_columns(pool, path, RUNTIME_TABLE, _RUNTIME_EXPRS, export.launch_filter)
            if export.has_runtime
            else lambda: [empty, empty, empty]
        )
        kernels = submit_int_columns(
            pool,
            path,
            KERNEL_TABLE,
            [
                "start",
                "end",
                column("correlationId"),
                name_column,
                export.full_name_column,
                placement,
                column("globalPid"),
                column("graphNodeId"),
            ],
        )
        ranges = nvtx.result()
        rt_corr, rt_thread, rt_start = runtime()
        rt_inner, rt_path = attribute_nvtx(rt_start, rt_thread, ranges, domain)
        start_ns, end_ns, corr, name_id, full_id, packed, global_pid, graph_node = kernels()
    calls = _Calls(corr=rt_corr, thread=rt_thread, start=rt_start, inner=rt_inner, nvtx_path=rt_path)
    return (
        ranges,
        calls,
        _Kernels(
            start_ns=start_ns,
            end_ns=end_ns,
            corr=corr,
            name_id=name_id,
            full_id=full_id,
            # deviceId and streamId came packed in one value (NA both when either is NULL).
            device=np.where(packed != NULL, packed >> 32, NULL),
            stream=np.where(packed != NULL, packed & 0xFFFFFFFF, NULL),
            global_pid=global_pid,
            graph_node=graph_node,
        ),
    )


@dataclass
class _Launch:
    """Per kernel: its launching thread, innermost NVTX range and NVTX path."""

    thread: np.ndarray  # globalTid, NULL when no launch call was found
    inner: np.ndarray  # index into the ranges, or -1
    nvtx_path: np.ndarray  # object, None where no range holds the launch


def _link_launches(
    path: Path,
    export: _Export,
    kernels: _Kernels,
    calls: _Calls,
    ranges: NvtxRanges | None,
    domain: str | None,
) -> _Launch:
    """Each kernel's launch call (same process and correlationId) and what that call tells."""
    n = kernels.n
    known_pid = kernels.global_pid != NULL
    kernel_process = np.where(known_pid, kernels.global_pid >> ID_BITS, NULL) if export.has_pid else None
    runtime_row = match_launches(kernels.corr, kernel_process, calls.corr, calls.thread >> ID_BITS)
    launched = runtime_row >= 0
    launch = _Launch(
        thread=np.full(n, NULL, dtype=np.int64),
        inner=np.full(n, -1, dtype=np.int64),
        nvtx_path=np.empty(n, dtype=object),
    )
    rows = runtime_row[launched]
    launch.thread[launched] = calls.thread[rows]
    launch.inner[launched] = calls.inner[rows]
    launch.nvtx_path[launched] = calls.nvtx_path[rows]
    unmatched = np.flatnonzero(~launched & (kernels.corr != NULL))
    if export.has_runtime and export.launch_filter and len(unmatched):
        # A kernel launched by a call without "Launch" in its name: use the whole table.
        all_corr, all_thread, all_start = read_int_columns(path, RUNTIME_TABLE, _RUNTIME_EXPRS)
        rows = match_launches(
            kernels.corr[unmatched],
            None if kernel_process is None else kernel_process[unmatched],
            all_corr,
            all_thread >> ID_BITS,
        )
        found = rows >= 0
        unmatched, rows = unmatched[found], rows[found]
        launch.thread[unmatched] = all_thread[rows]
        launch.inner[unmatched], launch.nvtx_path[unmatched] = attribute_nvtx(
            all_start[rows], all_thread[rows], ranges, domain
        )
    return launch


def _process_and_thread(global_pid: np.ndarray, launch_thread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pid from globalPid, else from the launching thread's globalTid; tid from the latter."""
    known_pid = global_pid != NULL
    thread_known = launch_thread != NULL
    pid = np.where(known_pid, (global_pid >> ID_BITS) & ID_MASK, NULL)
    from_thread = ~known_pid & thread_known  # no globalPid: the launching thread's process
    pid[from_thread] = (launch_thread[from_thread] >> ID_BITS) & ID_MASK
    tid = np.where(thread_known, launch_thread & ID_MASK, NULL)
    return pid, tid


def _kernel_names(kernels: _Kernels, export: _Export) -> dict:
    """The "kernel" (short, for display) and "kernel_full" columns."""
    kernel_names, name_missing = lookup_strings(kernels.name_id, export.strings)
    full_names, full_missing = lookup_strings(kernels.full_id, export.strings)
    if not export.short_names and not name_missing.all():
        from nsprof.reports.names import short_kernel_name

        distinct, inverse = np.unique(kernel_names[~name_missing], return_inverse=True)
        shortened = np.array([short_kernel_name(s) for s in distinct], dtype=object)
        kernel_names[~name_missing] = shortened[inverse.reshape(-1)]
    return {
        "kernel": string_array(kernel_names, name_missing),
        "kernel_full": string_array(full_names, full_missing),
    }


def _range_labels(inner: np.ndarray, ranges: NvtxRanges | None) -> tuple[dict, np.ndarray]:
    """The "range", "domain", "config_id", "rep" and "shape" columns from each kernel's innermost
    range, and the mode its name says (None where it says none)."""
    n = len(inner)
    held = inner >= 0
    range_name = np.empty(n, dtype=object)
    range_domain = np.empty(n, dtype=object)
    config_id = np.full(n, NULL, dtype=np.int64)
    rep = np.full(n, NULL, dtype=np.int64)
    shape = np.full(n, NULL, dtype=np.int64)
    named_mode = np.full(n, None, dtype=object)
    if held.any():
        index = inner[held]
        range_name[held] = ranges.name[index]
        range_domain[held] = np.array(ranges.domain_names, dtype=object)[ranges.domain[index]]
        # config_id and rep from nsprof's range names (schema.parse_range_name), per name.
        parsed = [parse_range_name(name) for name in ranges.distinct_names]
        code = ranges.name_code[index]
        config_id[held] = np.array([p[0] if p else NULL for p in parsed], np.int64)[code]
        rep[held] = np.array([p[2] if p else NULL for p in parsed], np.int64)[code]
        shape[held] = np.array([p.shape if p and p.shape is not None else NULL for p in parsed], np.int64)[
            code
        ]
        named_mode[held] = np.array([p[1] if p else None for p in parsed], dtype=object)[code]
    columns = {
        "range": string_array(range_name, ~held),
        "domain": string_array(range_domain, ~held),
        "config_id": int_array(config_id),
        "rep": int_array(rep),
        "shape": int_array(shape),
    }
    return columns, named_mode


def _modes(graph_node: np.ndarray, named_mode: np.ndarray):
    """mode: what nsprof's range says was measured (as the ncu parsers do); elsewhere how the
    kernel ran: a graph node id means it ran as a node of a replayed graph. (A "direct" call
    may replay a graph inside, e.g. torch.compile's reduce-overhead: the range wins.)"""
    mode = np.array(["direct", "graph"], dtype=object)[(graph_node != NULL).view(np.int8)]
    has_name = named_mode != None  # noqa: E711 - elementwise on an object array
    mode[has_name] = named_mode[has_name]
    return string_array(mode)


def _durations(kernels: _Kernels) -> np.ndarray:
    """end - start in ns; NaN for a kernel without start or end (NULL in a damaged export)."""
    duration_ns = (kernels.end_ns - kernels.start_ns).astype(np.float64)
    duration_ns[(kernels.start_ns == NULL) | (kernels.end_ns == NULL)] = np.nan
    return duration_ns
