"""How sure `tune`'s decisions are, run after run, on a GPU machine.

    source .device/setup.sh && python3 scripts/bench_decisions.py --out decisions.json \
        [--spaces examples/seed_gemm.py:space,examples/softmax_triton.py:space] [--runs 3]

For each space, `--runs` independent `nsprof tune SPACE --truth ncu,nsys --mode graph --json`
(adaptive reps at their defaults, no store, no tuner pick or feed-back: nothing outside is
changed). Per run and truth it records the decision (winner or tie, the tie set), what the
adaptive reps did (sessions, reps, wall) against the first pass's wall, and the cross-truth
verdict. Then it checks the goals:

- no run names a single winner that another run (same truth) ranks outside its tie set, and over
  all spaces and truths: the winners that change from run to run, and those that change to a config
  outside another run's tie set (0 in at least 200 runs is the goal; `--merge` adds earlier files'
  runs, so that the count grows over bounded calls);
- each tie set's size;
- the adaptive reps cost at most 30% on top of the first pass (a plain tune);
- where ncu and nsys disagree, every run says so with both numbers and a cause.

JSON is written after each run (a timeout keeps what ran); a short table is printed last.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

SPACES = "examples/seed_gemm.py:space,examples/softmax_triton.py:space,examples/matmul_triton.py:space512"


def one_run(space: str, extra: list[str]) -> dict:
    argv = [
        sys.executable,
        "-m",
        "nsprof",
        "tune",
        space,
        "--truth",
        "ncu,nsys",
        "--mode",
        "graph",
        "--json",
        "--no-store",
        "--no-tuner-pick",
        "--no-feed-back",
        *extra,
    ]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - started
    entry: dict = {"space": space, "rc": done.returncode, "wall_s": wall}
    if done.returncode != 0 or not done.stdout.strip():
        entry["error"] = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return entry
    document = json.loads(done.stdout)
    entry["verdict"] = document.get("verdict")
    entry["agreement"] = [
        {k: p.get(k) for k in ("a", "b", "verdict", "a_under_b", "b_under_a", "words")}
        for p in document.get("agreement", [])
    ]
    entry["explanations"] = [
        {"cause": e.get("cause"), "words": e.get("words")} for e in document.get("explanations", [])
    ]
    entry["truths"] = {}
    for ranking in document.get("truths", []):
        decision = ranking.get("decision") or {}
        adaptive = ranking.get("adaptive") or {}
        entry["truths"][ranking["truth"]] = {
            "winner": ranking.get("best_config_id"),
            "tie_set": ranking.get("tie_set"),
            "kind": decision.get("kind"),
            "words": decision.get("words"),
            "first_pass_wall_s": ranking.get("first_pass_wall_s"),
            "adaptive": {k: adaptive.get(k) for k in ("stopped", "sessions", "reps", "wall_s", "words")},
        }
    return entry


def _measured(run: dict) -> bool:
    """A run that gave its decisions (an exit status of 0 with no output gave none)."""
    return run.get("rc") == 0 and "error" not in run


def flips(runs: list[dict]) -> dict:
    """Winner flips over fresh runs, per (space, truth). Each decision's pick is its best config (a
    tie's too). "changed": the picks that differ from the one most runs made; "outside": the picks
    that another run ranked outside its tie set, a flip the tie sets did not warn of. A decision
    without a pick or a tie set (untested) is neither counted nor compared with."""
    out = {"runs": 0, "changed": 0, "outside": 0}
    cells: dict[tuple, list[dict]] = {}
    for run in filter(_measured, runs):
        for truth, decision in (run.get("truths") or {}).items():
            if decision.get("winner") is not None and decision.get("tie_set"):
                cells.setdefault((run["space"], truth), []).append(decision)
    for decisions in cells.values():
        picks = [d["winner"] for d in decisions]
        usual = statistics.mode(picks)
        out["runs"] += len(picks)
        out["changed"] += sum(pick != usual for pick in picks)
        out["outside"] += sum(any(pick not in other["tie_set"] for other in decisions) for pick in picks)
    return out


def goals(runs: list[dict]) -> list[str]:
    flipped = flips(runs)
    lines = [
        f"winner flips over {flipped['runs']} fresh runs (space × truth): {flipped['changed']} changed winner, "
        f"{flipped['outside']} to a config outside another run's tie set; goal 0 outside in ≥ 200 runs: "
        + (
            "met"
            if flipped["outside"] == 0 and flipped["runs"] >= 200
            else "MISSED"
            if flipped["outside"]
            else f"none outside so far, {flipped['runs']} of 200 runs"
        )
    ]
    by_space: dict[str, list[dict]] = {}
    for r in runs:
        by_space.setdefault(r["space"], []).append(r)
    for space, entries in by_space.items():
        ok = [e for e in entries if _measured(e)]
        truths = sorted({t for e in ok for t in e["truths"]})
        for truth in truths:
            decisions = [e["truths"][truth] for e in ok if truth in e["truths"]]
            outside = [
                (a["winner"], b["tie_set"])
                for a in decisions
                for b in decisions
                if a["kind"] == "winner" and b["tie_set"] and a["winner"] not in b["tie_set"]
            ]
            sizes = [len(d["tie_set"] or []) for d in decisions]
            costs = [
                d["adaptive"]["wall_s"] / d["first_pass_wall_s"]
                for d in decisions
                if d["adaptive"].get("wall_s") is not None and d["first_pass_wall_s"]
            ]
            lines.append(
                f"{space} {truth}: winners {[d['winner'] for d in decisions]}, tie sets {sizes}; "
                + (
                    "no winner outside another run's tie set"
                    if not outside
                    else f"GOAL MISSED: winner outside another run's tie set {outside}"
                )
                + (
                    f"; adaptive cost best/median/worst {min(costs):.0%}/{statistics.median(costs):.0%}/"
                    f"{max(costs):.0%} of the first pass"
                    + (" (GOAL MISSED: > 30%)" if max(costs) > 0.30 else "")
                    if costs
                    else "; no adaptive reps ran"
                )
            )
        disagree = [e for e in ok if any(p["verdict"] == "disagree" for p in e["agreement"])]
        if disagree:
            explained = [
                e for e in disagree if e["explanations"] and all(x["cause"] for x in e["explanations"])
            ]
            lines.append(
                f"{space}: ncu and nsys disagree in {len(disagree)} of {len(ok)} runs; "
                f"a cause named in {len(explained)}"
                + (
                    ""
                    if len(disagree) == len(ok)
                    else " (the runs do not all agree on whether they disagree)"
                )
            )
        walls = [e["wall_s"] for e in ok]
        if walls:
            lines.append(
                f"{space}: wall best/median/worst {min(walls):.1f}/{statistics.median(walls):.1f}/"
                f"{max(walls):.1f} s over {len(walls)} runs ({len(entries) - len(ok)} failed)"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default=SPACES)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--start", type=int, default=0, help="the first run's number (to add runs to another file)"
    )
    parser.add_argument(
        "--merge", type=Path, nargs="*", default=[], help="earlier outputs whose runs count too"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("extra", nargs="*", help="more nsprof tune options (after --)")
    args = parser.parse_args()
    result = {"machine": platform.node(), "date": time.strftime("%Y-%m-%d"), "argv": sys.argv[1:], "runs": []}
    for earlier in args.merge:
        result["runs"] += json.loads(earlier.read_text())["runs"]
    if args.runs == 0:  # only merge: the goals over the runs given
        result["goals"] = goals(result["runs"])
        args.out.write_text(json.dumps(result, indent=1, default=str))
    # Round by round (each space once per round), so that a cut-off run still has every space.
    for index in range(args.start, args.start + args.runs):
        for space in args.spaces.split(","):
            entry = one_run(space, args.extra)
            entry["run"] = index
            result["runs"].append(entry)
            result["goals"] = goals(result["runs"])
            args.out.write_text(json.dumps(result, indent=1, default=str))
            print(
                f"{space} run {index}: rc {entry['rc']}, {entry['wall_s']:.1f} s: "
                + (entry.get("error") or str(entry.get("verdict"))),
                flush=True,
            )
    print("\n".join(result.get("goals", [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
