"""CPU config spaces that hang or fail outside any config's window: while the worker starts
(importing the target, standing in for CUDA init) or while it exits (an atexit handler).

What happens is chosen by the environment, so that only the worker (not the test process,
which never imports this file) is affected:
    NSPROF_TEST_HANG=start   sleep for an hour while being imported
    NSPROF_TEST_HANG=exit    sleep for an hour in an atexit handler
    NSPROF_TEST_SLOW_EXIT=S  sleep S seconds in an atexit handler (a slow but healthy exit)
    NSPROF_TEST_SLOW_IMPORT=S  sleep S seconds while being imported (a slow but healthy target import)
    NSPROF_TEST_POISON=PATH  fail to import (or hang, with NSPROF_TEST_POISON_HANG=1) while PATH
                             exists; config kind "poison" creates PATH and crashes the worker
"""

import atexit
import os
import sys
import time
from pathlib import Path

import nsprof.space

_POISON = os.environ.get("NSPROF_TEST_POISON")
if os.environ.get("NSPROF_TEST_HANG") == "start":
    time.sleep(3600)
if os.environ.get("NSPROF_TEST_HANG") == "exit":
    atexit.register(time.sleep, 3600)
if os.environ.get("NSPROF_TEST_SLOW_IMPORT"):
    time.sleep(float(os.environ["NSPROF_TEST_SLOW_IMPORT"]))
if os.environ.get("NSPROF_TEST_SLOW_EXIT"):
    atexit.register(time.sleep, float(os.environ["NSPROF_TEST_SLOW_EXIT"]))
if _POISON and Path(_POISON).exists():
    if os.environ.get("NSPROF_TEST_POISON_HANG") == "1":
        time.sleep(3600)
    raise RuntimeError("cuInit failed: CUDA_ERROR_NO_DEVICE (simulated start-up failure)")


def build(config):
    kind = config["kind"]
    time.sleep(config.get("build_s", 0.0))  # a slow build (loading a compiled kernel, allocating inputs)

    def launch():
        if kind == "poison":
            Path(_POISON).write_text("")
            sys.stderr.write("CUDA error: an illegal memory access was encountered (simulated)\n")
            sys.stderr.flush()
            os._exit(1)
        if kind == "slow":
            time.sleep(0.5)
        if kind == "hang":
            time.sleep(3600)

    return launch


healthy = nsprof.space.Space(name="healthy", configs=[{"kind": "ok"}] * 4, build=build, device="cpu")

# Configs 0-2 measured, 3 crashes the worker and makes the next one fail to start.
restart = nsprof.space.Space(
    name="restart",
    configs=[{"kind": k} for k in ["ok", "ok", "ok", "poison", "ok", "ok"]],
    build=build,
    device="cpu",
)

# Two quick configs, then slow ones: time to signal nsprof while it measures.
interruptible = nsprof.space.Space(
    name="interruptible",
    configs=[{"kind": k} for k in ["ok", "ok"] + ["slow"] * 8],
    build=build,
    device="cpu",
)

# Two quick configs, then one that never ends: nsprof killed while it runs must not leave it.
hanging = nsprof.space.Space(
    name="hanging", configs=[{"kind": k} for k in ["ok", "ok", "hang", "ok"]], build=build, device="cpu"
)

# Known minimum times per phase: config 0 builds for 0.3 s, config 1 runs 0.5 s per launch.
timed = nsprof.space.Space(
    name="timed",
    configs=[{"kind": "ok", "build_s": 0.3}, {"kind": "slow"}, {"kind": "ok"}],
    build=build,
    device="cpu",
)
