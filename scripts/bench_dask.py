"""Dask figures on a GPU machine: overhead on one GPU, throughput on two.

    pip install -e '.[dask]'
    python3 scripts/bench_dask.py --out benchmarks/results/bench_dask.json            # 1 GPU: steps 1-2
    python3 scripts/bench_dask.py --out benchmarks/results/bench_dask_x2.json --two  # 2 GPUs: steps 3-4 too

Steps (the JSON is written again after each, so an interrupted run keeps what it did):
1. `tune examples/seed_gemm.py:space --backend nsys` without Dask: wall, ranking;
2. the same through Dask, `--devices 0`: wall (and the cluster's start apart), the ranking
   against step 1 (same winner or tie, Kendall τ, median ratio): Dask's overhead = 2 - 1;
3. (--two) the seed space × 4 shapes (this file's `shapes` space), under ncu and under nsys,
   on `--devices 0` and on `--devices 0,1`: configs per second, and per shape whether the
   two-GPU winner is the one-GPU winner or tied with it (tune's interval test);
4. a best/median/worst table of each step's per-config medians, printed at the end.
The store is not used (each step measures everything); compile caches are warmed first.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from nsprof.space import Space  # noqa: E402

SHAPES = [(1, 1024, 1024), (16, 1024, 1024), (1, 4096, 1024), (1, 1024, 4096)]


def _shape_configs():
    from gemm_tilelang import CONFIGS

    return [{**config, "M": m, "N": n, "K": k} for (m, n, k), config in itertools.product(SHAPES, CONFIGS)]


def _kernel(config):
    from gemm_tilelang import make_kernel

    return make_kernel(
        config["block_N"],
        config["block_K"],
        config["num_stages"],
        shape=(config["M"], config["N"], config["K"]),
    )


def _build(config):
    from gemm_tilelang import build

    return build(config, shape=(config["M"], config["N"], config["K"]), kernel=_kernel(config))


def shapes() -> Space:
    """The seed space × SHAPES: 4 × 32 configs (a function, so that importing this file is cheap)."""
    return Space(name="seed_gemm_shapes", configs=_shape_configs(), build=_build, compile=_kernel)


SEED = f"{ROOT / 'examples' / 'seed_gemm.py'}:space"
SHAPES_TARGET = f"{Path(__file__).resolve()}:shapes"


def run_tune(target: str, backend: str, devices: tuple[int, ...] | None, reps: int) -> dict:
    from nsprof import cluster
    from nsprof.settings import ClusterSettings, TuneSettings
    from nsprof.tune import tune

    settings_cluster = ClusterSettings(devices=devices) if devices else None
    start_s = 0.0
    if settings_cluster is not None:
        started = time.perf_counter()
        cluster.connect(settings_cluster)
        start_s = time.perf_counter() - started
    started = time.perf_counter()
    report = tune(
        target,
        TuneSettings(
            backend=backend,
            mode="graph",
            reps=reps,
            use_store=False,
            feed_back=False,
            tuner_pick=False,
            budget_s=0,
            cluster=settings_cluster,
        ),
    )  # first pass only: adaptive reps are not spread over a cluster yet
    wall = time.perf_counter() - started
    cluster.close()
    result = report.ranking  # the first shape's
    table = result.table
    measured = table[table["error"].isna() & table["value_ns"].notna()]
    return {
        "target": target,
        "backend": backend,
        "devices": list(devices or []),
        "wall_s": wall,
        "cluster_start_s": start_s,
        "configs": int(len(table)),
        "measured": int(len(measured)),
        "configs_per_s": len(table) / wall if wall else None,
        "best": result.best_config_id,
        "tie_set": result.tie_set,
        "rows": json.loads(
            table[["config_id", "value_ns", "ci_low_ns", "ci_high_ns", "error"]].to_json(orient="records")
        ),
    }


def _medians(step: dict) -> dict[int, float]:
    return {r["config_id"]: r["value_ns"] for r in step["rows"] if r["value_ns"] is not None}


def compare(a: dict, b: dict) -> dict:
    """b's ranking against a's: same winner or tied, Kendall τ, median ratio b/a."""
    from scipy.stats import kendalltau  # noqa: PLC0415 - optional, the GPU image has it

    ma, mb = _medians(a), _medians(b)
    shared = sorted(set(ma) & set(mb))
    tau = kendalltau([ma[c] for c in shared], [mb[c] for c in shared]).statistic if len(shared) > 1 else None
    ratios = sorted(mb[c] / ma[c] for c in shared if ma[c])
    return {
        "same_winner": a["best"] == b["best"],
        "winner_in_tie_set": b["best"] in a["tie_set"],
        "kendall_tau": tau,
        "median_ratio": ratios[len(ratios) // 2] if ratios else None,
        "shared": len(shared),
    }


def per_shape(step: dict) -> dict[str, dict]:
    """Each shape's winner (lowest value) and its tie set (intervals overlapping the winner's)."""
    configs = _shape_configs()
    out = {}
    for shape in SHAPES:
        rows = [
            r
            for r in step["rows"]
            if r["value_ns"] is not None
            and (configs[r["config_id"]]["M"], configs[r["config_id"]]["N"], configs[r["config_id"]]["K"])
            == shape
        ]
        if not rows:
            continue
        best = min(rows, key=lambda r: (r["value_ns"], r["config_id"]))
        ties = [
            r["config_id"]
            for r in rows
            if r["ci_low_ns"] is not None
            and best["ci_high_ns"] is not None
            and r["ci_low_ns"] <= best["ci_high_ns"]
            and r["ci_high_ns"] >= best["ci_low_ns"]
        ]
        out["x".join(map(str, shape))] = {
            "best": best["config_id"],
            "tie_set": sorted(set(ties) | {best["config_id"]}),
        }
    return out


def table(steps: dict) -> str:
    lines = [f"{'step':<28} {'wall s':>8} {'cfg/s':>7} {'best µs':>9} {'median µs':>10} {'worst µs':>9}"]
    for name, step in steps.items():
        if not isinstance(step, dict) or "rows" not in step:
            continue
        values = sorted(_medians(step).values())
        if not values:
            continue
        lines.append(
            f"{name:<28} {step['wall_s']:>8.1f} {step['configs_per_s']:>7.2f} {values[0] / 1e3:>9.3f} "
            f"{values[len(values) // 2] / 1e3:>10.3f} {values[-1] / 1e3:>9.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_dask.json")
    parser.add_argument("--two", action="store_true", help="also the two-GPU steps (needs GPUs 0 and 1)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document: dict = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(),
        "reps": args.reps,
        "steps": {},
        "comparisons": {},
    }

    def save() -> None:
        args.out.write_text(json.dumps(document, indent=1, default=str) + "\n")

    from nsprof.space import load_target
    from nsprof.worker.compile import compile_each

    def precompile(space) -> None:
        compile_each(space, space.points, space.points.all(), 8, lambda point, why: None)

    precompile(load_target(SEED))  # warm TileLang's cache: compilation is not what is compared
    steps = document["steps"]
    steps["nsys seed, no Dask"] = run_tune(SEED, "nsys", None, args.reps)
    save()
    steps["nsys seed, --devices 0"] = run_tune(SEED, "nsys", (0,), args.reps)
    document["comparisons"]["seed: --devices 0 vs no Dask"] = {
        **compare(steps["nsys seed, no Dask"], steps["nsys seed, --devices 0"]),
        "dask_overhead_s": steps["nsys seed, --devices 0"]["wall_s"] - steps["nsys seed, no Dask"]["wall_s"],
        "cluster_start_s": steps["nsys seed, --devices 0"]["cluster_start_s"],
    }
    save()
    if args.two:
        precompile(load_target(SHAPES_TARGET))
        for backend in ("ncu", "nsys"):
            one = steps[f"{backend} shapes, --devices 0"] = run_tune(SHAPES_TARGET, backend, (0,), args.reps)
            save()
            two = steps[f"{backend} shapes, --devices 0,1"] = run_tune(
                SHAPES_TARGET, backend, (0, 1), args.reps
            )
            a, b = per_shape(one), per_shape(two)
            document["comparisons"][f"{backend} shapes: 2 GPUs vs 1"] = {
                "throughput_ratio": two["configs_per_s"] / one["configs_per_s"]
                if one["configs_per_s"]
                else None,
                "per_shape": {
                    shape: {
                        "one": a[shape],
                        "two": b.get(shape),
                        "same_or_tied": b.get(shape, {}).get("best") in a[shape]["tie_set"],
                    }
                    for shape in a
                },
                **compare(one, two),
            }
            save()
    print(table(steps))
    for name, comparison in document["comparisons"].items():
        shown = {k: v for k, v in comparison.items() if k != "per_shape"}
        print(f"{name}: {json.dumps(shown, default=str)}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
