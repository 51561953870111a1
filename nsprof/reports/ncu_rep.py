"""`.ncu-rep` files, read with NVIDIA's `ncu_report` module (the `ncu-report` wheel).

Reads kernel workloads and whole-graph workloads (`--graph-profiling graph`, workload type
GRAPH), their NVTX state (push/pop stacks and start/end ranges per domain), duration,
cycles and clock. ncu_report loads a garbage file silently with zero ranges, and a cut one
as a smaller report, so the magic bytes, the block layout (block_ends) and the result
count are checked here. What the report's recorded ncu command line says is read by
nsprof.reports.ncu_command.

ncu_report is native code that a corrupt report can crash (fuzzing found inserted bytes
that fail a protobuf CHECK and abort the interpreter), so the report is loaded in a child
process (_ncu_rep_child.py) with a time limit and, when asked, a memory limit; a crash
there is a ReportError here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from nsprof.errors import ReportError, ToolNotFound
from nsprof.reports.checks import blank_impossible, one_line, read_head
from nsprof.reports.launch_config import LAUNCH_METRICS, ncu_rep_launch
from nsprof.reports.ncu_cells import CLOCK_METRICS, CYCLES_METRICS, DURATION_METRICS, L2_HIT_METRICS
from nsprof.reports.ncu_command import recorded_settings
from nsprof.reports.nvtx_cells import NvtxState
from nsprof.reports.signatures import NCU_REP_MAGIC
from nsprof.schema import make_frame, parse_range_name

_WORKLOAD_GRAPH = 3  # IAction.WorkloadType_GRAPH in ncu_report
_INT_METRICS = ("launch__process_id", "launch__device_id", "launch__stream_id")
_METRICS = (
    *DURATION_METRICS,
    *CYCLES_METRICS,
    *CLOCK_METRICS,
    *L2_HIT_METRICS,
    *_INT_METRICS,
    *LAUNCH_METRICS,
)
# Loading a 10 MB report takes well under a second; the limit only catches a loader that
# never returns, so it stays far above any real report's load time.
LOAD_TIMEOUT_S = 600.0


def _ncu_python_dirs() -> list[Path]:
    """`extras/python` folders of installed Nsight Compute versions (they ship ncu_report)."""
    import glob

    from nsprof.host.tools import find_ncu

    dirs: list[Path] = []
    try:
        ncu = find_ncu(required=False)
    except ToolNotFound:  # a bad NSPROF_NCU matters where ncu runs; the globs below may still hit
        ncu = None
    if ncu is not None:
        real = ncu.path.resolve()
        dirs.append(real.parent / "extras" / "python")
        dirs += [
            Path(p)
            for p in sorted(
                glob.glob(str(real.parent.parent / "nsight-compute*" / "extras" / "python")), reverse=True
            )
        ]
    for pattern in (
        "/usr/local/cuda*/nsight-compute*/extras/python",
        "/opt/nvidia/nsight-compute/*/extras/python",
    ):
        dirs += [Path(p) for p in sorted(glob.glob(pattern), reverse=True)]
    return [d for d in dict.fromkeys(dirs) if (d / "ncu_report.py").is_file()]


def ncu_report_folder() -> str:
    """The folder to put on sys.path for `import ncu_report`: the wheel's, else an ncu install's.

    Found without importing ncu_report here (find_spec only locates it).
    """
    import importlib.util

    spec = importlib.util.find_spec("ncu_report")
    if spec is not None and spec.origin:
        origin = Path(spec.origin)
        return str(origin.parent.parent if origin.name == "__init__.py" else origin.parent)
    folders = _ncu_python_dirs()
    if folders:
        return str(folders[0])
    raise ReportError(
        "reading .ncu-rep needs NVIDIA's ncu_report module: pip install ncu-report "
        "(or install Nsight Compute, whose extras/python folder has it)"
    )


def _crash_detail(stderr: str) -> str:
    """The line of the loader's stderr that says why it died (absl 'Check failed', ...)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for marker in ("Check failed", "terminate called", "what():", "Error", "error"):
        for line in lines:
            if marker in line:
                return one_line(line[line.find(marker) :], 160)
    return one_line(lines[-1], 160) if lines else ""


def load_actions(
    path: Path, *, timeout_s: float | None = None, max_memory_bytes: int | None = None
) -> tuple[int, list[dict]]:
    """(number of ranges, one dict per result) of an .ncu-rep, read by ncu_report in a child process.

    Each dict: name, workload_type, metrics {name: value} (those of _METRICS present),
    push_pop and start_end {domain: [range names]}. ReportError when the loader fails,
    crashes, runs past timeout_s (default LOAD_TIMEOUT_S) or past max_memory_bytes.
    """
    import json
    import signal
    import subprocess
    import sys

    folder = ncu_report_folder()
    timeout_s = LOAD_TIMEOUT_S if timeout_s is None else timeout_s
    # -S: no site initialisation (the folder holding ncu_report is passed explicitly).
    argv = [
        sys.executable,
        "-S",
        str(Path(__file__).with_name("_ncu_rep_child.py")),
        str(path),
        folder,
        str(max_memory_bytes or 0),
        json.dumps(list(_METRICS)),
    ]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ReportError(
            f"{path.name}: ncu_report did not finish reading it within {timeout_s:g} s (corrupt report?)"
        ) from None
    except OSError as exc:
        raise ReportError(f"{path.name}: cannot start a process to read it ({exc.strerror})") from None
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        if proc.returncode < 0:
            try:
                how = f"killed by {signal.Signals(-proc.returncode).name}"
            except ValueError:
                how = f"killed by signal {-proc.returncode}"
        else:
            how = f"exit status {proc.returncode}"
        detail = _crash_detail(stderr)
        raise ReportError(
            f"{path.name}: NVIDIA's ncu_report crashed reading it ({how}"
            f"{': ' + detail if detail else ''}); the report is corrupt or truncated"
            f"{_limit_note(max_memory_bytes)}"
        )
    try:
        output = json.loads(proc.stdout)
    except ValueError:
        raise ReportError(
            f"{path.name}: the ncu_report reader gave no result ({_crash_detail(stderr) or 'no output'})"
        ) from None
    if "error" in output:
        raise ReportError(f"{path.name}: {one_line(output['error'])}{_limit_note(max_memory_bytes)}")
    return output["ranges"], output["actions"]


def _limit_note(max_memory_bytes: int | None) -> str:
    # Under a memory limit ncu_report fails in odd ways (std::bad_alloc, or zero results).
    if not max_memory_bytes:
        return ""
    return f", or the loader needed more than its {max_memory_bytes / 2**20:.0f} MiB memory limit"


# The file's layout (the one ncu_report reads): NCU_REP_MAGIC, a little-endian uint32 size
# and that many bytes of file header, then blocks to the end of the file, each a uint32
# size, a BlockHeader protobuf of that size, and a payload whose size is the header's field
# 5 (PayloadSize; fields 1 and 2 count the payload's sources and results). ncu appends one
# block per profiled result, so a cut report ends inside a block: the last block's declared
# size runs past the end of the file. (A cut exactly between two blocks leaves a shorter
# report that is complete in form; nothing in the file tells the two apart.)
_PAYLOAD_SIZE_FIELD = 5


def _varint(data: bytes, index: int) -> tuple[int, int]:
    value = shift = 0
    while index < len(data) and shift < 64:
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, index
    raise ValueError("varint runs past its message")


def _payload_size(header: bytes) -> int:
    """PayloadSize of one BlockHeader protobuf (0 when absent); ValueError when it is not one."""
    index, size = 0, 0
    while index < len(header):
        key, index = _varint(header, index)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, index = _varint(header, index)
            if field == _PAYLOAD_SIZE_FIELD:
                size = value
        elif wire == 2:
            length, index = _varint(header, index)
            index += length
        elif wire in (1, 5):
            index += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
        if index > len(header):
            raise ValueError("field runs past its message")
    return size


def block_ends(path: Path) -> list[int]:
    """The byte offsets where the .ncu-rep's file header and each block end; the last is the
    file's size. ReportError when a block (or the header) runs past the end of the file, or a
    block header is not one: the report was cut while ncu wrote it, or is damaged.

    Reads only the headers (payloads are skipped), so a multi-GB report costs little.
    """
    import struct

    ends: list[int] = []
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        position, what = len(NCU_REP_MAGIC), "file header"
        while True:
            handle.seek(position)
            prefix = handle.read(4)
            if len(prefix) < 4:
                raise _truncated(path, what, position, 4, size)
            (length,) = struct.unpack("<I", prefix)
            if position + 4 + length > size:
                raise _truncated(path, what, position, 4 + length, size)
            header = handle.read(length)
            payload = 0
            if ends:  # a block: its header says how long its payload is
                try:
                    payload = _payload_size(header)
                except ValueError:
                    raise ReportError(
                        f"{path.name}: truncated or damaged .ncu-rep: the header of block "
                        f"{len(ends)} (byte {position:,}) is not readable"
                    ) from None
            end = position + 4 + length + payload
            if end > size:
                raise _truncated(path, what, position, end - position, size)
            ends.append(end)
            if end == size:
                return ends
            position, what = end, f"block {len(ends)}"


def _truncated(path: Path, what: str, position: int, needed: int, size: int) -> ReportError:
    return ReportError(
        f"{path.name}: truncated or damaged .ncu-rep: its {what} at byte {position:,} needs "
        f"{needed:,} bytes, "
        f"the file ends {size - position:,} bytes later (a cut report would silently lose results)"
    )


def _first(metrics: dict, names) -> float | None:
    return next((metrics[name] for name in names if name in metrics), None)


def _int_value(value: float | None) -> int | None:
    # A corrupt report can hold NaN or 1e300 where an id belongs; the table's ints are int64.
    if value is None or not math.isfinite(value) or abs(value) >= 2**63:
        return None
    return int(value)


def read_ncu_rep(
    path,
    *,
    domain: str | None = None,
    clock_control: str | None = None,
    cache_control: str | None = None,
    timeout_s: float | None = None,
    max_memory_bytes: int | None = None,
):
    """Parse an `.ncu-rep` into the tidy table (one row per kernel or graph workload).

    timeout_s / max_memory_bytes bound the child process that runs NVIDIA's loader
    (default: LOAD_TIMEOUT_S, no memory limit).
    """
    path = Path(path)
    head = read_head(path, len(NCU_REP_MAGIC))
    if head != NCU_REP_MAGIC:
        raise ReportError(f"{path.name}: not an Nsight Compute report (bad magic bytes)")
    block_ends(path)  # a cut report loads as a smaller one: refused before the loader runs
    n_ranges, actions = load_actions(path, timeout_s=timeout_s, max_memory_bytes=max_memory_bytes)
    recorded = recorded_settings(path)
    # A label given by the caller (nsprof's own runs know their settings) wins over the file.
    given = {"clock_control": clock_control, "cache_control": cache_control}
    labels_from = {key: "the report's ncu command line" for key in given if not given[key] and recorded[key]}
    clock_control = clock_control or recorded["clock_control"]
    cache_control = cache_control or recorded["cache_control"]
    if n_ranges == 0:
        raise ReportError(
            f"{path.name}: the report holds no results (truncated or corrupt{_limit_note(max_memory_bytes)}?)"
        )
    rows = [_action_row(action, i, domain, clock_control, cache_control) for i, action in enumerate(actions)]
    if not rows:
        raise ReportError(f"{path.name}: the report holds no profiled kernels")
    return _frame(rows, path, labels_from, recorded)


def _action_row(action: dict, launch_id: int, domain, clock_control, cache_control) -> dict:
    """The tidy row of one loaded result (a kernel or a whole-graph workload)."""
    state = NvtxState(push_pop=action["push_pop"], start_end=action["start_end"])
    name, dom = state.innermost(domain)
    is_graph = action["workload_type"] == _WORKLOAD_GRAPH
    metrics = action["metrics"]
    return {
        "source": "ncu",
        "range": name,
        "domain": dom,
        "nvtx_path": state.path(),
        "kernel": action["name"],
        "kernel_full": action.get("full_name"),  # rows group by it; `kernel` is for display
        "workload": "graph" if is_graph else "kernel",
        # nsprof's range name says the mode (a direct-mode launch may replay a graph);
        # outside nsprof's ranges a whole-graph workload is graph mode.
        "mode": None if parse_range_name(name) else ("graph" if is_graph else None),
        "duration_ns": _first(metrics, DURATION_METRICS),
        "cycles": _first(metrics, CYCLES_METRICS),
        "clock_hz": _first(metrics, CLOCK_METRICS),
        "l2_hit_pct": _first(metrics, L2_HIT_METRICS),
        "launch_id": launch_id,
        "pid": _int_value(metrics.get("launch__process_id")),
        "device": _int_value(metrics.get("launch__device_id")),
        "stream": _int_value(metrics.get("launch__stream_id")),
        "launch_config": ncu_rep_launch(metrics),  # not a tidy column: _frame moves it to attrs
        "clock_control": clock_control,
        "cache_control": cache_control,
    }


def _frame(rows: list[dict], path: Path, labels_from: dict, recorded: dict):
    """The tidy table of the rows, checked, with what the report says about itself in attrs."""
    frame = make_frame(rows)
    if frame["duration_ns"].isna().all():
        raise ReportError(
            f"{path.name}: no gpu__time_duration metric in the report; profile with "
            "--metrics gpu__time_duration.sum (nsprof's drivers do)"
        )
    warnings = blank_impossible(frame)
    missing = frame["duration_ns"].isna()
    if missing.any():
        # A truncated report can end with a result whose metrics were never written.
        frame = frame[~missing].reset_index(drop=True)
        warnings.append(f"{int(missing.sum())} result(s) without a duration were skipped (truncated report?)")
    frame.attrs["warnings"] = warnings
    frame.attrs["launch_configs"] = {(row["launch_id"], None): row["launch_config"] for row in rows}
    frame.attrs["labels_from"] = labels_from
    frame.attrs["ncu_command_line"] = recorded["found"]
    if recorded["graph_profiling"] == "graph" or frame["workload"].eq("graph").any():
        frame.attrs["graph_profiling"] = "graph"
    elif recorded["graph_profiling"]:
        frame.attrs["graph_profiling"] = recorded["graph_profiling"]
    return frame
