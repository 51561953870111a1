"""Benchmark: where the fixed cost of `nsprof profile` goes, phase by phase, under nsys and ncu (GPU).

    source .device/setup.sh && python3 scripts/bench_fixed_cost.py --out benchmarks/results/bench_fixed_cost.json --runs 3

Per tool (--backends, default nsys,ncu): one warm-up run (kernel caches warm, not counted), then
--runs runs of the whole command line, each a fresh process:

    python3 -m nsprof profile examples/seed_gemm.py:space --backend TOOL --mode graph --work-dir W

timed from outside (spawn to exit, on CLOCK_MONOTONIC) and split with what nsprof recorded itself
in W/phases.json (nsprof.session: the session's phases, its begin and end on the same clock, and
how long the compile step beside it ran). Phases, in the order they happen:

    nsprof_start    spawn until the session: Python, nsprof's imports, the target loaded in
                    nsprof's own process, the GPU lock's wait
    tool_start ...  the session's phases (nsprof.worker.phases.run_phases, nsprof.session.PHASES):
                    tool_start, worker_start, target_import, cuda_init, build, measure, between,
                    worker_exit, tool_exit, cleanup, export, parse
    session_other   the session's wall time that no phase holds (job files, restarts' setup)
    nsprof_end      the session's end until the process exited: the table, Python's exit
    total           spawn to exit

Prints per tool a best / median / worst table of each phase (and of the per-config build and
measure medians) and rewrites --out after every run, so that a run cut off keeps what ran.

Checked on a CPU machine with the stand-in profiler (tests/test_bench_fixed_cost.py):
    --nsprof "python3 tests/standins.py" --target tests/targets/phases.py:timed --mode direct
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nsprof.session import PHASES as SESSION_PHASES  # noqa: E402  (the checkout's own)

ORDER = ("nsprof_start", *SESSION_PHASES, "session_other", "nsprof_end", "total")
PHASES_FILE = (
    "phases.json"  # nsprof.session.PHASES_FILE (not imported: this script runs nsprof as a user does)
)


VARIANTS = {"ahead": {}}  # the compile step beside the session: nsprof's one standalone route


def medians(csv_path: Path) -> dict[str, float]:
    """Per config and mode, the median over reps of the rep's summed kernel time (ns), from the
    tidy rows nsprof wrote (--csv): what the ranking reads, to compare variants."""
    import csv

    per_rep: dict[tuple[str, str, str], float] = {}
    with open(csv_path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("error") or not row.get("duration_ns"):
                continue
            key = (row["config_id"], row["mode"], row["rep"])
            per_rep[key] = per_rep.get(key, 0.0) + float(row["duration_ns"])
    grouped: dict[str, list[float]] = {}
    for (config_id, mode, _), total in per_rep.items():
        grouped.setdefault(f"{config_id}.{mode}", []).append(total)
    return {key: statistics.median(values) for key, values in grouped.items()}


def one_run(
    nsprof: list[str],
    target: str,
    backend: str,
    mode: str,
    extra: list[str],
    timeout_s: float,
    env: dict | None = None,
) -> dict:
    """Run the command once in a fresh process; its phases, from outside and from phases.json."""
    with tempfile.TemporaryDirectory(prefix="bench-fixed-cost-") as folder:
        work = Path(folder) / "work"
        rows = Path(folder) / "rows.csv"
        argv = [
            *nsprof,
            "profile",
            target,
            "--backend",
            backend,
            "--mode",
            mode,
            "--work-dir",
            str(work),
            "--csv",
            str(rows),
            *extra,
        ]
        spawned = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=ROOT,
                env={**os.environ, **(env or {})},
            )
        except subprocess.TimeoutExpired:
            return {"argv": argv, "error": f"timed out after {timeout_s:g} s"}
        exited = time.monotonic()
        run: dict = {"argv": argv, "returncode": done.returncode, "total_s": exited - spawned}
        if done.returncode != 0:
            run["error"] = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        try:
            record = json.loads((work / PHASES_FILE).read_text())
        except (OSError, ValueError) as exc:
            run.setdefault("error", f"no {PHASES_FILE}: {exc}")
            return run
        if rows.exists():
            run["medians_ns"] = medians(rows)
        phases = {"nsprof_start": record["began"] - spawned}
        phases.update({name: record["phases"].get(name, 0.0) for name in SESSION_PHASES})
        phases["session_other"] = record["wall_s"] - sum(record["phases"].values())
        phases["nsprof_end"] = exited - record["ended"]
        phases["total"] = exited - spawned
        configs = record.get("configs", {})
        run.update(
            phases=phases,
            session_wall_s=record["wall_s"],
            runs=len(record.get("runs", [])),
            compile_ahead_s=record.get("compile_ahead_s"),
            configs=configs,
            configs_measured=len(configs),
            build_per_config_median_s=_median([c["build"] for c in configs.values()]),
            measure_per_config_median_s=_median([c["measure"] for c in configs.values()]),
        )
        return run


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def same_truth(runs_a: list[dict], runs_b: list[dict]) -> dict:
    """Do two variants measure the same thing? The median over config-modes of |median_b / median_a
    - 1| (each config-mode's median over the variant's runs), against the same figure between two
    runs of one variant (each variant's consecutive runs: the tool's own run-to-run noise)."""

    def pooled(runs):
        keyed: dict[str, list[float]] = {}
        for run in runs:
            for key, value in run.get("medians_ns", {}).items():
                keyed.setdefault(key, []).append(value)
        return {key: statistics.median(values) for key, values in keyed.items()}

    a, b = pooled(runs_a), pooled(runs_b)
    between = [abs(b[k] / a[k] - 1) for k in a if k in b and a[k] > 0]
    within = []
    for runs in (runs_a, runs_b):
        measured = [r["medians_ns"] for r in runs if r.get("medians_ns")]
        for first, second in zip(measured, measured[1:]):
            within += [abs(second[k] / first[k] - 1) for k in first if k in second and first[k] > 0]

    def pct(values: list[float]) -> float:
        return 100 * statistics.median(values) if values else float("nan")

    return {"pairs": len(between), "between_pct": pct(between), "within_pct": pct(within)}


def table(runs: list[dict]) -> str:
    """Best / median / worst of each phase over the runs that recorded phases."""
    good = [r for r in runs if "phases" in r]
    if not good:
        return "  (no run recorded phases)"
    rows = [(name, [r["phases"][name] for r in good if name in r["phases"]]) for name in ORDER]
    rows += [
        (
            "build per config (median)",
            [r["build_per_config_median_s"] for r in good if r["build_per_config_median_s"] is not None],
        ),
        (
            "measure per config (median)",
            [r["measure_per_config_median_s"] for r in good if r["measure_per_config_median_s"] is not None],
        ),
    ]
    total = statistics.median(r["phases"]["total"] for r in good)
    lines = [f"  {'phase':<28}{'best s':>9}{'median s':>10}{'worst s':>9}{'% of total':>12}"]
    for name, values in rows:
        if not values:
            continue
        median = statistics.median(values)
        share = (
            f"{100 * median / total:.1f}"
            if total and not name.endswith("(median)") and name != "total"
            else ""
        )
        lines.append(f"  {name:<28}{min(values):>9.3f}{median:>10.3f}{max(values):>9.3f}{share:>12}")
    return "\n".join(lines)


def environment() -> dict:
    info = {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
        "host": platform.node(),
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        info["gpu"] = subprocess.run(
            [smi, "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    try:
        sys.path.insert(0, str(ROOT))
        from nsprof.host import tools

        for name, find in (("ncu", tools.find_ncu), ("nsys", tools.find_nsys)):
            tool = find(required=False)
            info[name] = f"{tool.path} {tools.tool_version(tool.path)}" if tool else None
    except Exception as exc:  # the versions are a label, not the benchmark
        info["tools_error"] = str(exc)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON, rewritten after every run")
    parser.add_argument("--runs", type=int, default=3, help="counted runs per tool (after one warm-up)")
    parser.add_argument(
        "--backends", default="nsys,ncu", help="tools to run, in order (nsprof --backend names)"
    )
    parser.add_argument("--target", default="examples/seed_gemm.py:space")
    parser.add_argument("--mode", default="graph", choices=["direct", "graph", "both"])
    parser.add_argument(
        "--nsprof",
        default=f"{shlex.quote(sys.executable)} -m nsprof",
        help="the command that runs nsprof (a stand-in's CLI in the CPU test)",
    )
    parser.add_argument("--extra", default="", help="more options for nsprof profile, e.g. '--reps 5'")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    parser.add_argument("--no-warmup", action="store_true", help="skip the warm-up run (the CPU test)")
    parser.add_argument(
        "--variants",
        default="ahead",
        help="ahead (compile beside the session); several, comma-separated: runs alternate between "
        "them, and the per-config medians of each are compared with the run-to-run noise of one",
    )
    args = parser.parse_args(argv)
    nsprof, extra = shlex.split(args.nsprof), shlex.split(args.extra)
    record = {
        "benchmark": "bench_fixed_cost",
        "environment": environment(),
        "target": args.target,
        "mode": args.mode,
        "nsprof": nsprof,
        "extra": extra,
        "phase_order": list(ORDER),
        "tools": {},
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        partial = args.out.with_name(args.out.name + ".part")
        partial.write_text(json.dumps(record, indent=1, default=str) + "\n")
        os.replace(partial, args.out)

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"unknown variant(s) {unknown}: choose from {', '.join(VARIANTS)}")
    record["variants"] = variants
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        names = {v: backend if len(variants) == 1 else f"{backend}:{v}" for v in variants}
        for name in names.values():
            record["tools"][name] = {"warmup": None, "runs": []}
        if not args.no_warmup:
            entry = record["tools"][names[variants[0]]]
            entry["warmup"] = one_run(
                nsprof, args.target, backend, args.mode, extra, args.timeout, VARIANTS[variants[0]]
            )
            save()
            print(
                f"{backend}: warm-up {entry['warmup'].get('total_s', float('nan')):.1f} s"
                + (f" ({entry['warmup']['error']})" if "error" in entry["warmup"] else ""),
                flush=True,
            )
        for number in range(args.runs):
            for variant in variants:  # alternating, so that drift hits every variant alike
                run = one_run(nsprof, args.target, backend, args.mode, extra, args.timeout, VARIANTS[variant])
                record["tools"][names[variant]]["runs"].append(run)
                save()
                print(
                    f"{names[variant]}: run {number + 1}/{args.runs} {run.get('total_s', float('nan')):.1f} s"
                    + (f" ({run['error']})" if "error" in run else ""),
                    flush=True,
                )
        if len(variants) == 2:
            record.setdefault("same_truth", {})[backend] = same_truth(
                *(record["tools"][names[v]]["runs"] for v in variants)
            )
            save()
    for backend, entry in record["tools"].items():
        good = [r for r in entry["runs"] if "phases" in r]
        print(
            f"\n{backend}: {args.target} --mode {args.mode}, {len(good)} of {len(entry['runs'])} runs with phases"
        )
        print(table(entry["runs"]))
    for backend, check in record.get("same_truth", {}).items():
        print(
            f"\n{backend}: per-config medians, {variants[1]} / {variants[0]} over {check['pairs']} config-modes: "
            f"median |ratio - 1| {check['between_pct']:.2f}% between the variants, "
            f"{check['within_pct']:.2f}% between runs of one variant (its own noise)"
        )
    failed = [r for e in record["tools"].values() for r in e["runs"] if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
