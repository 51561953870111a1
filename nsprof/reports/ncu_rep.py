"""`.ncu-rep` files, read with NVIDIA's `ncu_report` module (the `ncu-report` wheel).

Reads kernel workloads and whole-graph workloads (`--graph-profiling graph`, workload type
GRAPH), their NVTX state (push/pop stacks and start/end ranges per domain), duration,
cycles and clock. ncu_report loads a garbage file silently with zero ranges, so the magic
bytes and the result count are checked here.
"""

from __future__ import annotations

from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.ncu_csv import CLOCK_METRICS, CYCLES_METRICS, DURATION_METRICS
from nsprof.reports.nvtx_cells import NvtxState
from nsprof.schema import make_frame

NCU_REP_MAGIC = b"NVR\0"
_WORKLOAD_GRAPH = 3  # IAction.WorkloadType_GRAPH in ncu_report


def _ncu_python_dirs() -> list[Path]:
    """`extras/python` folders of installed Nsight Compute versions (they ship ncu_report)."""
    import glob

    from nsprof.drivers.tools import find_ncu

    dirs: list[Path] = []
    ncu = find_ncu(required=False)
    if ncu is not None:
        real = ncu.path.resolve()
        dirs.append(real.parent / "extras" / "python")
        dirs += [Path(p) for p in sorted(glob.glob(str(real.parent.parent / "nsight-compute*" / "extras" / "python")),
                                          reverse=True)]
    for pattern in ("/usr/local/cuda*/nsight-compute*/extras/python", "/opt/nvidia/nsight-compute/*/extras/python"):
        dirs += [Path(p) for p in sorted(glob.glob(pattern), reverse=True)]
    return [d for d in dict.fromkeys(dirs) if (d / "ncu_report.py").is_file()]


def _load_module():
    """NVIDIA's ncu_report: the `ncu-report` wheel, else the copy inside an ncu install."""
    import importlib
    import sys

    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    for folder in _ncu_python_dirs():
        sys.path.append(str(folder))
        try:
            return importlib.import_module("ncu_report")
        except ImportError:
            sys.path.remove(str(folder))
    raise ReportError("reading .ncu-rep needs NVIDIA's ncu_report module: pip install ncu-report "
                      "(or install Nsight Compute, whose extras/python folder has it)")


def _metric(action, names) -> float | None:
    for name in names:
        metric = action.metric_by_name(name)
        if metric is not None:
            return float(metric.as_double())
    return None


def _nvtx_state(action) -> NvtxState:
    state = NvtxState()
    nvtx = action.nvtx_state()
    if nvtx is None:
        return state
    for domain_id in nvtx.domains():
        info = nvtx.domain_by_id(domain_id)
        name = info.name()
        push_pop = list(info.push_pop_ranges())
        start_end = list(info.start_end_ranges())
        if push_pop:
            state.push_pop[name] = push_pop
        if start_end:
            state.start_end[name] = start_end
    return state


def read_ncu_rep(path, *, domain: str | None = None, clock_control: str | None = None,
                 cache_control: str | None = None):
    """Parse an `.ncu-rep` into the tidy table (one row per kernel or graph workload)."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such file")
    with open(path, "rb") as handle:
        head = handle.read(len(NCU_REP_MAGIC))
    if not head:
        raise ReportError(f"{path.name}: empty file")
    if head != NCU_REP_MAGIC:
        raise ReportError(f"{path.name}: not an Nsight Compute report (bad magic bytes)")
    ncu_report = _load_module()
    try:
        context = ncu_report.load_report(str(path))
    except Exception as exc:  # the SWIG layer raises bare RuntimeError/Exception types
        raise ReportError(f"{path.name}: ncu_report could not load it ({exc})") from None
    if context is None or context.num_ranges() == 0:
        raise ReportError(f"{path.name}: the report holds no results (truncated or corrupt?)")
    rows = []
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            action = report_range.action_by_idx(action_index)
            state = _nvtx_state(action)
            name, dom = state.innermost(domain)
            is_graph = action.workload_type() == _WORKLOAD_GRAPH
            pid = _metric(action, ("launch__process_id",))
            rows.append({
                "source": "ncu",
                "range": name,
                "domain": dom,
                "nvtx_path": state.path(),
                "kernel": action.name(),
                "workload": "graph" if is_graph else "kernel",
                "mode": "graph" if is_graph else None,
                "duration_ns": _metric(action, DURATION_METRICS),
                "cycles": _metric(action, CYCLES_METRICS),
                "clock_hz": _metric(action, CLOCK_METRICS),
                "launch_id": len(rows),
                "pid": None if pid is None else int(pid),
                "device": _int_metric(action, "launch__device_id"),
                "stream": _int_metric(action, "launch__stream_id"),
                "clock_control": clock_control,
                "cache_control": cache_control,
            })
    if not rows:
        raise ReportError(f"{path.name}: the report holds no profiled kernels")
    frame = make_frame(rows)
    missing = frame["duration_ns"].isna()
    if missing.all():
        raise ReportError(
            f"{path.name}: no gpu__time_duration metric in the report; profile with "
            "--metrics gpu__time_duration.sum (nsprof's drivers do)"
        )
    warnings = []
    if missing.any():
        # A truncated report can end with a result whose metrics were never written.
        frame = frame[~missing].reset_index(drop=True)
        warnings.append(f"{int(missing.sum())} result(s) without a duration were skipped (truncated report?)")
    frame.attrs["warnings"] = warnings
    return frame


def _int_metric(action, name: str) -> int | None:
    value = _metric(action, (name,))
    return None if value is None else int(value)
