"""CUPTI kernel activity: the GPU's own start/end of exactly the kernels a call launched.

The call's kernels are found by correlation id: the CUDA runtime and driver API records
made on this thread between two CUPTI timestamps taken around the call name the launches;
kernels carrying those ids are summed. A flush before the call is outside that window.
"""

from __future__ import annotations

import threading

from nsprof.errors import NsprofError
from nsprof.timers.base import Flusher


class _Collector:
    def __init__(self) -> None:
        self.records: list = []
        self.lock = threading.Lock()

    def requested(self):
        return 8 * 1024 * 1024, 0

    def completed(self, activities) -> None:
        with self.lock:
            self.records.extend(activities)


_STATE: dict = {}


def _cupti():
    try:
        from cupti import cupti
    except ImportError:
        raise NsprofError("the cupti timer needs cupti-python: pip install 'nsprof[cupti]'") from None
    return cupti


def _start(cupti) -> _Collector:
    collector = _STATE.setdefault("collector", _Collector())
    # Register every time: another CUPTI client in the process (torch.profiler, which
    # TileLang's cupti backend uses) replaces the callbacks, and ours would then get nothing.
    cupti.activity_register_callbacks(collector.requested, collector.completed)
    kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER]
    for kind in kinds:
        cupti.activity_enable(kind)
    _STATE["kinds"] = kinds
    return _STATE["collector"]


def _stop(cupti) -> None:
    cupti.activity_flush_all(1)
    for kind in _STATE.get("kinds", []):
        cupti.activity_disable(kind)


def time_cupti(fn, reps: int, l2: str, calls_per_graph: int = 1) -> tuple[list[float], dict]:
    import torch

    cupti = _cupti()
    flush = Flusher() if l2 == "cold" else None
    collector = _start(cupti)
    windows = []
    try:
        torch.cuda.synchronize()
        for _ in range(reps):
            if flush:
                flush()
            begin = cupti.get_timestamp()
            fn()
            end = cupti.get_timestamp()
            windows.append((begin, end))
            torch.cuda.synchronize()
        _stop(cupti)
    except cupti.cuptiError as exc:
        raise NsprofError(f"CUPTI failed: {exc}") from None
    with collector.lock:
        records, collector.records = collector.records, []
    api, kernels, seen = [], {}, set()
    for record in records:
        if record.kind == cupti.ActivityKind.CONCURRENT_KERNEL:
            key = (record.correlation_id, record.start, record.end)
            if key in seen:
                # Seen on the H200 after torch.profiler (TileLang's cupti backend) had run in the
                # same process: every kernel record arrived twice, doubling the sums.
                continue
            seen.add(key)
            kernels.setdefault(record.correlation_id, []).append(record.end - record.start)
        elif record.kind in (cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER):
            api.append((record.start, record.correlation_id))
    api.sort()
    samples = []
    kernel_counts = []
    for begin, end in windows:
        ids = {cid for start, cid in api if begin <= start <= end}
        durations = [d for cid in ids for d in kernels.get(cid, [])]
        kernel_counts.append(len(durations))
        samples.append(float(sum(durations)) if durations else float("nan"))
    if not any(kernel_counts):
        raise NsprofError(
            "the cupti timer saw no kernel launched by the call (is another CUPTI client, "
            "such as torch.profiler, active?)"
        )
    return samples, {"launch": "direct", "kernels_per_call": max(set(kernel_counts), key=kernel_counts.count)}
