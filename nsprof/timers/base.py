"""What every timer shares: the result, the L2 flush buffer, the SM clock. Imports no timer.

A timer is a function `time_<name>(fn, reps, l2, calls_per_graph) -> (samples_ns, conditions)`
in its own module (event, cupti, graph); nsprof.timers names them and runs them (measure).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field

L2_FLUSH_BYTES = 256 << 20  # the least flush: over 4x any current L2 (H200: 60 MB)


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
    """Evicts L2 by writing a buffer larger than it (one kernel on the current stream). One buffer per
    device and process, shared by every timer and config: interleaved timers hold many configs at once."""

    _buffers: dict = {}

    def __init__(self) -> None:
        import torch

        device = torch.cuda.current_device()
        if device not in Flusher._buffers:
            Flusher._buffers[device] = torch.empty(
                flush_bytes() // 4, dtype=torch.int32, device=f"cuda:{device}"
            )
        self._buffer = Flusher._buffers[device]

    def __call__(self) -> None:
        self._buffer.zero_()


def flush_bytes() -> int:
    """The flush buffer's size: 4x the measured GPU's L2 (as torch reports it), at least L2_FLUSH_BYTES."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 0
    return max(L2_FLUSH_BYTES, 4 * int(l2))


_NVML: dict = {}


def _nvml_handle():
    """(pynvml, the NVML handle of the GPU torch measures on, found by its UUID so that
    CUDA_VISIBLE_DEVICES cannot name another card), or None where NVML or the GPU is missing."""
    if "handle" in _NVML:
        return _NVML["handle"]
    _NVML["handle"] = None
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        uuid = uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid
        _NVML["handle"] = (pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid))
    except ImportError:  # no nvidia-ml-py: clocks are not read, and the results say so (None)
        return None
    except Exception as exc:  # pynvml.NVMLError and torch's errors: no clock, said once
        print(f"==NSPROF== the SM clock is not read: {type(exc).__name__}: {exc}", file=sys.stderr)
    return _NVML["handle"]


def _nvml_read(read) -> float | None:
    """`read(pynvml, handle)` of the GPU being measured, as a float; None where NVML is missing or fails."""
    found = _nvml_handle()
    if found is None:
        return None
    pynvml, handle = found
    try:
        return float(read(pynvml, handle))
    except pynvml.NVMLError:
        return None


def sm_clock_mhz() -> float | None:
    """The current SM clock of the GPU being measured, from NVML; None where NVML is missing."""
    return _nvml_read(lambda nvml, handle: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
