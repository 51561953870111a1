"""A Triton space's configs compiled ahead in the measuring worker, on a GPU (marker `gpu`): every
compile the worker makes is a warmup before the first window (Space.compile_in_worker), none at a
config's first launch, and every config is measured, under either profiler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("backend", ["nsys", "ncu"])
def test_every_triton_compile_is_a_warmup_ahead_of_the_windows_and_none_at_a_first_launch(tmp_path, backend):
    pytest.importorskip("triton")
    log = tmp_path / "compiles.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "nsprof", "profile", "tests/targets/triton_compile_log.py:space"]
        + [
            "--backend",
            backend,
            "--mode",
            "graph",
            "--reps",
            "3",
            "--work-dir",
            str(tmp_path / "work"),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NSPROF_TEST_LOG": str(log), "TRITON_CACHE_DIR": str(tmp_path / "triton")},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert rows and all(row["error"] is None for row in rows), [r["error"] for r in rows if r["error"]][:3]
    compiles = [json.loads(line) for line in log.read_text().splitlines()]
    assert compiles, "the worker compiled nothing: was the cache not empty?"
    # where it fails, why: nsprof's stderr and each worker's log (a worker that died compiling ahead)
    why = done.stderr[-2000:] + "".join(
        f"\n--- {p.name}: " + p.read_text(errors="replace")[-1500:] for p in sorted(tmp_path.rglob("*.log"))
    )
    at_launch = [c["kernel"] for c in compiles if not c["warmup"]]
    assert not at_launch, (
        f"{len(at_launch)} of {len(compiles)} compiles at a first launch: {at_launch[:2]}; {why}"
    )
    # the worker alone: nsprof and its listing child compile none
    assert len({c["pid"] for c in compiles}) == 1, why
    status = sorted((tmp_path / "work").rglob("*.status"))[0]
    lines = status.read_text().splitlines()
    first_start = next(i for i, line in enumerate(lines) if line.startswith("start "))
    assert any(line.startswith("wait ") for line in lines[:first_start])  # compiled before the first window
