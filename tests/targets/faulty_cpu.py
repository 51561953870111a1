"""A CPU-only config space whose configs fail in every way a worker can fail.

Used through real child processes to test nsprof's session logic (restart, timeout,
failures recorded with reasons, nothing else lost) on machines without a GPU.
"""

import os
import sys
import time

import nsprof.space


def build(config):
    kind = config["kind"]
    if kind == "build_error":
        raise ValueError("no such tile size")
    if kind == "build_abort":
        os.abort()
    if kind == "build_hang":
        time.sleep(3600)

    def launch():
        if kind == "crash":
            sys.stderr.write("CUDA error: an illegal memory access was encountered (simulated)\n")
            sys.stderr.flush()
            os._exit(1)
        if kind == "abort":
            os.abort()
        if kind == "hang":
            time.sleep(3600)
        if kind == "raise":
            raise RuntimeError("shape mismatch (simulated)")
        if kind == "slow":
            time.sleep(1.0)

    return launch


space = nsprof.space.Space(
    name="faulty",
    configs=[{"kind": k} for k in ["ok", "crash", "ok", "hang", "ok", "raise", "build_error", "abort", "ok"]],
    build=build,
    device="cpu",
)

# Faults while building a config (loading a kernel, allocating inputs), not launching it.
build_faults = nsprof.space.Space(
    name="faulty_build",
    configs=[{"kind": k} for k in ["ok", "build_abort", "ok", "build_hang", "ok"]],
    build=build,
    device="cpu",
)

# A slow config among healthy ones: long enough to kill the profiler while it runs.
slow = nsprof.space.Space(
    name="slow",
    configs=[{"kind": k} for k in ["ok", "ok", "slow", "ok"]],
    build=build,
    device="cpu",
)

# tests/test_gpu_faults.py's space on the CPU: configs 0 and 4 alike (the stand-in profiler measures
# each at its "ns": they tie), a crash, a hang and an error between them.
like_faulty_gpu = nsprof.space.Space(
    name="like_faulty_gpu",
    configs=[{"kind": k, "ns": 1000.0} for k in ["ok", "crash", "hang", "raise", "ok"]],
    build=build,
    device="cpu",
)
