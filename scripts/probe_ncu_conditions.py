"""What ncu's --clock-control and --cache-control do to µs kernels on this GPU.

    source .device/setup.sh && python3 scripts/probe_ncu_conditions.py --out probe.json \
        [--target examples/seed_gemm.py:space] [--configs 13,15,20,28] [--runs 2]

Runs `nsprof profile --backend ncu --mode graph` under each of the four (clock, cache)
conditions `--runs` times, and also nsys once per run for reference, and writes, per condition,
run and config: the median over reps of the summed kernel duration, the spread over reps
((max - min) / median) and the median SM clock ncu reports. Prints a short table last.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

CONDITIONS = [("base", "all"), ("base", "none"), ("none", "all"), ("none", "none")]


def per_config(csv_path: Path) -> dict[int, dict]:
    """config id -> median, spread and clock, read from nsprof's tidy CSV with the csv module."""
    sums: dict[tuple[int, int], float] = defaultdict(float)
    clocks: dict[int, list[float]] = defaultdict(list)
    with open(csv_path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["error"] or not row["duration_ns"]:
                continue
            config, rep = int(row["config_id"]), int(row["rep"])
            sums[(config, rep)] += float(row["duration_ns"])
            if row["clock_hz"]:
                clocks[config].append(float(row["clock_hz"]))
    by_config: dict[int, list[float]] = defaultdict(list)
    for (config, _rep), total in sums.items():
        by_config[config].append(total)
    out = {}
    for config, values in sorted(by_config.items()):
        median = statistics.median(values)
        out[config] = {
            "median_ns": median,
            "spread": (max(values) - min(values)) / median,
            "reps": len(values),
            "clock_mhz": statistics.median(clocks[config]) / 1e6 if clocks[config] else None,
        }
    return out


def run(target: str, configs: str, backend: str, clock: str, cache: str, work: Path) -> dict:
    out_csv = work / f"{backend}-{clock}-{cache}-{time.monotonic_ns()}.csv"
    argv = [
        sys.executable,
        "-m",
        "nsprof",
        "profile",
        target,
        "--backend",
        backend,
        "--mode",
        "graph",
        "--configs",
        configs,
        "--csv",
        str(out_csv),
    ]
    if backend == "ncu":
        argv += ["--clock-control", clock, "--cache-control", cache]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        return {
            "rc": done.returncode,
            "error": (done.stderr.strip().splitlines() or ["?"])[-1],
            "wall_s": wall,
        }
    return {"rc": 0, "wall_s": wall, "configs": per_config(out_csv)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="examples/seed_gemm.py:space")
    parser.add_argument("--configs", default="13,15,20,28")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nsprof-probe-"))
    result = {
        "target": args.target,
        "configs": args.configs,
        "machine": platform.node(),
        "date": time.strftime("%Y-%m-%d"),
        "runs": [],
    }
    plan = [("ncu", clock, cache) for clock, cache in CONDITIONS] + [("nsys", "none", "none")]
    for index in range(args.runs):
        for backend, clock, cache in plan:
            entry = {
                "run": index,
                "backend": backend,
                "clock_control": clock,
                "cache_control": cache,
                **run(args.target, args.configs, backend, clock, cache, work),
            }
            result["runs"].append(entry)
            args.out.write_text(json.dumps(result, indent=1))  # after each step: a timeout keeps what ran
    print(
        f"{'tool':5} {'clock':5} {'cache':5} run  "
        + "  ".join(f"cfg{c:>3} µs (spread, MHz)" for c in args.configs.split(","))
    )
    for entry in result["runs"]:
        head = (
            f"{entry['backend']:5} {entry['clock_control']:5} {entry['cache_control']:5} {entry['run']:3}  "
        )
        if entry["rc"] != 0:
            print(head + f"failed: {entry['error']}")
            continue
        cells = []
        for c in args.configs.split(","):
            v = entry["configs"].get(int(c)) or entry["configs"].get(c)
            cells.append(
                "-"
                if v is None
                else f"{v['median_ns'] / 1e3:7.2f} ({v['spread']:.1%}, {v['clock_mhz'] or 0:.0f})"
            )
        print(head + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
