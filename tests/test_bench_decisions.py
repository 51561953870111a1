"""scripts/bench_decisions.py's count of winner flips over fresh tune runs: a winner that differs
from the one most runs named is a change; one that another run ranked outside its tie set is a flip
the tie sets did not warn of (the goal: none in at least 200 runs)."""

from __future__ import annotations

import importlib.util

from conftest import REPO

SCRIPT = REPO / "scripts" / "bench_decisions.py"


def _script():
    spec = importlib.util.spec_from_file_location("bench_decisions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(space: str, **truths) -> dict:
    return {
        "space": space,
        "rc": 0,
        "wall_s": 1.0,
        "agreement": [],
        "explanations": [],
        "truths": {
            truth: {"winner": winner, "tie_set": ties, "kind": "winner" if len(ties) == 1 else "tie",
                    "first_pass_wall_s": 1.0, "adaptive": {}}
            for truth, (winner, ties) in truths.items()
        },
    }  # fmt: skip


def test_a_changed_winner_is_counted_and_so_is_each_winner_another_run_ranked_outside_its_tie_set():
    decisions = _script()
    runs = [
        _run("a", ncu=(0, [0]), nsys=(3, [3, 4])),  # nsys: a tie, no single winner
        _run("a", ncu=(0, [0]), nsys=(4, [4])),
        _run("a", ncu=(0, [0, 1]), nsys=(4, [4, 3])),  # ties that hold the other runs' winners
        _run("b", ncu=(5, [5]), nsys=(5, [5])),
        _run("b", ncu=(6, [6]), nsys=(5, [5])),  # b/ncu: 5, then 6, each outside the other's set
        {"space": "b", "rc": 1, "wall_s": 1.0, "error": "failed"},  # a failed run counts nowhere
    ]
    flipped = decisions.flips(runs)
    assert flipped == {"runs": 10, "changed": 1, "outside": 2}
    first = decisions.goals(runs)[0]
    assert first.startswith(
        "winner flips over 10 fresh runs (space × truth): 1 changed winner, 2 to a config"
    )
    assert first.endswith("MISSED")


def test_no_flip_outside_is_met_only_over_200_runs():
    decisions = _script()
    steady = [_run("a", ncu=(0, [0, 1]), nsys=(1, [1, 0])) for _ in range(99)]
    assert decisions.goals(steady)[0].endswith("none outside so far, 198 of 200 runs")
    assert decisions.goals(steady + [_run("a", ncu=(1, [1, 0]), nsys=(0, [0, 1]))])[0].endswith(": met")
