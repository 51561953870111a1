"""The one tidy table: one row per observed kernel execution (or whole-graph workload).

Every parser returns a pandas DataFrame with exactly COLUMNS, in this order, with these
dtypes. Everything downstream (analyze, profile, validate, tune) consumes it.
"""

from __future__ import annotations

import re

# name -> pandas dtype. Nullable dtypes so that "not known" stays distinct from zero.
COLUMN_DTYPES: dict[str, str] = {
    "source": "string[python]",  # ncu | nsys | event | cupti | graph
    "range": "string[python]",  # innermost NVTX range name holding the launch, or <NA>
    "domain": "string[python]",  # NVTX domain of `range` ("<default domain>" for the default one)
    "config_id": "Int64",  # from nsprof's own range names (cfg<id>.<mode>.r<rep>), else <NA>
    "mode": "string[python]",  # direct | graph | <NA> when the report cannot tell
    "rep": "Int64",
    "kernel": "string[python]",  # short function name, for display; "graph" for a graph workload
    # The full (demangled) name where the report has it: what tells kernels apart, e.g. the
    # many torch kernels called vectorized_elementwise_kernel. Rows group by it (by `kernel`
    # where it is <NA>). Tools demangle differently: ncu's and nsys's full names of one kernel
    # need not be equal.
    "kernel_full": "string[python]",
    "duration_ns": "float64",
    "cycles": "float64",  # ncu gpc__cycles_elapsed.max
    "clock_hz": "float64",  # ncu gpc__cycles_elapsed.avg.per_second
    "graph_node": "Int64",  # nsys graphNodeId: the kernel ran as a node of a CUDA graph
    "workload": "string[python]",  # kernel | graph (ncu --graph-profiling graph)
    "clock_control": "string[python]",  # ncu --clock-control (base | none), "none" for nsys
    "cache_control": "string[python]",  # ncu --cache-control (all | none), "none" for nsys
    "start_ns": "Int64",  # nsys GPU start timestamp; <NA> for ncu
    "launch_id": "Int64",  # ncu result ID / nsys correlationId
    "pid": "Int64",
    "tid": "Int64",  # launching thread (nsys globalTid) or ncu's thread id
    "device": "Int64",
    "stream": "Int64",
    "nvtx_path": "string[python]",  # every open range: "domain@outer/inner;domain2@..."
    "error": "string[python]",  # a failed config is a row too: duration <NA>, the reason here
}
COLUMNS: list[str] = list(COLUMN_DTYPES)

DEFAULT_DOMAIN = "<default domain>"
NSPROF_DOMAIN = "nsprof"
MODES = ("direct", "graph")

_RANGE_RE = re.compile(r"^cfg(?P<config>\d+)\.(?P<mode>direct|graph)\.r(?P<rep>\d+)$")


def range_name(config_id: int, mode: str, rep: int) -> str:
    """nsprof's range name for one measurement; avoids '/', ',' and ':' (ncu filter/CSV syntax)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    return f"cfg{config_id}.{mode}.r{rep}"


def parse_range_name(name: str | None) -> tuple[int, str, int] | None:
    """(config_id, mode, rep) for an nsprof range name, else None."""
    if not name:
        return None
    match = _RANGE_RE.match(name)
    if not match:
        return None
    return int(match["config"]), match["mode"], int(match["rep"])


def make_frame(rows: list[dict] | dict[str, list]):
    """Build a tidy DataFrame from row dicts (or columns), filling what rows lack.

    Fills config_id/mode/rep from nsprof range names where the rows do not set them, and
    casts every column to its dtype.
    """
    import pandas as pd

    frame = pd.DataFrame(rows)
    for column, dtype in COLUMN_DTYPES.items():
        if column not in frame.columns:
            empty = float("nan") if dtype == "float64" else pd.NA
            frame[column] = pd.Series([empty] * len(frame), index=frame.index, dtype=dtype)
        elif dtype == "float64" and frame[column].dtype == object:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame = frame[COLUMNS]
    if len(frame) and frame["range"].notna().any():
        # Parse each distinct range name once; reports repeat names many times.
        parsed = {n: parse_range_name(n) for n in frame["range"].dropna().unique() if isinstance(n, str)}
        parsed = {n: p for n, p in parsed.items() if p}
        for position, column in enumerate(("config_id", "mode", "rep")):
            if not parsed:
                break
            from_name = frame["range"].map({n: p[position] for n, p in parsed.items()})
            if frame[column].isna().all():
                frame[column] = from_name
            else:
                frame[column] = frame[column].astype(object).where(frame[column].notna(), from_name)
    return frame.astype(COLUMN_DTYPES)
