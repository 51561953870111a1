"""CUDA events around each call: what most autotuners do (launch overhead included)."""

from __future__ import annotations

from nsprof.timers.base import Flusher


def time_events(fn, reps: int, l2: str, calls_per_graph: int = 1) -> tuple[list[float], dict]:
    import torch

    flush = Flusher() if l2 == "cold" else None
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        if flush:
            flush()  # before the start event: the flush is not timed
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    samples = [start.elapsed_time(end) * 1e6 for start, end in zip(starts, ends)]  # ms -> ns
    return samples, {"launch": "direct", "clock": "events (host-enqueued, launch gap included)"}
