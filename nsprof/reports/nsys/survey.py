"""What an nsys SQLite export holds (`survey`): its tables and their columns (which drift between
nsys releases), StringIds and META_DATA_EXPORT; and one warning line per table it lacks (`gaps`)."""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.nsys.sqlite import (
    KERNEL_TABLE,
    META_TABLE,
    NVTX_TABLE,
    RUNTIME_TABLE,
    STRINGS_TABLE,
    as_text,
    connect,
    read_strings,
    table_columns,
    table_names,
)

RUNTIME_EXPRS = ["correlationId", "globalTid", "start"]


@dataclass
class Export:
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
        return set(RUNTIME_EXPRS) <= self.runtime_columns

    @property
    def launch_filter(self) -> str:
        # Only launch calls (cudaLaunchKernel*, cuLaunchKernel*, cudaGraphLaunch, ...) can own
        # a kernel; the runtime table also holds every memcpy, sync, event... Kernels that find
        # no launch row are matched against the whole table afterwards.
        if "nameId" in self.runtime_columns and {"id", "value"} <= self.strings_columns:
            return f"nameId IN (SELECT id FROM {STRINGS_TABLE} WHERE value GLOB '*Launch*')"
        return ""


def survey(path: Path) -> Export:
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
        return Export(
            tables=tables,
            kernel_columns=kernel_columns,
            runtime_columns=columns_of(RUNTIME_TABLE),
            nvtx_columns=columns_of(NVTX_TABLE),
            strings_columns=strings_columns,
            strings=strings,
            meta=meta,
        )


def gaps(export: Export) -> list[str]:
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
    elif "globalTid" not in export.nvtx_columns:
        gaps.append(
            f"{lacks(NVTX_TABLE, export.nvtx_columns, {'globalTid'})}: a range cannot be tied to the thread"
            " that launched a kernel; every kernel is '(no range)'"
        )
    if not export.has_runtime:
        gaps.append(
            f"{lacks(RUNTIME_TABLE, export.runtime_columns, set(RUNTIME_EXPRS))}"
            " (nsys run without -t cuda?): kernels cannot be tied to the calls that launched"
            " them, so every kernel is '(no range)' and its thread is unknown"
        )
    if not {"id", "value"} <= export.strings_columns:
        gaps.append(
            f"{lacks(STRINGS_TABLE, export.strings_columns, {'id', 'value'})}: kernel names are unknown"
            " (shown as '?') and NVTX ranges named by registered strings have no name"
        )
    return gaps
