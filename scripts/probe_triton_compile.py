"""Probe (GPU): can a Triton space's configs be compiled ahead, in parallel, so that a tune's first
launches find them compiled? Measures, for the first --configs configs of examples/moe_triton.py at
M = 16, each from an empty Triton cache in a fresh process:

  - serial:    what a worker does today: each config compiles at its first launch, one after another;
  - async:     Triton's own parallel compile (triton.runtime._async_compile.AsyncCompileMode over a
               pool of --jobs threads, as the compile step's pool is): JITFunction.warmup of every
               config submits its compile, then each config's first launch;
  - processes: the same warmups in --jobs fresh processes (one Triton cache folder for all), then each
               config's first launch in the parent, which loads what they compiled from that cache.

For each: the compile phase's wall time, the first launches' wall time (a cache hit is a few ms), and
whether every config ran. A Triton space has no compile step today (BENCHMARKS, the MoE section), so
this says which kind of pool would pay (threads pay only where Triton's compiler lets go of the
interpreter's lock).

    source .device/setup.sh && python3 scripts/probe_triton_compile.py --out $OUT/r/probe_triton_compile.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run as a script in a fresh process per method (a cold interpreter: nothing compiled in memory); the
# spawned pool processes import it again, and get everything above main().
CHILD = r"""
import json, sys, time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
sys.path.insert(0, sys.argv[1])
method, n, jobs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
import torch
import moe_triton
from nsprof.integrations.triton import config_dict

configs = [config_dict(c) for c in moe_triton.CONFIGS[:n]]
args, kwargs = moe_triton.make_shape_inputs({"M": 16})
fn = moe_triton.moe_kernel.fn


def warm(config):
    try:
        fn.warmup(*args, grid=moe_triton.grid, **kwargs, **config)
        return None
    except Exception as exc:  # a config that does not compile: a result
        return f"{type(exc).__name__}: {exc}"[:200]


def warm_in_child(index):
    return warm(configs[index])


def main():
    began = time.perf_counter()
    if method == "async":  # Triton's own parallel compile: warmups submit to the pool, joined at exit
        from triton.runtime._async_compile import AsyncCompileMode

        with ThreadPoolExecutor(jobs) as pool, AsyncCompileMode(pool, ignore_errors=True):
            warm_errors = [warm(config) for config in configs]
    elif method == "processes":
        import multiprocessing

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            warm_errors = list(pool.map(warm_in_child, range(len(configs))))
    else:
        warm_errors = [None] * len(configs)
    compile_s = time.perf_counter() - began
    began = time.perf_counter()
    launch_errors, firsts = [], []
    for config in configs:
        one = time.perf_counter()
        try:
            fn[moe_triton.grid](*args, **kwargs, **config)
            torch.cuda.synchronize()
            launch_errors.append(None)
        except Exception as exc:
            launch_errors.append(f"{type(exc).__name__}: {exc}"[:200])
        firsts.append(time.perf_counter() - one)
    launch_s = time.perf_counter() - began
    firsts.sort()
    print(json.dumps({
        "method": method, "configs": len(configs), "jobs": jobs, "compile_s": compile_s, "launch_s": launch_s,
        "first_launch_median_s": firsts[len(firsts) // 2], "first_launch_max_s": firsts[-1],
        "warm_failed": sum(e is not None for e in warm_errors), "launch_failed": sum(e is not None for e in launch_errors),
        "errors": sorted({e for e in warm_errors + launch_errors if e})[:5],
    }))


if __name__ == "__main__":
    main()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--configs", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--methods", default="serial,async,processes")
    parser.add_argument("--timeout", type=float, default=400.0)
    args = parser.parse_args()
    results = []
    for method in args.methods.split(","):
        with tempfile.TemporaryDirectory(prefix="nsprof-triton-cache-") as cache:
            env = {
                **os.environ,
                "TRITON_CACHE_DIR": cache,
                "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}",
            }
            child = Path(cache) / "probe_child.py"
            child.write_text(CHILD)
            command = [
                sys.executable,
                str(child),
                str(ROOT / "examples"),
                method,
                str(args.configs),
                str(args.jobs),
            ]
            began = time.perf_counter()
            try:
                done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                results.append({"method": method, "error": f"over {args.timeout:.0f} s"})
                continue
            wall = time.perf_counter() - began
            if done.returncode != 0:
                results.append({"method": method, "wall_s": wall, "error": done.stderr.strip()[-1500:]})
            else:
                results.append(
                    {"method": method, "wall_s": wall, **json.loads(done.stdout.strip().splitlines()[-1])}
                )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"probe": "triton_compile", "results": results}, indent=1) + "\n")
    print(f"{'method':10} {'wall s':>7} {'compile s':>9} {'launches s':>10} {'1st max s':>9} failed")
    for r in results:
        if "error" in r:
            print(f"{r['method']:10} error: {r['error'].splitlines()[-1][:150]}")
            continue
        print(
            f"{r['method']:10} {r['wall_s']:7.1f} {r['compile_s']:9.1f} {r['launch_s']:10.1f} "
            f"{r['first_launch_max_s']:9.3f} {r['warm_failed']}/{r['launch_failed']}"
        )
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
