"""scripts/bench_aa.py, the A/A check of tune's tie rule, run end to end with the stand-in profiler:
one config entered twice, every run, shape and truth a trial, the rate and the goal said."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from conftest import REPO, STANDINS

SCRIPT = REPO / "scripts" / "bench_aa.py"
TARGET = """
import nsprof.space
space = nsprof.space.Space(configs=[{"i": 0, "ns_shapes": [2000, 3000]}, {"i": 1, "ns_shapes": [1000, 1500]}],
                           build=lambda c, s: (lambda: None), device="cpu", shapes=[1, 2])
"""


def _script():
    spec = importlib.util.spec_from_file_location("bench_aa", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_run_shape_and_truth_is_one_trial_and_a_config_equal_to_itself_is_tied(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    out = tmp_path / "aa.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--spaces", f"{tmp_path / 't.py'}:space@1", "--runs", "2",
         "--tune-args=--backend nsys --mode direct --reps 3 --budget-s 0",
         "--nsprof", f"{sys.executable} {STANDINS}", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (space,) = json.loads(out.read_text())["spaces"].values()
    assert [len(run["trials"]) for run in space["runs"]] == [2, 2]  # 2 shapes x 1 truth, per run
    assert all(
        t["tie_set"] == [0, 1] and t["tied"] and t["truth"] == "nsys"
        for r in space["runs"]
        for t in r["trials"]
    )
    assert (space["trials"], space["different"], space["false_difference_rate"]) == (4, 0, 0.0)
    assert done.stdout.strip().splitlines()[-1] == "goal: false differences 5% or fewer: met"


def test_a_tie_set_without_the_copy_is_a_false_difference_and_misses_the_goal():
    aa = _script()
    document = {"shapes": [
        {"shape": 0, "truths": [{"truth": "ncu", "tie_set": [1]}, {"truth": "nsys", "tie_set": [0, 1]}]},
        {"shape": 1, "truths": [{"truth": "ncu", "tie_set": [0, 1]}, {"truth": "nsys", "tie_set": [0, 1]}]},
    ]}  # fmt: skip
    trials = aa.trials(document)
    assert [(t["shape"], t["truth"], t["tied"]) for t in trials] == [
        (0, "ncu", False), (0, "nsys", True), (1, "ncu", True), (1, "nsys", True)
    ]  # fmt: skip
    result = aa.summary([{"trials": trials}, {"error": "exit 2: no config was measured"}])
    assert (result["trials"], result["different"], result["failed_runs"]) == (4, 1, 1)
    assert result["by_truth"]["ncu"]["false_difference_rate"] == 0.5 > aa.GOAL
