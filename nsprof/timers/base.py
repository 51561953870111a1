"""The timer interface and the pieces every timer shares (flush buffer, SM clock)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from nsprof.errors import NsprofError

TIMERS = ("event", "cupti", "graph")
L2_FLUSH_BYTES = 256 << 20  # larger than any current L2 (H200: 60 MB)


@dataclass
class TimerResult:
    timer: str
    samples_ns: list[float]
    conditions: dict = field(default_factory=dict)  # l2, launch, clock before/after, calls

    @property
    def valid_ns(self) -> list[float]:
        """The samples that measured something (a CUPTI window can see no kernel: NaN)."""
        return [s for s in self.samples_ns if s == s]

    @property
    def median_ns(self) -> float:
        valid = self.valid_ns
        return float(statistics.median(valid)) if valid else float("nan")

    @property
    def min_ns(self) -> float:
        valid = self.valid_ns
        return float(min(valid)) if valid else float("nan")

    def as_dict(self) -> dict:
        return {"timer": self.timer, "median_ns": self.median_ns, "min_ns": self.min_ns,
                "samples_ns": self.samples_ns, "invalid_samples": len(self.samples_ns) - len(self.valid_ns),
                "conditions": self.conditions}


class Flusher:
    """Evicts L2 by writing a buffer larger than it (one kernel on the current stream)."""

    def __init__(self) -> None:
        import torch

        self._buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def __call__(self) -> None:
        self._buffer.zero_()


def sm_clock_mhz() -> float | None:
    """Current SM clock of GPU 0 from NVML, or None where NVML is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except pynvml.NVMLError:
        return None


def measure(fn: Callable[[], object], timer: str = "event", *, reps: int = 100, warmup: int = 10,
            l2: str = "warm", calls_per_graph: int = 20) -> TimerResult:
    """Time `fn` (a zero-argument launch) with one of TIMERS; `reps` samples per call.

    l2: "warm" (no flush) or "cold" (L2 flushed before every call). For "graph", one
    sample is one replay of `calls_per_graph` captured calls divided by that count.
    """
    if timer not in TIMERS:
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
    if timer == "event":
        from nsprof.timers.event import time_events

        samples, conditions = time_events(fn, reps, l2)
    elif timer == "cupti":
        from nsprof.timers.cupti import time_cupti

        samples, conditions = time_cupti(fn, reps, l2)
    else:
        from nsprof.timers.graph import time_graph

        samples, conditions = time_graph(fn, reps, l2, calls_per_graph)
    conditions.update({"l2": l2, "sm_clock_mhz_before": clock_before, "sm_clock_mhz_after": sm_clock_mhz()})
    return TimerResult(timer=timer, samples_ns=samples, conditions=conditions)
