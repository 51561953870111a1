"""In-process timers, one `measure(fn, timer=...)` for all, each sample labelled.

    from nsprof.timers import measure
    result = measure(lambda: kernel(a, b, c), timer="graph", l2="cold")
    result.median_ns, result.conditions

Timers (docs/timers.md in the nsprof source explains why they differ):
- "event": CUDA events around each call (host launch gap included); optional L2 flush.
- "cupti": CUPTI kernel activity records of exactly the kernels the call launched
  (cupti-python), summed per call; no flush kernel, no allocator fills.
- "graph": N calls captured back to back into one CUDA graph, replays timed by events,
  per-call = replay / N; l2="cold" flushes L2 between calls inside the graph and
  subtracts a graph of the flushes alone, measured the same way.
"""

from __future__ import annotations

from nsprof.timers.base import TIMERS, TimerResult, measure

__all__ = ["TIMERS", "TimerResult", "measure"]
