"""Benchmark: `nsprof tune` against a running `nsprof serve` (GPU, nsys; goal: a second
tune against a running server costs <= 1 s + the marginal cost x configs).

    source .device/setup.sh && python3 scripts/bench_serve.py --out benchmarks/results/bench_serve.json

Same target (default examples/seed_gemm.py:space), `nsprof tune --backend nsys --mode graph
--no-store --no-feed-back --json`, each a fresh process, kernel caches warm (one plain run first,
not counted):
  1. --rounds plain runs (NSPROF_SERVE=0: no server is used even if one runs);
  2. `nsprof serve --backend nsys` started in the background, then --rounds + 1 served runs (the
     first served run pays the serving worker's first imports and builds: reported apart);
  3. the server stopped with SIGTERM (it must exit 0 and leave no files).
Prints best / median / worst wall of plain and served runs, the served runs' phases, and how far
the served per-config values are from the plain ones, against the plain runs' own run-to-run noise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tune(target: str, extra: list[str], env: dict, timeout_s: float) -> dict:
    command = [
        sys.executable,
        "-m",
        "nsprof",
        "tune",
        target,
        "--backend",
        "nsys",
        "--mode",
        "graph",
        "--no-store",
        "--no-feed-back",
        "--json",
        *extra,
    ]
    began = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s"}
    result = {"wall_s": time.monotonic() - began, "returncode": done.returncode}
    if done.returncode != 0:
        result["error"] = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return result
    document = json.loads(done.stdout)
    result["values_ns"] = {
        str(r["config_id"]): r["value_ns"]
        for r in document.get("ranked", [])
        if r.get("value_ns") is not None
    }
    result["best_config"] = document.get("best_config")
    result["best_config_id"] = document.get("best_config_id")
    result["tie_set"] = document.get("tie_set")
    result["adaptive"] = document.get("adaptive")  # the adaptive sessions: reps, seconds, why they stopped
    result["notes"] = document.get("notes", [])
    result["phases"] = (document.get("first_pass_phases") or {}).get("phases")
    return result


def spread(values: list[float]) -> dict:
    return {
        "best_s": min(values),
        "median_s": statistics.median(values),
        "worst_s": max(values),
        "runs": len(values),
    }


def distance(a: dict, b: dict) -> float | None:
    """Median over configs of |b/a - 1|, in percent."""
    ratios = [abs(b[k] / a[k] - 1) for k in a if k in b and a[k]]
    return 100 * statistics.median(ratios) if ratios else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--target", default="examples/seed_gemm.py:space")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--extra", default="", help="more options for nsprof tune")
    args = parser.parse_args()
    extra = args.extra.split()
    plain_env = {**os.environ, "NSPROF_SERVE": "0"}
    document = {
        "benchmark": "bench_serve",
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "target": args.target,
        "plain": [],
        "served": [],
        "server": {},
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1) + "\n")

    document["warmup"] = tune(args.target, extra, plain_env, args.timeout)
    save()
    for _ in range(args.rounds):
        document["plain"].append(tune(args.target, extra, plain_env, args.timeout))
        print(
            f"plain: {document['plain'][-1].get('wall_s', float('nan')):.1f} s", file=sys.stderr, flush=True
        )
        save()
    sys.path.insert(0, str(ROOT))
    from nsprof.serve_files import serve_paths

    state, sock = serve_paths()
    log = open(args.out.with_suffix(".server.log"), "w")
    began = time.monotonic()
    server = subprocess.Popen(
        [sys.executable, "-m", "nsprof", "serve", "--backend", "nsys", "--idle-exit", "300"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        while (
            not (state.exists() and sock.exists())
            and server.poll() is None
            and time.monotonic() - began < 120
        ):
            time.sleep(0.1)
        document["server"]["ready_s"] = time.monotonic() - began if state.exists() else None
        for number in range(args.rounds + 1):
            run = tune(args.target, extra, dict(os.environ), args.timeout)
            run["first"] = number == 0
            document["served"].append(run)
            print(
                f"served{' (first)' if number == 0 else ''}: {run.get('wall_s', float('nan')):.1f} s "
                f"{run.get('notes', '')} {run.get('error', '')}",
                file=sys.stderr,
                flush=True,
            )
            save()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            document["server"]["exit_code"] = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            document["server"]["exit_code"] = "killed after 60 s"
        document["server"]["files_left"] = [str(p) for p in (state, sock) if p.exists()]
        log.close()
        save()
    plain = [r for r in document["plain"] if "error" not in r]
    served = [r for r in document["served"] if "error" not in r and not r["first"]]
    summary = {}
    if plain:
        summary["plain"] = spread([r["wall_s"] for r in plain])
    if served:
        summary["served"] = spread([r["wall_s"] for r in served])
    first = [r for r in document["served"] if r["first"] and "error" not in r]
    if first:
        summary["served_first_s"] = first[0]["wall_s"]
    if plain and served:

        def pooled(runs):
            return {
                k: statistics.median([r["values_ns"][k] for r in runs if k in r["values_ns"]])
                for k in runs[0]["values_ns"]
            }

        summary["served_vs_plain_pct"] = distance(pooled(plain), pooled(served))
        summary["plain_run_to_run_pct"] = (
            distance(plain[0]["values_ns"], plain[1]["values_ns"]) if len(plain) > 1 else None
        )
        summary["same_winner"] = {r["best_config"] == plain[0]["best_config"] for r in served} == {True}
        # A served winner that differs from a plain one is a flip only outside that run's tie set.
        ties = set().union(*(r.get("tie_set") or [r.get("best_config_id")] for r in plain))
        summary["served_winners_outside_plain_tie_sets"] = sum(
            r.get("best_config_id") not in ties for r in served
        )
    document["summary"] = summary
    save()
    for name in ("plain", "served"):
        if name in summary:
            row = summary[name]
            print(
                f"{name:8} best {row['best_s']:.1f} s  median {row['median_s']:.1f} s  worst {row['worst_s']:.1f} s"
            )
    if "served_first_s" in summary:
        print(f"first served run: {summary['served_first_s']:.1f} s")
    if "served_vs_plain_pct" in summary:
        print(
            f"served vs plain per-config values: {summary['served_vs_plain_pct']:.2f}% (plain run to run: "
            f"{summary['plain_run_to_run_pct'] if summary['plain_run_to_run_pct'] is None else round(summary['plain_run_to_run_pct'], 2)}%)"
            f", same winner: {summary['same_winner']} (served winners outside the plain runs' tie sets: "
            f"{summary['served_winners_outside_plain_tie_sets']})"
        )
    print(
        f"server: exit {document['server'].get('exit_code')}, files left {document['server'].get('files_left')}"
    )
    return 0 if plain and served else 1


if __name__ == "__main__":
    sys.exit(main())
