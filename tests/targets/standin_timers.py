"""nsprof's bare worker with a stand-in for the fast timers, for CPU tests of validate.

    python standin_timers.py JOB.json

The real worker program runs the job (its status file, its results file, its rounds); only what
touches the GPU is replaced:
- nsprof.timers.specs.run_method (plain timers): a method "measures" the value the config's
  launch carries for it (`launch.timer_ns[method]`), as a GPU timer would have;
- nsprof.timers.interleave.prepare (interleaved timers): the same value per sample;
- a launch with `dies` set ends the worker process at its first sample (of that method, where `dies`
  names one), as a lost CUDA context does (with NSPROF_TEST_DIES=hang it hangs there instead);
- with `launch.drift` set, every sample drifts, as a warming card's would: sample number t of
  the process (counted over all configs and methods) reads value × (1 + drift × t);
- nsprof.timers.interleave.memory_full: with NSPROF_TEST_BATCH=N the GPU is "full" after every
  N configs built, so that the interleaved timers measure batches of N;
- nsprof.timers.base.sm_clock_mhz: NSPROF_TEST_CLOCKS (MHz, comma-separated) read in turn,
  cycling; without it no clock, as without NVML.
"""

import os
import statistics
import sys
import time

import nsprof.timers.base as base
import nsprof.timers.interleave as interleave
import nsprof.timers.specs as specs

SAMPLES = [0]  # samples taken so far in this process: the drift's time
CLOCKS = [float(c) for c in os.environ.get("NSPROF_TEST_CLOCKS", "").split(",") if c]
READS = [0]
BATCH = int(os.environ.get("NSPROF_TEST_BATCH", "0"))
HELD = [0]


def memory_full():
    HELD[0] += 1
    return bool(BATCH) and HELD[0] % BATCH == 0


def _samples(fn, name, reps):
    dies = getattr(fn, "dies", False)  # True, or the one method it dies measuring
    if dies is True or dies == name:  # the process dies measuring it, as on a lost CUDA context
        if os.environ.get("NSPROF_TEST_DIES") == "hang":  # or hangs there, until its timeout
            time.sleep(3600)
        os._exit(3)
    value = float(fn.timer_ns[name.removesuffix("_interleaved")])
    drift = float(getattr(fn, "drift", 0.0))
    out = [value * (1 + drift * (SAMPLES[0] + i)) for i in range(reps)]
    SAMPLES[0] += reps
    return out


def run_method(name, fn, reps):
    fn()
    value = statistics.median(_samples(fn, name, reps))
    return {"median_ns": value, "min_ns": value, "conditions": {"tool": "standin"}}


def prepare(method, fn, calls_per_graph=20):
    fn()
    return interleave.Sampler(
        lambda reps: _samples(fn, method, reps), {"tool": "standin", "interleaved": True}, fn
    )


def sm_clock_mhz():
    if not CLOCKS:
        return None
    READS[0] += 1
    return CLOCKS[(READS[0] - 1) % len(CLOCKS)]


specs.run_method = run_method
interleave.prepare = prepare
interleave.memory_full = memory_full
interleave.release = lambda: None  # no GPU memory to give back
base.sm_clock_mhz = sm_clock_mhz

if __name__ == "__main__":
    from nsprof.worker.program import main

    main(sys.argv[1:])
