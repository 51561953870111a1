"""nsprof signalled or killed from outside, with the real ncu and nsys (marker `gpu`).

These check on the GPU machine what the CPU tests (tests/test_signals.py) can only stand in for:
that nsprof's death pipe reaches the worker through ncu and nsys, that nothing of a SIGKILLed
nsprof survives it, and that SIGTERM keeps what nsys measured (the worker stops cleanly).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, wait_for
from test_signals import TARGETS, _parent_of, _running, _start, _wait_until_measuring

from nsprof.session import run_session
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import parse_status

pytestmark = pytest.mark.gpu
HEALTHY = str(FIXTURES.parent / "targets" / "faulty_gpu.py") + ":healthy"
SLOW = str(TARGETS / "slow_gpu.py") + ":space"


def _session_id(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def _sessions(worker: int) -> set[int]:
    """The process sessions of the worker and of its profiler (nsprof starts that in its own)."""
    return {_session_id(worker), _session_id(_parent_of(worker))}


def _members(sessions: set[int]) -> list[int]:
    """Live processes of those process sessions."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _running(int(entry.name)) and _session_id(int(entry.name)) in sessions:
                    pids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return pids


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_gpu_the_death_pipe_reaches_the_worker_through_the_profiler(backend, tmp_path):
    pytest.importorskip("torch")
    settings = ProfileSettings(
        backend=backend, modes=("direct",), reps=1, warmup=1, timeout_s=120, work_dir=tmp_path
    )
    result = run_session(HEALTHY, 4, settings, config_ids=[0])
    watch = parse_status((tmp_path / "part0.status").read_text()).watch
    print(f"WATCH {backend}: {watch}")
    assert watch["pipe"] is True, (
        watch
    )  # False: the profiler closed it; the worker watches its parent instead
    assert result.device and result.device["uuid"].startswith(("GPU-", "MIG-")), result.device


def test_gpu_the_worker_reports_the_device_it_used(tmp_path):
    pytest.importorskip("torch")
    import os

    settings = ProfileSettings(
        backend="none", modes=("direct",), reps=1, warmup=1, timeout_s=120, work_dir=tmp_path
    )
    device = run_session(HEALTHY, 4, settings, config_ids=[0]).device
    print(f"DEVICE: {device}")
    assert device["name"] and device["uuid"].startswith(("GPU-", "MIG-"))
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        smi = subprocess.run(
            ["nvidia-smi", "-i", str(device["index"]), "--query-gpu=uuid,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        assert smi.split(", ")[0] == device["uuid"], (smi, device)


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_gpu_no_process_outlives_a_sigkilled_nsprof(backend, tmp_path):
    pytest.importorskip("torch")
    work = tmp_path / "work"
    proc = _start(
        tmp_path,
        {
            "driver": None,
            "target": SLOW,
            "n_configs": 12,
            "rows": str(tmp_path / "rows.jsonl"),
            "settings": {
                "backend": backend,
                "modes": ["direct"],
                "reps": 5,
                "warmup": 1,
                "timeout_s": 600,
                "work_dir": str(work),
            },
        },
    )
    worker = _wait_until_measuring(proc, work / "part0.status", config_id=1)
    session = _sessions(worker)
    print(f"KILL {backend}: session {session}: {_members(session)}")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    gone = wait_for(lambda: not _members(session), 30)
    left = _members(session)
    for pid in left:
        subprocess.run(["kill", "-9", str(pid)])
    assert gone, f"still running 30 s after nsprof was SIGKILLed: {left}"


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_gpu_sigterm_keeps_what_was_measured_and_leaves_no_process(backend, tmp_path):
    pytest.importorskip("torch")
    work = tmp_path / "work"
    proc = _start(
        tmp_path,
        {
            "driver": None,
            "target": SLOW,
            "n_configs": 12,
            "rows": str(tmp_path / "rows.jsonl"),
            "settings": {
                "backend": backend,
                "modes": ["direct", "graph"],
                "reps": 3,
                "warmup": 1,
                "timeout_s": 600,
                "work_dir": str(work),
            },
        },
    )
    status_file = work / "part0.status"
    worker = _wait_until_measuring(proc, status_file, config_id=2)
    session = _sessions(worker)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, (proc.returncode, err)
    lines = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert lines[-1] == "interrupted"
    rows = [row for call in lines[:-1] for row in call]
    status = parse_status(status_file.read_text())
    kept = sorted({row["config_id"] for row in rows if row["error"] is None})
    print(f"SIGTERM {backend}: done {status.done}, stopped {status.stopped}, kept {kept}")
    assert status.stopped and kept == sorted(status.done) and len(kept) >= 2
    reps = {(row["config_id"], row["mode"], row["rep"]) for row in rows}
    assert len(reps) == len(kept) * 2 * 3  # whole configs: every (mode, rep)
    assert not _members(session)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-s"]))
