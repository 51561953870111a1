"""The regret suite: every fast timer's top-1 regret and τ against ncu and nsys, over many kernel
spaces at each of their shapes.

    source .device/setup.sh && python3 scripts/bench_regret.py --out benchmarks/results/bench_regret.json

For each space (`FILE.py:ATTR`) one `nsprof validate` runs (--validate-args; by default ncu and
nsys in graph mode, each repeated for its floor, TileLang's and Triton's own timers included where
installed), every shape of the space in its sessions; each shape is one cell (a space without
shapes is one). From the cell's part of the saved JSON: per timer and truth its τ and its regret
(how much slower, by the truth's own numbers, the timer's pick is than the truth's best), the
truth's floor (τ between its two runs) and the timer validate recommends for that truth. The
summary gives, per truth tool (ncu, nsys) and timer, the regret's mean, p95 and max over the
cells, and for the recommended timers the cells whose τ is within 0.03 of the floor (or at least
0.95); a cell where validate recommends no timer counts as a miss, and a space whose run failed
is counted apart. JSON is written after each space (a timeout keeps what ran); a
short table is printed last, the goals said met or MISSED. `--nsprof` swaps the command (tests run
it with the stand-in profilers).

The whole suite is longer than one bounded call on a lent GPU: with `--resume` a run keeps the
cells already in `--out` (a run of the same validate options) and measures only the spaces that
have none or whose run failed, so that the same command, repeated under `timeout`, ends with the
whole suite in one file. Spaces never measured come before those whose run failed, and `--timeout`
(per space) must end a space's validate before the call's own limit ends the script, so that a
space too long for one call is recorded as failed rather than tried again at every call:

    timeout 580 python3 scripts/bench_regret.py --resume --timeout 540 --budget-s 560 \
        --out benchmarks/results/bench_regret.json

`--budget-s` starts no space once less of it is left than the longest measured space took, so that the
tail of a call is not spent on a space its limit would cut off.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_aa import ROOT, run_nsprof  # noqa: E402

SPACES = ",".join(
    f"examples/{name}" if ":" in name else f"examples/{name}:space"
    for name in (
        "seed_gemm.py",
        "softmax_triton.py",
        "matmul_shapes_triton.py",
        "gemm_shapes_tilelang.py:regret",
        "add_triton.py",
        "reduce_triton.py",
        "rmsnorm_triton.py",
        "layernorm_triton.py",
        "attention_triton.py",
        "swiglu_triton.py",
        "softmax_shapes_triton.py",
    )
)
TAU_MARGIN, TAU_GOOD = 0.03, 0.95
GOAL_MEAN_REGRET, GOAL_MAX_REGRET = 0.005, 0.02


def cell(document: dict) -> dict:
    """One validate run's figures: per truth its floor τ and recommended timer; per (timer, truth)
    τ, regret and whether it picked the truth's best."""
    floors = {r["truth"]: r.get("kendall_tau") for r in document.get("noise_floor") or []}
    recommended = dict(re.findall(r"vs (\S+): (\S+) tracks best", document.get("verdict") or ""))
    return {
        "truths": {
            t: {"floor_tau": floors.get(t), "recommended": recommended.get(t)} for t in document["truths"]
        },
        "timers": [
            {k: r.get(k) for k in ("timer", "truth", "kendall_tau", "regret", "same_best")}
            for r in document.get("agreement") or []
        ],
    }


def cells_of(nsprof: list[str], target: str, validate_args: list[str], save: Path, timeout_s: float) -> list:
    """One validate run of `target`: a cell per shape (one without shapes), or [its failure]."""
    result, stdout = run_nsprof(nsprof, ["validate", target, *validate_args, "--save", str(save)], timeout_s)
    if stdout is None:
        return [result]
    document = json.loads(save.read_text())
    return [{**result, **cell(shape)} for shape in document.get("shapes") or [document]]


def _stats(values: list[float]) -> dict:
    values = sorted(v for v in values if v is not None and not math.isnan(v))
    if not values:
        return {"cells": 0}
    p95 = values[min(len(values) - 1, math.ceil(0.95 * len(values)) - 1)]
    return {"cells": len(values), "mean": sum(values) / len(values), "p95": p95, "max": values[-1]}


def tool(truth: str) -> str:
    """The truth's tool: "ncu:graph" -> "ncu", "ncu@free-warm:graph" -> "ncu"."""
    return re.split(r"[@:]", truth, maxsplit=1)[0]


def summary(cells: list[dict]) -> dict:
    """Per truth tool: every timer's regret (mean, p95, max over cells) and the recommended timers'
    regret and τ against the floor."""
    out: dict = {}
    for c in cells:
        for row in c.get("timers", []):
            entry = out.setdefault(tool(row["truth"]), {"timers": {}, "recommended": []})
            entry["timers"].setdefault(row["timer"], []).append(row["regret"])
        for truth, info in c.get("truths", {}).items():
            entry = out.setdefault(tool(truth), {"timers": {}, "recommended": []})
            row = next(
                (r for r in c["timers"] if r["truth"] == truth and r["timer"] == info["recommended"]), None
            )
            if row is None:  # validate recommended no timer here: a cell that misses
                entry["recommended"].append({"timer": None, "regret": None, "at_floor": False})
                continue
            floor, tau = info["floor_tau"], row["kendall_tau"]
            at_floor = tau is not None and (
                tau >= TAU_GOOD or (floor is not None and tau >= floor - TAU_MARGIN)
            )
            entry["recommended"].append(
                {"timer": row["timer"], "regret": row["regret"], "at_floor": at_floor}
            )
    for entry in out.values():
        entry["timers"] = {name: _stats(values) for name, values in entry["timers"].items()}
        picks = entry["recommended"]
        entry["recommended"] = {
            **_stats([p["regret"] for p in picks]),
            "at_floor": sum(p["at_floor"] for p in picks),
            "judged": len(picks),  # cells that ran, a recommendation or not
            "picks": picks,
        }
    return out


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _pick(c: dict, truth: str) -> str:
    """The recommended timer's figures in one cell against `truth`: name, regret, τ / the truth's floor."""
    info = c["truths"][truth]
    row = next((r for r in c["timers"] if r["truth"] == truth and r["timer"] == info["recommended"]), None)
    if row is None:
        return "none recommended"
    tau, floor = row["kendall_tau"], info["floor_tau"]
    return (
        f"`{row['timer']}`: {_pct(row['regret'])}%, τ {'-' if tau is None else f'{tau:.2f}'}"
        f" / {'-' if floor is None else f'{floor:.2f}'}"
    )


def print_cells(cells: dict) -> None:
    """Per cell (space#shape), validate's recommended timer against each truth: its regret, τ / floor."""
    truths = sorted({t for c in cells.values() for t in c.get("truths", {})})
    print("| cell | " + " | ".join(f"against {t}" for t in truths) + " |")
    print("|---|" + "---|" * len(truths))
    for key, c in cells.items():
        space = Path(key.rpartition(":")[0]).stem + "#" + key.rpartition("#")[2]
        if "error" in c:
            print(f"| {space} | " + " | ".join(f"failed: {c['error']}" for _ in truths) + " |")
            continue
        print(f"| {space} | " + " | ".join(_pick(c, t) if t in c["truths"] else "-" for t in truths) + " |")


def print_table(result: dict) -> None:
    print("| truth | timer | cells | regret % mean | p95 | max |\n|---|---|---|---|---|---|")
    for truth, entry in result.items():
        rows = [("recommended", entry["recommended"]), *entry["timers"].items()]
        for name, s in rows:
            print(
                f"| {truth} | {name} | {s['cells']} | {_pct(s.get('mean'))} | {_pct(s.get('p95'))} | {_pct(s.get('max'))} |"
            )
    for truth, entry in result.items():
        r = entry["recommended"]
        regret_met = (
            r["cells"] == r["judged"] > 0 and r["mean"] <= GOAL_MEAN_REGRET and r["max"] <= GOAL_MAX_REGRET
        )
        print(
            f"goal ({truth}): recommended timer's regret mean ≤ {GOAL_MEAN_REGRET:.1%}, max ≤ {GOAL_MAX_REGRET:.0%}: "
            f"{'met' if regret_met else 'MISSED'}; τ within {TAU_MARGIN} of the floor in "
            f"{r['at_floor']} of {r['judged']} cells: {'met' if r['judged'] and r['at_floor'] == r['judged'] else 'MISSED'}"
        )


def _kept(out: Path, validate_args: list[str]) -> dict:
    """The cells of an earlier run in `out` to resume (none when there is no such file); a run of
    other validate options ends the script: its cells do not compare with this run's."""
    if not out.exists():
        return {}
    try:
        earlier = json.loads(out.read_text())
        cells, command = dict(earlier["cells"]), earlier["command"]
        if not isinstance(command, list) or not all(isinstance(word, str) for word in command):
            raise ValueError(f"its command is {command!r}, not a list of options")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.exit(f"bench_regret: cannot resume from {out}: {exc}")
    if command != validate_args:
        sys.exit(
            f"bench_regret: {out} holds a run of other validate options ({shlex.join(command)}): use another --out"
        )
    print(f"resuming: {len(cells)} cells kept from {out}", flush=True)
    return cells


def _has(cells: dict, spec: str) -> bool:
    return any(key.rpartition("#")[0] == spec for key in cells)


def _measured(cells: dict, spec: str) -> bool:
    """Whether `cells` hold the space `spec`, none of its cells a failure."""
    mine = [c for key, c in cells.items() if key.rpartition("#")[0] == spec]
    return bool(mine) and not any("error" in c for c in mine)


def _write(out: Path, record: dict) -> None:
    """The record with its summary, replacing `out` whole (a run killed meanwhile leaves the last one)."""
    record["summary"] = summary(list(record["cells"].values()))
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, out)


def _out_of_budget(cells: dict, left_s: float) -> bool:
    """Whether `left_s` is shorter than the longest wall of a space measured in `cells` (said in a line;
    a failed one's wall is its timeout, no estimate): a space started then would be cut off by the
    call's own limit and leave nothing."""
    longest = max((c.get("wall_s") or 0.0 for c in cells.values() if "error" not in c), default=0.0)
    if left_s >= longest:
        return False
    print(f"stopping: {max(left_s, 0):.0f} s left of --budget-s, the longest space took {longest:.0f} s")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default=SPACES, help="comma-separated FILE.py:ATTR")
    parser.add_argument("--validate-args", default="--truth ncu,nsys --mode graph", help="validate's options")
    parser.add_argument("--nsprof", default=f"{sys.executable} -m nsprof", help="the command to run")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds per space (its validate run, every shape)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_regret.json")
    parser.add_argument(
        "--resume", action="store_true", help="keep the spaces --out already holds; measure the others"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no space once less is left of this than the longest measured space took (its wall_s)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    validate_args = shlex.split(args.validate_args)
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "command": validate_args,
        "cells": _kept(args.out, validate_args) if args.resume else {},
    }
    specs = [spec for spec in args.spaces.split(",") if spec]
    # spaces never measured first, then those whose run failed: a space that fails every time (one
    # longer than a call) cannot hold back the ones after it
    todo = sorted(
        (s for s in specs if not _measured(record["cells"], s)), key=lambda s: _has(record["cells"], s)
    )
    with tempfile.TemporaryDirectory(prefix="nsprof-regret-") as folder:
        for spec in todo:
            if args.budget_s is not None and _out_of_budget(
                record["cells"], args.budget_s - (time.monotonic() - started)
            ):
                break
            record["cells"] = {k: c for k, c in record["cells"].items() if k.rpartition("#")[0] != spec}
            save = Path(folder) / f"space_{specs.index(spec)}.json"
            for shape, result in enumerate(
                cells_of(shlex.split(args.nsprof), spec, validate_args, save, args.timeout)
            ):
                record["cells"][f"{spec}#{shape}"] = {**result, "date": time.strftime("%Y-%m-%d")}
            _write(args.out, record)
    _write(args.out, record)  # also when every space was kept: the summary over them all
    print_cells(record["cells"])
    print_table(record["summary"])
    failed = sum("error" in c for c in record["cells"].values())
    print(f"cells: {len(record['cells'])}, of which {failed} failed (their figures are missing above)")


if __name__ == "__main__":
    main()
