"""The tidy columns an nsys read makes of each kernel from what it read: pid and tid, the kernel's
names, its innermost range's labels (range, domain, config_id, rep, shape), mode, duration."""

from __future__ import annotations

import numpy as np

from nsprof.reports.nsys.frame import int_array, string_array
from nsprof.reports.nsys.nvtx import NvtxRanges
from nsprof.reports.nsys.sqlite import ID_BITS, ID_MASK, NULL, lookup_strings
from nsprof.reports.nsys.survey import Export
from nsprof.schema import parse_range_name


def process_and_thread(global_pid: np.ndarray, launch_thread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pid from globalPid, else from the launching thread's globalTid; tid from the latter."""
    known_pid = global_pid != NULL
    thread_known = launch_thread != NULL
    pid = np.where(known_pid, (global_pid >> ID_BITS) & ID_MASK, NULL)
    from_thread = ~known_pid & thread_known  # no globalPid: the launching thread's process
    pid[from_thread] = (launch_thread[from_thread] >> ID_BITS) & ID_MASK
    tid = np.where(thread_known, launch_thread & ID_MASK, NULL)
    return pid, tid


def kernel_names(name_id: np.ndarray, full_id: np.ndarray, export: Export) -> dict:
    """The "kernel" (short, for display) and "kernel_full" columns, from the kernels' StringIds ids."""
    kernel_names, name_missing = lookup_strings(name_id, export.strings)
    full_names, full_missing = lookup_strings(full_id, export.strings)
    if not export.short_names and not name_missing.all():
        from nsprof.reports.names import short_kernel_name

        distinct, inverse = np.unique(kernel_names[~name_missing], return_inverse=True)
        shortened = np.array([short_kernel_name(s) for s in distinct], dtype=object)
        kernel_names[~name_missing] = shortened[inverse.reshape(-1)]
    # A name the export lacks is keyed by its id, so that different kernels never pool as one "?".
    unnamed = full_missing & (full_id != NULL)
    full_names[unnamed] = [f"? (string id {int(i)})" for i in full_id[unnamed]]
    return {
        "kernel": string_array(kernel_names, name_missing),
        "kernel_full": string_array(full_names, full_missing & ~unnamed),
    }


def range_labels(inner: np.ndarray, ranges: NvtxRanges | None) -> tuple[dict, np.ndarray]:
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


def modes(graph_node: np.ndarray, named_mode: np.ndarray):
    """mode: what nsprof's range says was measured (as the ncu parsers do); elsewhere how the
    kernel ran: a graph node id means it ran as a node of a replayed graph. (A "direct" call
    may replay a graph inside, e.g. torch.compile's reduce-overhead: the range wins.)"""
    mode = np.array(["direct", "graph"], dtype=object)[(graph_node != NULL).view(np.int8)]
    has_name = named_mode != None  # noqa: E711 - elementwise on an object array
    mode[has_name] = named_mode[has_name]
    return string_array(mode)


def durations(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """end - start in ns; NaN for a kernel without start or end (NULL in a damaged export)."""
    duration_ns = (end_ns - start_ns).astype(np.float64)
    duration_ns[(start_ns == NULL) | (end_ns == NULL)] = np.nan
    return duration_ns
