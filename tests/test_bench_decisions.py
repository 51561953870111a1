"""scripts/bench_decisions.py's count of winner flips over fresh tune runs. Each decision's pick is
its best config (a tie's too): a pick that differs from the one most runs made is a change; one
that another run ranked outside its tie set is a flip the tie sets did not warn of (the goal: none
in at least 200 runs)."""

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
            truth: {"winner": winner, "tie_set": ties, "kind": "winner" if ties and len(ties) == 1 else "tie",
                    "first_pass_wall_s": 1.0, "adaptive": {}}
            for truth, (winner, ties) in truths.items()
        },
    }  # fmt: skip


def test_a_changed_pick_is_counted_and_so_is_each_pick_another_run_ranked_outside_its_tie_set():
    decisions = _script()
    runs = [
        _run("a", ncu=(0, [0]), nsys=(3, [3, 4])),  # nsys picks 3, tied with 4...
        _run("a", ncu=(0, [0]), nsys=(4, [4])),  # ...which another run ranked alone first: 3 is outside
        _run("a", ncu=(0, [0, 1]), nsys=(4, [4, 3])),
        _run("b", ncu=(5, [5]), nsys=(5, [5])),
        _run("b", ncu=(6, [6]), nsys=(5, [5])),  # b/ncu: 5, then 6, each outside the other's set
        _run("b", ncu=(None, []), nsys=(5, None)),  # untested decisions: neither counted nor compared
        {"space": "b", "rc": 1, "wall_s": 1.0, "error": "failed"},  # failed runs count nowhere...
        {"space": "b", "rc": 0, "wall_s": 1.0, "error": "(no output)"},  # ...nor do runs without output
    ]
    flipped = decisions.flips(runs)
    assert flipped == {"runs": 10, "changed": 2, "outside": 3}  # changed: a/nsys's 3 and one of b/ncu's
    lines = decisions.goals(runs)
    assert lines[0].startswith(
        "winner flips over 10 fresh runs (space × truth): 2 changed winner, 3 to a config"
    )
    assert lines[0].endswith("MISSED")
    assert any(
        line.startswith("b: wall best/median/worst") and "over 3 runs (2 failed)" in line for line in lines
    )


def test_no_flip_outside_is_met_only_over_200_runs_and_a_tie_pick_outside_a_winner_is_a_flip():
    decisions = _script()
    steady = [_run("a", ncu=(0, [0] if k % 2 else [0, 1]), nsys=(1, [1, 0])) for k in range(99)]
    assert decisions.flips(steady) == {"runs": 198, "changed": 0, "outside": 0}
    assert decisions.goals(steady)[0].endswith("none outside so far, 198 of 200 runs")
    assert decisions.goals([*steady, _run("a", ncu=(0, [0, 1]), nsys=(1, [1]))])[0].endswith(": met")
    # a tie that picks 1 where other runs ranked 0 alone first: 1 is outside their tie sets
    tied_off = decisions.flips([*steady, _run("a", ncu=(1, [1, 0]), nsys=(1, [1]))])
    assert tied_off["changed"] == 1 and tied_off["outside"] == 1
