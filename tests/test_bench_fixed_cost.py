"""scripts/bench_fixed_cost.py end to end on a CPU machine: the stand-in profiler's CLI
(tests/standins.py) as nsys and ncu, a CPU target with known slow phases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_fixed_cost.py"
STANDIN_CLI = f"{sys.executable} {ROOT / 'tests' / 'standins.py'}"
TARGET = str(ROOT / "tests" / "targets" / "phases.py") + ":timed"


def _bench(tmp_path, *args: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSPROF_LOCK_DIR": str(tmp_path / "locks")}
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--nsprof",
            STANDIN_CLI,
            "--target",
            TARGET,
            "--mode",
            "direct",
            "--extra",
            "--reps 1 --warmup 0",  # config 1 launches once: 0.5 s, not 2 s
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_the_benchmark_runs_each_tool_and_splits_every_run_into_phases(tmp_path):
    out = tmp_path / "fixed.json"
    done = _bench(tmp_path, "--out", str(out), "--runs", "2")
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert list(record["tools"]) == ["nsys", "ncu"]
    order = record["phase_order"]
    for tool, entry in record["tools"].items():
        assert entry["warmup"] is not None and "phases" in entry["warmup"]  # one warm-up run, kept apart
        assert len(entry["runs"]) == 2
        for run in entry["runs"]:
            phases = run["phases"]
            assert list(phases) == order, (tool, list(phases))
            assert min(phases.values()) >= 0, phases
            # the phases other than the total tile the whole process's time
            assert sum(v for k, v in phases.items() if k != "total") == pytest.approx(
                phases["total"], abs=1e-6
            )
            assert run["configs_measured"] == 3
            assert phases["build"] >= 0.3 and phases["measure"] >= 0.5  # config 0's build, config 1's launch
        assert f"\n{tool}: " in done.stdout
    for name in ("nsprof_start", "tool_start", "measure", "export", "parse", "nsprof_end", "total"):
        assert name in done.stdout
    assert "best s" in done.stdout and "median s" in done.stdout and "worst s" in done.stdout


def test_a_run_past_its_timeout_is_recorded_and_the_file_keeps_what_ran(tmp_path):
    out = tmp_path / "fixed.json"
    done = _bench(
        tmp_path, "--out", str(out), "--runs", "1", "--backends", "nsys", "--no-warmup", "--timeout", "0.2"
    )
    assert done.returncode == 1
    record = json.loads(out.read_text())
    (run,) = record["tools"]["nsys"]["runs"]
    assert run["error"].startswith("timed out") and "phases" not in run
