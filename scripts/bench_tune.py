"""Benchmark: wall time of tuning one TileLang config space, TileLang's own AutoTuner vs nsprof (GPU).

    source .device/setup.sh && python3 scripts/bench_tune.py --out benchmarks/results/bench_tune.json

Same machine, same space (examples/autotune_tilelang.py: the seed GEMM as a user's
`@tilelang.autotune` kernel), one run of this script. Every contender is a fresh process
starting from a cold kernel cache (its own empty TILELANG_CACHE_DIR and TRITON_CACHE_DIR):
  - TileLang's AutoTuner with its default event backend (`matmul.compile(1, 1024, 1024)`);
  - `nsprof tune --backend ncu --mode graph` (including the feed-back to TileLang's cache);
  - `nsprof tune --backend nsys --mode graph`;
  - `nsprof tune --backend ncu --mode graph --prescreen graph --top 4`.
Goals: nsys within 1.5x of TileLang's event autotune wall time, ncu within 2x.
Each contender's pick is placed in the ncu ranking. Prints a table last; writes JSON to --out.

With --warm (the side-by-side figure of a warm re-tune): one kernel cache shared by every contender, filled by a
warm-up run of each (not counted), then --rounds rounds of every contender in turn, TileLang's
autotune result cache disabled (TILELANG_AUTO_TUNING_DISABLE_CACHE=1) so that it benchmarks each
time. Best / median / worst wall per contender, and the ratio of medians to TileLang's. Goals:
nsys <= 1.0x, ncu <= 1.3x, both with the feed-back. --contenders picks some (default: all four).
--kernels picks the spaces (gemm: examples/autotune_tilelang.py, the seed GEMM; add:
examples/autotune_add_tilelang.py, an elementwise add of 4096 x 4096; --warm takes several, each
kernel's rounds interleaved with the others'):

    python3 scripts/bench_tune.py --warm --rounds 3 --kernels gemm,add \
        --contenders tilelang_event,nsprof_nsys_graph,nsprof_ncu_graph --out benchmarks/results/bench_tune_warm.json
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
# Each kernel: its example module, the autotuned function and the call that tunes it. gemm: the
# seed GEMM (compute-bound); add: an elementwise add of 4096 x 4096 (memory-bound, its configs
# near-equivalent).
KERNELS = {
    "gemm": ("autotune_tilelang", "matmul", "1, 1024, 1024"),
    "add": ("autotune_add_tilelang", "add", "4096, 4096"),
}

TILELANG_TUNE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from {module} import {function} as kernel
kernel.compile({args})   # TileLang's AutoTuner, default profile args (event backend)
print(json.dumps(next(iter(kernel._tuner_cache.values()))[1]))
"""


def target_of(kernel: str) -> str:
    return f"examples/{KERNELS[kernel][0]}.py:space"


def contenders_of(kernel: str) -> list[tuple[str, list[str]]]:
    """The contenders that tune `kernel`: TileLang's own autotune, then nsprof's."""
    module, function, call = KERNELS[kernel]
    own = TILELANG_TUNE.format(module=module, function=function, args=call)
    nsprof = [sys.executable, "-m", "nsprof", "tune", target_of(kernel), "--no-store", "--json"]
    return [
        ("tilelang_event", [sys.executable, "-c", own, str(ROOT / "examples")]),
        ("nsprof_ncu_graph", nsprof + ["--backend", "ncu", "--mode", "graph"]),
        ("nsprof_nsys_graph", nsprof + ["--backend", "nsys", "--mode", "graph"]),
        (
            "nsprof_prescreen_graph_top4",
            nsprof + ["--backend", "ncu", "--mode", "graph", "--prescreen", "graph", "--top", "4"],
        ),
    ]


def run(name: str, command: list[str], scratch: Path, shared: bool = False) -> dict:
    cache = scratch / ("shared" if shared else name)
    env = {
        **os.environ,
        "TILELANG_CACHE_DIR": str(cache / "tilelang"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "PYTHONUNBUFFERED": "1",
    }
    if shared and name == "tilelang_event":
        env["TILELANG_AUTO_TUNING_DISABLE_CACHE"] = "1"  # benchmark again, from the warm kernel cache
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    wall = time.perf_counter() - start
    result = {
        "name": name,
        "command": " ".join(command[1:]) if command[0] == sys.executable else command,
        "wall_s": round(wall, 2),
        "returncode": done.returncode,
    }
    if done.returncode != 0:
        result["stderr_tail"] = done.stderr[-1500:]
        return result
    last = done.stdout.strip().splitlines()[-1]
    document = json.loads(last)
    if name == "tilelang_event":
        result["picked"] = document
    else:
        result["picked"] = document["best_config"]
        result["notes"] = document["notes"]
        # where the whole command's wall went: nsprof's steps, and the rest (output, exit)
        result["steps_s"] = {
            **document["steps_s"],
            "rest": round(wall - sum(document["steps_s"].values()), 3),
        }
        result["ranked"] = [
            {k: r.get(k) for k in ("rank", "config_id", "config", "value_ns", "error")}
            for r in document["ranked"]
        ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warm", action="store_true", help="one warm kernel cache for all, --rounds rounds")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--contenders", default="", help="comma-separated names (default: all)")
    parser.add_argument("--kernels", default="gemm", help=f"comma-separated, of {', '.join(KERNELS)}")
    args = parser.parse_args()
    kernels = args.kernels.split(",")
    if unknown := [k for k in kernels if k not in KERNELS]:
        parser.error(f"unknown kernel {', '.join(unknown)}: one of {', '.join(KERNELS)}")
    wanted = args.contenders.split(",") if args.contenders else None
    picked = {k: [c for c in contenders_of(k) if wanted is None or c[0] in wanted] for k in kernels}
    if args.warm:
        return warm(picked, args)
    if len(kernels) != 1:
        parser.error("one kernel at a time without --warm")
    contenders = picked[kernels[0]]
    target = target_of(kernels[0])
    results = []
    with tempfile.TemporaryDirectory(prefix="nsprof-bench-tune-") as scratch:
        for name, command in contenders:
            results.append(run(name, command, Path(scratch)))
            print(
                f"{name}: {results[-1]['wall_s']} s, rc {results[-1]['returncode']}",
                file=sys.stderr,
                flush=True,
            )
    by_name = {r["name"]: r for r in results}
    truth = by_name["nsprof_ncu_graph"].get("ranked", [])
    base = by_name["tilelang_event"]["wall_s"]
    for r in results:
        r["vs_tilelang"] = round(r["wall_s"] / base, 2)
        picked = r.get("picked")
        for row in truth:
            if picked is not None and all(
                f"{k}={v}" in (row["config"] or "").split(",") for k, v in picked.items()
            ):
                r["pick_ncu_rank"], r["pick_ncu_graph_ns"] = row["rank"], row["value_ns"]
    goals = {"nsprof_nsys_graph": 1.5, "nsprof_ncu_graph": 2.0}
    document = {
        "benchmark": "bench_tune",
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "space": target,
        "goals_vs_tilelang": goals,
        "results": results,
    }
    try:
        import tilelang
        import torch

        document["versions"] = {
            "tilelang": tilelang.__version__,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0),
        }
    except Exception as exc:  # the figures stand without the version line; say why it is missing
        document["versions"] = {"error": f"{type(exc).__name__}: {exc}"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{'contender':30} {'wall s':>8} {'x TileLang':>10} {'goal':>6}  pick (ncu rank, ncu graph µs)")
    for r in results:
        goal = goals.get(r["name"])
        ns = r.get("pick_ncu_graph_ns")
        print(
            f"{r['name']:30} {r['wall_s']:8.1f} {r['vs_tilelang']:10.2f} {goal or '':>6}  {r.get('picked')} "
            f"(#{r.get('pick_ncu_rank')}, {ns / 1e3 if ns else float('nan'):.3f})  rc={r['returncode']}"
        )


def warm(picked: dict, args) -> None:
    """The warm re-tune side by side, per kernel: one warm kernel cache, a warm-up run of each
    contender (not counted), then --rounds rounds of every kernel's contenders in turn;
    best/median/worst, and the ratio of medians to TileLang's own autotune of the same kernel."""
    goals = {"nsprof_nsys_graph": 1.0, "nsprof_ncu_graph": 1.3}
    document = {
        "benchmark": "bench_tune --warm",
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "spaces": {kernel: target_of(kernel) for kernel in picked},
        "goals_vs_tilelang": goals,
        "warmup": [],
        "rounds": [],
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1) + "\n")

    def one(kernel: str, name: str, command: list[str], scratch: Path, into: str, number=None) -> None:
        result = {"kernel": kernel, **run(name, command, scratch, shared=True)}
        if number is not None:
            result["round"] = number
        document[into].append(result)
        print(
            f"{into} {kernel} {name}: {result['wall_s']} s rc {result['returncode']}",
            file=sys.stderr,
            flush=True,
        )
        save()

    with tempfile.TemporaryDirectory(prefix="nsprof-bench-tune-") as scratch:
        for kernel, contenders in picked.items():
            for name, command in contenders:
                one(kernel, name, command, Path(scratch), "warmup")
        for number in range(args.rounds):
            for kernel, contenders in picked.items():
                for name, command in contenders:
                    one(kernel, name, command, Path(scratch), "rounds", number)
    document["summary"] = {kernel: _summary(document["rounds"], kernel, goals) for kernel in picked}
    save()
    print(
        f"{'kernel':6} {'contender':30} {'best s':>8} {'median s':>9} {'worst s':>8} {'x TileLang':>10} {'goal':>6}"
    )
    for kernel, rows in document["summary"].items():
        for name, row in rows.items():
            ratio = f"{row['vs_tilelang']:.2f}" if row["vs_tilelang"] is not None else ""
            verdict = "" if row["met"] is None else ("met" if row["met"] else "MISSED")
            print(
                f"{kernel:6} {name:30} {row['best_s']:8.1f} {row['median_s']:9.1f} {row['worst_s']:8.1f} "
                f"{ratio:>10} {row['goal'] or '':>6} {verdict}"
            )
            if "steps_median_s" in row:
                where = ", ".join(f"{k} {v:.1f}" for k, v in row["steps_median_s"].items())
                print(f"{'':6} {'':30} median s by step: {where}")


def _summary(rounds: list[dict], kernel: str, goals: dict) -> dict:
    """One kernel's best / median / worst wall per contender over its rounds that succeeded (a
    contender that never did is left out), and the ratio of its median to TileLang's."""
    import statistics

    walls: dict[str, list[float]] = {}
    steps: dict[str, dict[str, list[float]]] = {}
    for r in rounds:
        if r["kernel"] == kernel and r["returncode"] == 0:
            walls.setdefault(r["name"], []).append(r["wall_s"])
            for step, seconds in r.get("steps_s", {}).items():
                steps.setdefault(r["name"], {}).setdefault(step, []).append(seconds)
    base = statistics.median(walls["tilelang_event"]) if walls.get("tilelang_event") else None
    summary = {}
    for name, values in walls.items():
        median = statistics.median(values)
        ratio = median / base if base else None
        goal = goals.get(name)
        summary[name] = {
            "best_s": min(values),
            "median_s": median,
            "worst_s": max(values),
            "runs": len(values),
            "vs_tilelang": ratio,
            "goal": goal,
            "met": None if goal is None or ratio is None else ratio <= goal,
        }
        if name in steps:
            summary[name]["steps_median_s"] = {k: statistics.median(v) for k, v in steps[name].items()}
    return summary


if __name__ == "__main__":
    main()
