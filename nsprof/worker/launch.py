"""What a config's launches need: Device (synchronize, capture a CUDA graph, NVTX range marks, the
device described, whether its context survived), and the steps every job loop of the worker shares:
warm_and_capture (warm-up, then the graph for mode graph), measure_rep (one rep in its ranges),
config_failed (a config's failure reported) and error_line (an exception in one line).
"""

from __future__ import annotations

import traceback

from nsprof.schema import NSPROF_DOMAIN, range_name
from nsprof.worker.protocol import Job, Status


class Device:
    """What the worker needs from the device: synchronize, capture a graph, range marks."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "cuda":  # a CPU's plain calls launch no kernel for a profiler's ranges to attribute
            import nvtx
            import torch

            self._nvtx, self._torch = nvtx, torch

    def push(self, name: str) -> None:
        if self.kind == "cuda":
            self._nvtx.push_range(name, domain=NSPROF_DOMAIN)

    def pop(self) -> None:
        if self.kind == "cuda":
            self._nvtx.pop_range(domain=NSPROF_DOMAIN)

    def sync(self) -> None:
        if self.kind == "cuda":
            self._torch.cuda.synchronize()

    def flush_l2(self) -> None:
        """The cold timers' own L2 flush (one kernel writing a buffer larger than L2); a CPU has none."""
        if self.kind == "cuda":
            from nsprof.timers.base import Flusher

            Flusher()()

    def capture(self, launch):
        if self.kind != "cuda":
            raise RuntimeError("graph mode needs a CUDA device")
        torch = self._torch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch()
        graph.replay()
        torch.cuda.synchronize()
        return graph.replay

    def describe(self) -> dict:
        """The device this worker measures on (initialises CUDA): its UUID as nvidia-smi and
        CUDA_VISIBLE_DEVICES write it ("GPU-..."), name and index among the visible devices."""
        if self.kind != "cuda":
            return {"uuid": "", "name": "cpu"}
        torch = self._torch
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = str(getattr(props, "uuid", "") or "")
        if uuid and not uuid.startswith(("GPU-", "MIG-")):
            uuid = "GPU-" + uuid
        return {"uuid": uuid, "name": props.name, "index": index}

    def healthy(self) -> bool:
        try:
            self.sync()
        except Exception:  # the CUDA context is gone (illegal address, ...): report, don't raise
            return False
        return True


def error_line(exc: BaseException) -> str:
    """One line: the exception's type and the first line of its message (torch appends
    paragraphs of debugging advice after the CUDA error itself)."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return " ".join(f"{type(exc).__name__}: {first}".split())[:300]


def warm_and_capture(job: Job, device: Device, launch):
    """`job.warmup` unmeasured launches, then the captured graph's replay when mode graph is asked
    for (None otherwise): all outside every range."""
    for _ in range(job.warmup):
        launch()
    device.sync()
    return device.capture(launch) if "graph" in job.modes else None


def config_failed(status: Status, device: Device, config_id: int, exc: Exception) -> bool:
    """Report config `config_id` failed; whether the CUDA context survived it."""
    status.fail(config_id, error_line(exc), "crash")
    traceback.print_exc()
    return device.healthy()


def measure_rep(device: Device, job: Job, point: int, mode: str, rep: int, call) -> None:
    config_id, shape = job.points.split(point)
    if job.flushed(rep):  # outside the ranges: the profiler measures the kernel after it, not it
        device.flush_l2()
    device.push(NSPROF_DOMAIN)
    device.push(range_name(config_id, mode, rep, shape))
    try:
        call()
        device.sync()
    finally:
        device.pop()
        device.pop()
