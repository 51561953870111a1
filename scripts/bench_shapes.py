"""Benchmark: four shapes in one `nsprof tune` against one shape (GPU; goal: <= 2x).

    source .device/setup.sh && python3 scripts/bench_shapes.py --out benchmarks/results/bench_shapes.json

examples/matmul_shapes_triton.py: the same Triton configs at M = 1, 16, 128, 1024 (`space`) and at
M = 1024 alone (`one_shape`), `nsprof tune --backend nsys --mode graph --no-store`, each a fresh
process with one Triton cache shared by both, warmed by one run of each (not counted); then
--rounds rounds of both in turn. Prints best / median / worst wall of each and the ratio of medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    "four_shapes": "examples/matmul_shapes_triton.py:space",
    "one_shape": "examples/matmul_shapes_triton.py:one_shape",
}
GOAL = 2.0


def run(target: str, backend: str, cache: Path, timeout_s: float) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache / "triton"), "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "nsprof",
        "tune",
        target,
        "--backend",
        backend,
        "--mode",
        "graph",
        "--no-store",
        "--json",
    ]
    began = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"target": target, "error": f"timed out after {timeout_s:g} s"}
    result = {"target": target, "wall_s": time.monotonic() - began, "returncode": done.returncode}
    if done.returncode != 0:
        result["error"] = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return result
    document = json.loads(done.stdout)
    shapes = document.get("shapes") or [document]
    result["winners"] = [{"shape": s.get("shape_value"), "best": s.get("best_config")} for s in shapes]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backend", default="nsys")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    document = {
        "benchmark": "bench_shapes",
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "backend": args.backend,
        "targets": TARGETS,
        "goal_ratio": GOAL,
        "warmup": {},
        "rounds": [],
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="nsprof-bench-shapes-") as scratch:
        for name, target in TARGETS.items():
            document["warmup"][name] = run(target, args.backend, Path(scratch), args.timeout)
            print(
                f"warm-up {name}: {document['warmup'][name].get('wall_s', float('nan')):.1f} s",
                file=sys.stderr,
                flush=True,
            )
            save()
        for number in range(args.rounds):
            for name, target in TARGETS.items():
                result = {
                    "name": name,
                    "round": number,
                    **run(target, args.backend, Path(scratch), args.timeout),
                }
                document["rounds"].append(result)
                print(
                    f"round {number + 1} {name}: {result.get('wall_s', float('nan')):.1f} s "
                    f"{result.get('error', '')}",
                    file=sys.stderr,
                    flush=True,
                )
                save()
    walls = {
        name: [r["wall_s"] for r in document["rounds"] if r["name"] == name and "error" not in r]
        for name in TARGETS
    }
    summary = {
        name: {"best_s": min(v), "median_s": statistics.median(v), "worst_s": max(v), "runs": len(v)}
        for name, v in walls.items()
        if v
    }
    if len(summary) == 2:
        ratio = summary["four_shapes"]["median_s"] / summary["one_shape"]["median_s"]
        summary["ratio"] = {"four_over_one": ratio, "goal": GOAL, "met": ratio <= GOAL}
    document["summary"] = summary
    save()
    for name in TARGETS:
        if name in summary:
            row = summary[name]
            print(
                f"{name:12} best {row['best_s']:.1f} s  median {row['median_s']:.1f} s  worst {row['worst_s']:.1f} s"
            )
    if "ratio" in summary:
        verdict = "met" if summary["ratio"]["met"] else "MISSED"
        print(
            f"four shapes / one shape: {summary['ratio']['four_over_one']:.2f}x (goal <= {GOAL:g}x: {verdict})"
        )
    return 0 if "ratio" in summary else 1


if __name__ == "__main__":
    sys.exit(main())
