"""scripts/bench_regret.py, the regret suite, run end to end with the stand-in profilers and timers:
one validate run per space, one cell per shape, every timer's regret against each truth, the recommended timer's
τ against the truth's floor, the goals said.

The truths (stand-in ncu and nsys) read each config's "ns_shapes": 1000, 1100, 1200, at both shapes. The
stand-in `cupti` timer reads the launch's value for it: the truth's order at shape 0, config 2
first at shape 1 (a pick 20% slower than the best), and `cupti_cold` always the truth's order."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, STANDINS

SCRIPT = REPO / "scripts" / "bench_regret.py"
TARGET = """
import nsprof.space

class Launch:
    def __init__(self, config, shape):
        ns = config["ns"]
        self.timer_ns = {"cupti": ns if shape == "a" else 3000 - ns, "cupti_cold": ns}

    def __call__(self):
        return None

space = nsprof.space.Space(configs=[{"ns": ns, "ns_shapes": [ns, ns]} for ns in (1000, 1100, 1200)], build=Launch,
                           device="cpu", shapes=["a", "b"])
"""


def test_each_shape_is_a_cell_and_a_timer_picking_a_slower_config_has_that_regret(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    out = tmp_path / "regret.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--spaces", f"{tmp_path / 't.py'}:space",
         "--validate-args=--timers cupti --no-external --truth ncu,nsys --mode direct --reps 2 --timer-reps 3",
         "--nsprof", f"{sys.executable} {STANDINS}", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "NSPROF_STANDIN_TIMERS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert list(record["cells"]) == [
        f"{tmp_path / 't.py'}:space#0",
        f"{tmp_path / 't.py'}:space#1",
    ]  # 2 shapes
    assert not any("error" in c for c in record["cells"].values()), record["cells"]
    for truth in ("ncu", "nsys"):
        timers = record["summary"][truth]["timers"]
        # cupti: regret 0 at shape a; at shape b it picks config 2, 1200 / 1000 - 1 by the truth
        assert timers["cupti"]["cells"] == 2
        assert timers["cupti"]["mean"] == pytest.approx(0.1) and timers["cupti"]["max"] == pytest.approx(0.2)
        assert timers["cupti_cold"]["max"] == pytest.approx(0.0)
        recommended = record["summary"][truth]["recommended"]
        assert recommended["cells"] == 2 and recommended["at_floor"] == 2
        assert {p["timer"] for p in recommended["picks"]} <= {"cupti", "cupti_cold"}
        assert recommended["max"] == pytest.approx(0.0)
    # the per-cell table: one row per shape, each truth's recommended timer with its regret
    rows = [line for line in done.stdout.splitlines() if line.startswith("| t#")]
    assert [row.split(" | ")[0] for row in rows] == ["| t#0", "| t#1"], done.stdout
    assert all(row.count("%, τ") == 2 for row in rows), rows
    lines = done.stdout.strip().splitlines()
    assert lines[-3].startswith("goal (ncu): ") and lines[-2].startswith("goal (nsys): ")
    assert all(line.endswith("in 2 of 2 cells: met") for line in lines[-3:-1])
    assert lines[-1] == "cells: 2, of which 0 failed (their figures are missing above)"


def test_the_summary_counts_a_recommended_timer_off_its_floor_as_a_miss():
    spec = importlib.util.spec_from_file_location("bench_regret", SCRIPT)
    regret = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regret)
    document = {
        "truths": ["ncu:graph", "nsys:graph"],
        "noise_floor": [{"truth": "ncu:graph", "kendall_tau": 0.90}, {"truth": "nsys:graph", "kendall_tau": 0.80}],
        "verdict": "vs ncu:graph: graph_cold tracks best (τ 0.85, regret 1.0%). vs nsys:graph: cupti tracks best (τ 0.79)",
        "agreement": [
            {"timer": "graph_cold", "truth": "ncu:graph", "kendall_tau": 0.85, "regret": 0.01, "same_best": False},
            {"timer": "cupti", "truth": "nsys:graph", "kendall_tau": 0.79, "regret": 0.0, "same_best": True},
        ],
    }  # fmt: skip
    unreliable = {
        **document,
        "verdict": "vs ncu:graph: no timer ranks configs reliably. vs nsys:graph: cupti tracks best",
    }
    result = regret.summary([regret.cell(document), regret.cell(unreliable)])
    assert result["ncu"]["recommended"]["at_floor"] == 0  # 0.85 is 0.05 below the floor 0.90; none in cell 2
    assert result["ncu"]["recommended"]["judged"] == 2 and result["ncu"]["recommended"]["cells"] == 1
    assert result["nsys"]["recommended"]["at_floor"] == 2  # 0.79 is within 0.03 of 0.80
    assert result["ncu"]["recommended"]["mean"] == pytest.approx(0.01)


def test_a_resumed_suite_keeps_the_spaces_it_holds_and_measures_the_others(tmp_path):
    """The suite in parts, as bounded calls on a lent GPU run it: a second run with --resume keeps the
    first run's space (its target is gone by then: measuring it again would fail), adds the new one,
    and only then tries again the space that failed; a run of other validate options is refused in
    one line, the file left as it was."""
    first, second = tmp_path / "t.py", tmp_path / "u.py"
    first.write_text(TARGET)
    second.write_text(TARGET)
    out = tmp_path / "regret.json"
    options = (
        "--validate-args=--timers cupti --no-external --truth ncu,nsys --mode direct --reps 2 --timer-reps 3"
    )

    def suite(spaces: str, *extra: str, validate: str = options) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(SCRIPT), "--spaces", spaces, validate, "--nsprof", f"{sys.executable} {STANDINS}",
             "--out", str(out), *extra],
            capture_output=True, text=True, timeout=600, env={**os.environ, "NSPROF_STANDIN_TIMERS": "1"},
        )  # fmt: skip

    missing = tmp_path / "missing.py"  # its validate fails: a failed space, tried again after the new ones
    assert suite(f"{missing}:space,{first}:space").returncode == 0
    kept = {k: c for k, c in json.loads(out.read_text())["cells"].items() if not k.startswith(str(missing))}
    first.unlink()
    done = suite(f"{missing}:space,{first}:space,{second}:space", "--resume")
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert list(record["cells"]) == [*kept, f"{second}:space#0", f"{second}:space#1", f"{missing}:space#0"]
    assert {k: record["cells"][k] for k in kept} == kept
    assert "error" in record["cells"][f"{missing}:space#0"] and "date" in record["cells"][f"{second}:space#0"]
    assert record["summary"]["ncu"]["timers"]["cupti"]["cells"] == 4
    assert (
        done.stdout.strip().splitlines()[-1]
        == "cells: 5, of which 1 failed (their figures are missing above)"
    )
    third = tmp_path / "v.py"
    third.write_text(TARGET)
    cells = json.loads(out.read_text())["cells"]
    stopped = suite(f"{third}:space", "--resume", "--budget-s", "0.001")  # less than any space has taken
    assert stopped.returncode == 0, stopped.stderr
    assert "stopping: 0 s left of --budget-s" in stopped.stdout
    assert json.loads(out.read_text())["cells"] == cells
    before = out.read_bytes()
    refused = suite(f"{second}:space", "--resume", validate=options.replace("--reps 2", "--reps 3"))
    assert refused.returncode != 0 and "holds a run of other validate options" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and out.read_bytes() == before


def test_a_space_past_its_timeout_keeps_the_last_lines_it_wrote(tmp_path):
    # A space longer than --timeout is recorded failed with how far it got, so that the next call can tell
    # where its time went.
    slow = tmp_path / "slow_nsprof.py"
    slow.write_text(
        "import sys, time\nprint('compiling 18 configs', file=sys.stderr)\n"
        "print('nsprof: ncu 3/72', file=sys.stderr, flush=True)\ntime.sleep(600)\n"
    )
    out = tmp_path / "regret.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--spaces", "x.py:space", "--timeout", "3",
         "--nsprof", f"{sys.executable} {slow}", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    cell = json.loads(out.read_text())["cells"]["x.py:space#0"]
    assert cell["error"] == "timed out after 3 s"
    assert cell["stderr_tail"] == ["compiling 18 configs", "nsprof: ncu 3/72"]
