"""The CPU test suite's wall time, as CI runs it (`python3 -m pytest -q` from the repository root),
by number of pytest-xdist workers, runs interleaved so that the machine's drift falls on each alike.

    python3 scripts/bench_suite.py --workers 2,4 --runs 2     # writes benchmarks/results/bench_suite.json

Each run is a whole fresh `pytest` process; its wall time is from spawn to exit, its CPU time the
user + system time of it and all its children (getrusage of the children, which covers every
process the tests start that was waited for). The load average before each run is kept: the
machine may be shared. Best, median and worst per worker count; the goal is 4 minutes or less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 240.0


def one_run(workers: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    return {
        "workers": workers,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "load_before": load,
        "exit": done.returncode,
        "summary": summary,
    }


def spread(values: list[float]) -> dict:
    return {"best": min(values), "median": statistics.median(values), "worst": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,4", help="comma-separated xdist worker counts")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_suite.json")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    runs: list[dict] = []
    for number in range(args.runs):
        for workers in counts:
            run = one_run(workers)
            runs.append(run)
            print(
                f"run {number + 1}, {workers} workers: {run['wall_s']:.0f} s wall, {run['cpu_s']:.0f} s CPU, "
                f"load {run['load_before']:.1f} before; {run['summary']}",
                flush=True,
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(_record(runs, counts), indent=1) + "\n")
    for workers, entry in _record(runs, counts)["by_workers"].items():
        wall = entry["wall_s"]
        verdict = "met" if wall["median"] <= GOAL_S else "MISSED"
        print(
            f"{workers} workers: wall best {wall['best']:.0f} / median {wall['median']:.0f} / worst "
            f"{wall['worst']:.0f} s; goal {GOAL_S:.0f} s: {verdict}"
        )


def _record(runs: list[dict], counts: list[int]) -> dict:
    by = {}
    for workers in counts:
        mine = [r for r in runs if r["workers"] == workers]
        if mine:
            by[str(workers)] = {
                "wall_s": spread([r["wall_s"] for r in mine]),
                "cpu_s": spread([r["cpu_s"] for r in mine]),
                "runs": len(mine),
            }
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} logical CPUs, {platform.machine()}",
        "python": platform.python_version(),
        "goal_s": GOAL_S,
        "by_workers": by,
        "runs": runs,
    }


if __name__ == "__main__":
    main()
