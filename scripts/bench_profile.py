"""Benchmark: nsprof's batched ncu/nsys sessions vs one profiler process per config (GPU).

    source .device/setup.sh && python3 scripts/bench_profile.py --out benchmarks/results/bench_profile.json

Over the seed GEMM space (examples/gemm_tilelang.py, 32 configs, 5 direct + 5 graph reps):
  1. compile every config here (cold TileLang cache, then warm);
  2. the whole space under ncu and under nsys, one session each;
  3. the first 8 configs under each: marginal cost of one more config = (t_all - t_8) / (n - 8);
  4. one ncu session per config for 3 configs: the per-config-process baseline;
  5. a hand-run of ncu and nsys (scripts/fixture_workload.py, the seed config as cfg0) to
     check that nsprof's numbers for the seed config match the tools run by hand.
Prints a table last and writes every figure to --out (JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nsprof.drivers.ncu import METRICS  # noqa: E402
from nsprof.host.tools import find_ncu, find_nsys  # noqa: E402
from nsprof.profile import config_summary, profile_result  # noqa: E402
from nsprof.reports import read_report  # noqa: E402
from nsprof.settings import ProfileSettings  # noqa: E402
from nsprof.space import load_target  # noqa: E402

GEMM = str(ROOT / "examples" / "gemm_tilelang.py") + ":space"
SEED = 13


def compile_all(space) -> dict[int, str]:
    """Every config of `space` compiled in this process, 8 at a time: {config_id: why it did not}."""
    from nsprof.worker.compile import compile_each

    failures: dict[int, str] = {}
    compile_each(space, space.points, space.points.all(), 8, lambda c, why: why and failures.update({c: why}))
    return failures


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def medians(frame, config_id):
    summary = config_summary(frame).set_index(["config_id", "mode"])
    return {
        mode: round(float(summary.loc[(config_id, mode), "median_ns"]), 1)
        for mode in ("direct", "graph")
        if (config_id, mode) in summary.index
    }


def hand_run(tool: str, work: Path) -> dict:
    workload = ROOT / "scripts" / "fixture_workload.py"
    if tool == "ncu":
        cmd = [
            str(find_ncu().path),
            "--nvtx",
            "--nvtx-include",
            "nsprof@nsprof/",
            "--metrics",
            ",".join(METRICS),
            "--clock-control",
            "base",
            "--cache-control",
            "all",
            "-f",
            "-o",
            str(work / "hand"),
            sys.executable,
            str(workload),
            "--reps",
            "5",
        ]
        report = work / "hand.ncu-rep"
    else:
        cmd = [
            str(find_nsys().path),
            "profile",
            "-t",
            "cuda,nvtx",
            "-s",
            "none",
            "--cpuctxsw=none",
            "--cuda-graph-trace=node",
            "-f",
            "true",
            "-o",
            str(work / "hand"),
            sys.executable,
            str(workload),
            "--reps",
            "5",
        ]
        report = work / "hand.nsys-rep"
    _, wall = timed(lambda: subprocess.run(cmd, capture_output=True, check=True))
    frame = read_report(report, domain="nsprof")
    return {"wall_s": round(wall, 2), "seed_median_ns": medians(frame, 0)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-config-samples", type=int, default=3)
    args = parser.parse_args()
    space = load_target(GEMM)
    n = len(space.configs)
    figures: dict = {"configs": n, "reps": 5, "modes": ["direct", "graph"]}
    failures, figures["precompile_cold_s"] = timed(lambda: compile_all(space))
    _, figures["precompile_warm_s"] = timed(lambda: compile_all(space))
    figures["compile_failures"] = {str(k): v for k, v in failures.items()}
    working = [c for c in range(n) if c not in failures]
    eight = working[:8]
    figures["working_configs"] = len(working)
    results = {}
    for backend in ("ncu", "nsys"):
        with tempfile.TemporaryDirectory() as work:
            settings = ProfileSettings(backend=backend, reps=5, work_dir=Path(work))
            result, wall_all = timed(lambda s=settings: profile_result(GEMM, s))
        with tempfile.TemporaryDirectory() as work:
            settings = ProfileSettings(backend=backend, reps=5, work_dir=Path(work))
            _, wall_8 = timed(lambda s=settings: profile_result(GEMM, s, config_ids=eight))
        frame = result.frame
        summary = config_summary(frame, space.configs)
        results[backend] = summary.to_dict("records")
        measured = int(summary["error"].isna().sum())
        figures[backend] = {
            "wall_all_s": round(wall_all, 2),
            "wall_8_s": round(wall_8, 2),
            "marginal_per_config_s": round((wall_all - wall_8) / (n - len(eight)), 3),
            "config_mode_rows_measured": measured,
            "failed_configs": {str(k): v for k, v in result.failures.items()},
            "seed_median_ns": medians(frame, SEED),
        }
    per_config = []
    for config_id in [SEED, working[0], working[-1]][: args.per_config_samples]:
        with tempfile.TemporaryDirectory() as work:
            settings = ProfileSettings(backend="ncu", reps=5, work_dir=Path(work))
            _, wall = timed(lambda s=settings, c=config_id: profile_result(GEMM, s, config_ids=[c]))
        per_config.append(round(wall, 2))
    figures["ncu_one_process_per_config_s"] = per_config
    per_config_mean = sum(per_config) / len(per_config)
    # The same work both ways: every config that compiles, one ncu process each vs one session.
    figures["ncu_per_config_extrapolated_s"] = round(per_config_mean * len(working), 1)
    figures["ncu_speedup_vs_per_config"] = round(
        per_config_mean * len(working) / figures["ncu"]["wall_all_s"], 1
    )
    with tempfile.TemporaryDirectory() as work:
        figures["hand_ncu"] = hand_run("ncu", Path(work))
        figures["hand_nsys"] = hand_run("nsys", Path(work))
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    import torch

    record = {
        "benchmark": "bench_profile",
        "date": datetime.date.today().isoformat(),
        "gpu": smi,
        "cpu_cores": __import__("os").cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "figures": figures,
        "per_config": results,
        "goals": {
            "ncu_speedup_vs_per_config": ">= 15",
            "ncu_marginal_s": "<= 0.25",
            "nsys_marginal_s": "<= 0.05",
            "ncu_wall_all_s": "<= 20",
            "nsys_wall_all_s": "<= 15",
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    f = figures
    print(
        f"precompile {n} configs: cold {f['precompile_cold_s']:.1f} s, warm {f['precompile_warm_s']:.1f} s; "
        f"compile failures {len(f['compile_failures'])}"
    )
    print(
        f"{'':8}{'all s':>8}{'8 cfg s':>9}{'marg s':>8}  seed direct/graph ns   hand-run seed direct/graph ns"
    )
    for tool in ("ncu", "nsys"):
        g = f[tool]
        h = f[f"hand_{tool}"]["seed_median_ns"]
        print(
            f"{tool:8}{g['wall_all_s']:>8}{g['wall_8_s']:>9}{g['marginal_per_config_s']:>8}  "
            f"{g['seed_median_ns']}   {h}"
        )
    print(
        f"ncu one process per config: {per_config} s each -> {f['ncu_per_config_extrapolated_s']} s "
        f"for the {len(working)} that compile; batched is {f['ncu_speedup_vs_per_config']}x faster"
    )


if __name__ == "__main__":
    main()
