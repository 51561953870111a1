"""A/A check of tune's tie rule: one config entered twice, under two ids, must be called tied.

    source .device/setup.sh && python3 scripts/bench_aa.py --runs 10 --out benchmarks/results/bench_aa.json

For each space (`FILE.py:ATTR@CONFIG`, the config id defaulting to 0), a target of two configs, both
that one config, is written to a temporary folder, and `nsprof tune` runs it --runs times in fresh
processes (`--truth ncu,nsys --mode graph --no-store --no-feed-back --no-tuner-pick --json` by
default). Every run, shape and truth is one trial: the two ids are "tied" when the truth's tie set
holds both, else tune called a config different from itself: a false difference. The goal is a
false-difference rate of 5% or less. JSON is written after each run (a timeout keeps what ran); a
short table is printed last. `--nsprof` swaps the command (tests run it with the stand-in profiler).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPACES = "examples/seed_gemm.py:space@15,examples/softmax_triton.py:space,examples/add_triton.py:space"
GOAL = 0.05

WRAPPER = """import dataclasses
from nsprof.space import load_target

_inner = load_target({spec!r})
space = dataclasses.replace(
    _inner, configs=[_inner.configs[{config}]] * 2, tuner=None, name=_inner.name + " A/A {config}"
)
"""


def trials(document: dict) -> list[dict]:
    """One trial per shape and truth of a tune --json document: {shape, truth, tie_set, tied}."""
    out = []
    for shape in document.get("shapes") or [document]:
        for ranking in shape.get("truths") or [shape]:
            tie_set = sorted(ranking.get("tie_set") or [])
            out.append(
                {
                    "shape": shape.get("shape"),
                    "truth": ranking.get("truth") or shape.get("deploy", {}).get("truth"),
                    "tie_set": tie_set,
                    "tied": {0, 1} <= set(tie_set),
                }
            )
    return out


def run_nsprof(nsprof: list[str], args: list[str], timeout_s: float) -> tuple[dict, str | None]:
    """`nsprof args` from the project root: ({"wall_s"}, its stdout), or ({"error", "wall_s"}, None)
    when it timed out or failed (the error: its last line on stderr; a timeout's with "stderr_tail", the
    last lines it wrote: how far it got)."""
    began = time.monotonic()
    try:
        done = subprocess.run([*nsprof, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr or ""
        err = err.decode(errors="replace") if isinstance(err, bytes) else err
        return {
            "error": f"timed out after {timeout_s:g} s",
            "wall_s": round(time.monotonic() - began, 1),
            "stderr_tail": err.replace("\r", "\n").strip().splitlines()[-5:],
        }, None
    wall = round(time.monotonic() - began, 1)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": f"exit {done.returncode}: {lines[-1] if lines else ''}", "wall_s": wall}, None
    return {"wall_s": wall}, done.stdout


def one_run(nsprof: list[str], target: str, tune_args: list[str], timeout_s: float) -> dict:
    result, stdout = run_nsprof(nsprof, ["tune", target, *tune_args], timeout_s)
    return result if stdout is None else {**result, "trials": trials(json.loads(stdout))}


def summary(runs: list[dict]) -> dict:
    counted = [t for r in runs for t in r.get("trials", [])]
    by_truth: dict[str, dict] = {}
    for trial in counted:
        entry = by_truth.setdefault(str(trial["truth"]), {"trials": 0, "different": 0})
        entry["trials"] += 1
        entry["different"] += not trial["tied"]
    for entry in by_truth.values():
        entry["false_difference_rate"] = entry["different"] / entry["trials"]
    different = sum(not t["tied"] for t in counted)
    return {
        "trials": len(counted),
        "different": different,
        "failed_runs": sum("error" in r for r in runs),
        "false_difference_rate": different / len(counted) if counted else None,
        "by_truth": by_truth,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default=SPACES, help="comma-separated FILE.py:ATTR[@CONFIG_ID]")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--tune-args",
        default="--truth ncu,nsys --mode graph",
        help="tune's options besides --no-store --no-feed-back --no-tuner-pick --json",
    )
    parser.add_argument("--nsprof", default=f"{sys.executable} -m nsprof", help="the command to run")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_aa.json")
    args = parser.parse_args()
    tune_args = [*shlex.split(args.tune_args), "--no-store", "--no-feed-back", "--no-tuner-pick", "--json"]
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "command": tune_args,
        "goal": GOAL,
        "spaces": {},
    }
    with tempfile.TemporaryDirectory(prefix="nsprof-aa-") as folder:
        for number, entry in enumerate(s for s in args.spaces.split(",") if s):
            spec, _, config = entry.partition("@")
            where, _, attr = spec.rpartition(":")
            wrapper = Path(folder) / f"aa_{number}.py"
            wrapper.write_text(
                WRAPPER.format(spec=f"{(ROOT / where).resolve()}:{attr}", config=int(config or 0))
            )
            runs: list[dict] = []
            for _ in range(args.runs):
                runs.append(one_run(shlex.split(args.nsprof), f"{wrapper}:space", tune_args, args.timeout))
                record["spaces"][entry] = {"runs": runs, **summary(runs)}
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(record, indent=1) + "\n")
    everything = summary([r for s in record["spaces"].values() for r in s["runs"]])
    record["all"] = everything
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("| space | trials | called different | rate | failed runs |\n|---|---|---|---|---|")
    for entry, result in [*record["spaces"].items(), ("all", everything)]:
        rate = result["false_difference_rate"]
        shown = "-" if rate is None else f"{rate:.1%}"
        print(f"| {entry} | {result['trials']} | {result['different']} | {shown} | {result['failed_runs']} |")
    rate = everything["false_difference_rate"]
    verdict = "no trials" if rate is None else ("met" if rate <= GOAL else "MISSED")
    print(f"goal: false differences {GOAL:.0%} or fewer: {verdict}")


if __name__ == "__main__":
    main()
