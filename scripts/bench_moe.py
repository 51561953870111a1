"""Benchmark: throughput at scale, a MoE-class Triton space from a cold compile cache (GPU).

    source .device/setup.sh && python3 scripts/bench_moe.py --out benchmarks/results/bench_moe.json

examples/moe_triton.py: 256 `@triton.autotune` configs of an fp16 matmul at four shapes (M = 16,
64, 256, 1024; N = K = 4096). Each contender is a fresh process with an empty Triton cache of its
own (TRITON_CACHE_DIR), so every config is compiled, in one run of this script, one after another:
  - triton_own: Triton's own autotune at each shape (its do_bench timer), what a user runs today;
  - nsprof_nsys: `nsprof tune --backend nsys --mode graph` (a real tune: adaptive reps and the
    feed-back into Triton's cache included; --no-tuner-pick, which would run Triton's own autotune
    inside it again);
  - nsprof_ncu: the same under ncu;
  - nsprof_ncu_prescreen: the same with --prescreen graph --top 8: the graph timer ranks every point,
    ncu measures the best 8 of each shape (ncu's per-kernel cost paid for those only).
Configs per hour = 256 configs, each tuned at all four shapes, ÷ the whole command's wall time.
Goals: nsprof ≥ 3× Triton's own configs per hour, and ≥ 20,000 configs per hour (SGLang's MoE
tuner: about 2,600 an hour on an H100). --contenders picks some; JSON is written after each, so
that a run cut short keeps what finished. Prints a table last, each goal met or MISSED.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = "examples/moe_triton.py:space"
CONFIGS = 256
GOAL_VS_TRITON, GOAL_PER_HOUR = 3.0, 20_000

TRITON_OWN = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import moe_triton
print(json.dumps(moe_triton.tune_each_shape()))
"""


def contenders() -> dict[str, list[str]]:
    nsprof = [
        sys.executable,
        "-m",
        "nsprof",
        "tune",
        TARGET,
        "--mode",
        "graph",
        "--no-store",
        "--no-tuner-pick",
    ]
    return {
        "triton_own": [sys.executable, "-c", TRITON_OWN, str(ROOT / "examples")],
        "nsprof_nsys": [*nsprof, "--backend", "nsys", "--json"],
        "nsprof_ncu": [*nsprof, "--backend", "ncu", "--json"],
        # ncu's ~25 ms per profiled kernel, paid for the graph timer's best 8 per shape only
        "nsprof_ncu_prescreen": [*nsprof, "--backend", "ncu", "--prescreen", "graph", "--top", "8", "--json"],
    }


def run(name: str, command: list[str], scratch: Path, timeout_s: float) -> dict:
    """One contender from a cold cache: its wall time, exit status and what it picked per shape."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(scratch / name / "triton"), "PYTHONUNBUFFERED": "1"}
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"name": name, "wall_s": None, "returncode": None, "error": f"over {timeout_s:.0f} s"}
    result = {"name": name, "wall_s": round(time.perf_counter() - began, 2), "returncode": done.returncode}
    if done.returncode != 0:
        result["error"] = done.stderr.strip()[-1500:]
        return result
    document = json.loads(done.stdout.strip().splitlines()[-1])
    if name == "triton_own":
        result["picked"] = document
    else:
        shapes = document.get("shapes") or [document]
        result["picked"] = [s.get("best_config") for s in shapes]
        # The configs tied with each shape's winner (a Triton pick among them is no worse, by the truth).
        result["tie_sets"] = [[document["configs"][i] for i in s.get("tie_set") or []] for s in shapes]
        # Points measured as failed (a config that does not compile or fit), over all shapes.
        result["failed"] = sum(r.get("value_ns") is None for s in shapes for r in s.get("ranked") or [])
        result["notes"] = [n for s in shapes for n in s.get("notes") or []]
        result["first_pass_phases"] = document.get("first_pass_phases")
        # nsprof's own lines on stderr (how the run went: a compile that moved, a retry), kept
        result["stderr"] = [line for line in done.stderr.splitlines() if line.startswith("nsprof:")][-20:]
    result["configs_per_hour"] = round(CONFIGS / result["wall_s"] * 3600)
    return result


def verdicts(results: dict) -> list[str]:
    """Each nsprof contender's configs per hour against both goals, in words."""
    own = (results.get("triton_own") or {}).get("configs_per_hour")
    lines = []
    for name, r in results.items():
        rate = r.get("configs_per_hour")
        if name == "triton_own" or rate is None:
            continue
        ratio = f"{rate / own:.2f}× Triton's own" if own else "Triton's own not measured"
        met_ratio = "met" if own and rate / own >= GOAL_VS_TRITON else "MISSED"
        met_rate = "met" if rate >= GOAL_PER_HOUR else "MISSED"
        lines.append(
            f"{name}: {rate:,} configs/h, {ratio} (goal ≥ {GOAL_VS_TRITON:g}×: {met_ratio}); "
            f"goal ≥ {GOAL_PER_HOUR:,}/h: {met_rate}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--contenders", default=",".join(contenders()), help="comma-separated names")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one contender may take")
    args = parser.parse_args()
    every = contenders()
    wanted = args.contenders.split(",")
    if unknown := [n for n in wanted if n not in every]:
        parser.error(f"unknown contender {', '.join(unknown)}: one of {', '.join(every)}")
    document = {
        "benchmark": "bench_moe",
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "space": TARGET,
        "configs": CONFIGS,
        "results": {},
    }
    if args.out.exists():  # a run in parts (one contender per call): the earlier parts kept
        document["results"] = json.loads(args.out.read_text()).get("results", {})
    with tempfile.TemporaryDirectory(prefix="nsprof-bench-moe-") as scratch:
        for name in wanted:
            document["results"][name] = run(name, every[name], Path(scratch), args.timeout)
            document["goals"] = verdicts(document["results"])
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(document, indent=1) + "\n")
            print(f"{name}: {document['results'][name]['wall_s']} s", file=sys.stderr, flush=True)
    print(f"{'contender':14} {'wall s':>8} {'configs/h':>10}  rc")
    for name, r in document["results"].items():
        wall = f"{r['wall_s']:.1f}" if r.get("wall_s") is not None else "-"
        print(f"{name:14} {wall:>8} {r.get('configs_per_hour') or '-':>10}  {r.get('returncode')}")
    for line in document["goals"]:
        print(line)


if __name__ == "__main__":
    main()
