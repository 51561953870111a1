"""Nsight Systems reports: an SQLite export (or an .nsys-rep, exported first) -> the tidy table.

One job a module: sqlite (access to the export: checks, connections, columns, strings,
integer reads, errors), nvtx (NVTX ranges and which ones hold a launch), launches (kernels
-> their launch calls), frame (typed arrays -> the tidy frame), reader (the steps of one
read; read_nsys_sqlite, read_nsys_rep), convert (.qdstrm -> .nsys-rep -> SQLite).

The readers and export_nsys_rep are re-exported here, loaded on first use (numpy and the
readers load only when asked for).
"""

from __future__ import annotations

_LAZY = {
    "read_nsys_sqlite": "nsprof.reports.nsys.reader",
    "read_nsys_rep": "nsprof.reports.nsys.reader",
    "export_nsys_rep": "nsprof.reports.nsys.convert",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nsprof.reports.nsys' has no attribute {name!r}")
