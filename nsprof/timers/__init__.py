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

from collections.abc import Callable

from nsprof.errors import NsprofError
from nsprof.timers.base import TimerResult, sm_clock_mhz
from nsprof.timers.cupti import time_cupti
from nsprof.timers.event import time_events
from nsprof.timers.graph import time_graph

# The one map from timer names to timers (each imports torch only when it runs).
_TIMING = {"event": time_events, "cupti": time_cupti, "graph": time_graph}
TIMERS = tuple(_TIMING)

__all__ = ["TIMERS", "TimerResult", "measure"]


def measure(
    fn: Callable[[], object],
    timer: str = "event",
    *,
    reps: int = 100,
    warmup: int = 10,
    l2: str = "warm",
    calls_per_graph: int = 20,
) -> TimerResult:
    """Time `fn` (a zero-argument launch) with one of TIMERS; `reps` samples per call.

    l2: "warm" (no flush) or "cold" (L2 flushed before every call). For "graph", one
    sample is one replay of `calls_per_graph` captured calls divided by that count.
    """
    if timer not in _TIMING:
        raise NsprofError(f"unknown timer {timer!r}; choose from {', '.join(TIMERS)}")
    if l2 not in ("warm", "cold"):
        raise NsprofError("l2 must be 'warm' or 'cold'")
    if reps < 1 or warmup < 0 or calls_per_graph < 1:
        raise NsprofError("reps and calls_per_graph must be at least 1, warmup 0 or more")
    import torch

    if not torch.cuda.is_available():
        raise NsprofError("in-process timers need a CUDA GPU (torch.cuda.is_available() is False)")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    clock_before = sm_clock_mhz()
    samples, conditions = _TIMING[timer](fn, reps, l2, calls_per_graph)
    conditions.update({"l2": l2, "sm_clock_mhz_before": clock_before, "sm_clock_mhz_after": sm_clock_mhz()})
    return TimerResult(timer=timer, samples_ns=samples, conditions=conditions)
