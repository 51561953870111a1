"""What every timer shares: the result, the L2 flush buffer, the SM clock. Imports no timer.

A timer is a function `time_<name>(fn, reps, l2, calls_per_graph) -> (samples_ns, conditions)`
in its own module (event, cupti, graph); nsprof.timers names them and runs them (measure).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

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
        return {
            "timer": self.timer,
            "median_ns": self.median_ns,
            "min_ns": self.min_ns,
            "samples_ns": self.samples_ns,
            "invalid_samples": len(self.samples_ns) - len(self.valid_ns),
            "conditions": self.conditions,
        }


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
