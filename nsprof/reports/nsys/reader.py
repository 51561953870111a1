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
build the frame (survey.py: what the export holds; labels.py: each kernel's columns).
``read_nsys_rep`` runs ``nsys export`` first (convert.py).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nsprof.errors import ReportError
from nsprof.reports.checks import blank_impossible
from nsprof.reports.nsys.frame import build_frame, constant_strings, int_array, string_array
from nsprof.reports.nsys.labels import durations, kernel_names, modes, process_and_thread, range_labels
from nsprof.reports.nsys.launches import match_launches
from nsprof.reports.nsys.nvtx import NvtxRanges, attribute_nvtx, read_nvtx_ranges
from nsprof.reports.nsys.sqlite import (
    ID_BITS,
    KERNEL_TABLE,
    NULL,
    RUNTIME_TABLE,
    check_sqlite_file,
    read_int_columns,
    sqlite_errors_reported,
    submit_int_columns,
)
from nsprof.reports.nsys.survey import RUNTIME_EXPRS, Export, gaps, survey

if TYPE_CHECKING:
    import pandas as pd


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
    export = survey(path)
    ranges, calls, kernels = _read_tables(path, export, domain)
    kernels = kernels.in_start_order()
    launch = _link_launches(path, export, kernels, calls, ranges, domain)
    pid, tid = process_and_thread(kernels.global_pid, launch.thread)
    names = kernel_names(kernels.name_id, kernels.full_id, export)
    labels, named_mode = range_labels(launch.inner, ranges)
    frame = build_frame(
        {
            "source": constant_strings("nsys", kernels.n),
            **labels,
            "mode": modes(kernels.graph_node, named_mode),
            **names,
            "duration_ns": durations(kernels.start_ns, kernels.end_ns),
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
    frame.attrs["warnings"] = gaps(export) + blank_impossible(frame, ("duration_ns",))
    frame.attrs["nsys_schema_version"] = export.meta.get("EXPORT_SCHEMA_VERSION")
    frame.attrs["nsys_version"] = export.meta.get("EXPORT_PRODUCT_VERSION")
    return frame


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
    path: Path, export: Export, domain: str | None
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
            submit_int_columns(pool, path, RUNTIME_TABLE, RUNTIME_EXPRS, export.launch_filter)
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
    export: Export,
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
        all_corr, all_thread, all_start = read_int_columns(path, RUNTIME_TABLE, RUNTIME_EXPRS)
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
