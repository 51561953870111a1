"""`nsprof serve` under the real nsys on a GPU (marker `gpu`; skipped without one).

Run on the H200 (2026-12-02, 3 passed); docs/serve.md says what they show."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, run_nsprof
from conftest import running as _running

from nsprof.worker.protocol import parse_status

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
GEMM = str(ROOT / "examples" / "gemm_tilelang.py") + ":space"
FAULTY = str(FIXTURES.parent / "targets" / "faulty_gpu.py") + ":space"  # 0, 4 healthy; 1 an illegal address
SEED = 13
NSYS_US = (2.5, 3.8)  # tests/test_gpu_profile.py: the seed config under nsys on the H200


def _needs(module: str) -> None:
    """Skip without `module`, without importing it here: TileLang's import sets variables of its own
    (TL_TEMPLATE_PATH, TVM_LIBRARY_PATH, ...) in this process, which its clients would inherit and the
    server, started before, lacks: the clients were refused as not fitting (seen on the H200)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


@pytest.fixture
def nsys_server(tmp_path, own_gpu_lock_folder):
    from nsprof.host.tools import find_nsys

    if find_nsys(required=False) is None:
        pytest.skip("nsys not found")
    err = open(tmp_path / "server.err", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsprof", "serve", "--backend", "nsys", "--idle-exit", "300"],
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    state_file = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        found = (
            list(own_gpu_lock_folder.glob("nsprof-serve-*/*.serve.json"))
            if own_gpu_lock_folder.exists()
            else []
        )
        if found:
            state_file = found[0]
            break
        time.sleep(0.2)
    assert proc.poll() is None and state_file is not None, (tmp_path / "server.err").read_text()
    yield proc, json.loads(state_file.read_text()), state_file
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _profile(tmp_path: Path, name: str, target: str, configs: str) -> subprocess.CompletedProcess:
    return run_nsprof(
        "profile",
        target,
        "--backend",
        "nsys",
        "--configs",
        configs,
        "--reps",
        "5",
        "--json",
        "--work-dir",
        str(tmp_path / name),
        timeout=600,
    )


def test_two_commands_share_one_worker_under_nsys_and_measure_the_design_range(tmp_path, nsys_server):
    _needs("tilelang")
    proc, state, state_file = nsys_server
    for name in ("first", "second"):
        done = _profile(tmp_path, name, GEMM, f"{SEED},0")
        assert done.returncode == 0, done.stderr
        assert f"measured by nsprof serve (pid {state['pid']}" in done.stderr
        status = parse_status((tmp_path / name / "served.status").read_text())
        assert status.pid == state["worker_pid"] and status.ended
        assert (tmp_path / name / "served.nsys-rep").exists()
        rows = [row for row in json.loads(done.stdout) if row["config_id"] == SEED and row["error"] is None]
        for mode in ("direct", "graph"):
            durations = sorted(row["duration_ns"] for row in rows if row["mode"] == mode)
            assert len(durations) == 5, (mode, durations)
            median_us = durations[2] / 1e3
            assert NSYS_US[0] <= median_us <= NSYS_US[1], (name, mode, median_us)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    assert not state_file.exists()
    assert not _running(state["worker_pid"])


def test_an_illegal_address_in_a_served_job_ends_the_server_and_loses_nothing(tmp_path, nsys_server):
    _needs("triton")
    proc, state, state_file = nsys_server
    done = _profile(tmp_path, "faulty", FAULTY, "0,1,4")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    measured = {row["config_id"] for row in rows if row["error"] is None}
    failed = {row["config_id"] for row in rows if row["error"] is not None}
    assert measured == {0, 4} and failed == {1}
    assert proc.wait(timeout=300) == 1
    assert not state_file.exists()
    assert not _running(state["worker_pid"])
    assert os.path.exists(tmp_path / "faulty" / "part0.status")


def test_jobs_of_two_targets_in_turn_are_each_measured_by_one_served_worker_under_nsys(tmp_path, nsys_server):
    """A job whose target differs from the last one's makes the serving worker start afresh in place
    (its pid, nsys's injection and the GPU lock kept; docs/serve.md): under the real nsys each job's
    kernels must still be traced, and the job after it, of the first target again, too."""
    _needs("tilelang")
    _needs("triton")
    proc, state, state_file = nsys_server
    healthy = str(FIXTURES.parent / "targets" / "faulty_gpu.py") + ":healthy"
    for name, target, configs in (("a", GEMM, f"{SEED}"), ("b", healthy, "0,1"), ("c", GEMM, f"{SEED}")):
        done = _profile(tmp_path, name, target, configs)
        assert done.returncode == 0, (name, done.stderr)
        assert f"measured by nsprof serve (pid {state['pid']}" in done.stderr, (name, done.stderr)
        status = parse_status((tmp_path / name / "served.status").read_text())
        assert status.pid == state["worker_pid"] and status.ended, name
        rows = [row for row in json.loads(done.stdout) if row["error"] is None]
        wanted = {int(c) for c in configs.split(",")}
        assert {row["config_id"] for row in rows} == wanted, (name, rows[:3])
        for config_id in wanted:
            assert sum(1 for row in rows if row["config_id"] == config_id and row["mode"] == "direct") >= 5, (
                name
            )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    assert not _running(state["worker_pid"])


def test_a_tilelang_tune_and_its_re_tune_are_served_with_pythonpath_set(tmp_path, monkeypatch, request):
    """TileLang's import prepends to PYTHONPATH in whichever process imports it (the CLI, the served
    worker): a server and its clients started with PYTHONPATH set must still fit each other, for a
    tune of a TileLang target and for its re-tune, both measured by the one served worker. Each is a
    real tune: TileLang's own pick and the feed-back run under the server's GPU lease."""
    _needs("tilelang")
    extra = tmp_path / "site"
    extra.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([os.environ.get("PYTHONPATH", str(ROOT)), str(extra)]))
    proc, state, state_file = request.getfixturevalue("nsys_server")
    target = str(ROOT / "examples" / "autotune_tilelang.py") + ":space"
    for name in ("tune", "re-tune"):
        done = run_nsprof(
            *("tune", target, "--backend", "nsys", "--mode", "graph", "--budget-s", "0", "--no-store"),
            *("--json", "--work-dir", str(tmp_path / name)),
            timeout=600,
        )
        assert done.returncode == 0, (name, done.stderr[-3000:])
        assert f"measured by nsprof serve (pid {state['pid']}" in done.stderr, (name, done.stderr[-3000:])
        assert parse_status((tmp_path / name / "served.status").read_text()).pid == state["worker_pid"]
        document = json.loads(done.stdout)
        assert {row["config_id"] for row in document["ranked"]} == set(range(18)), name
        assert document["best_config_id"] in range(18), (name, document["notes"])
        assert any("handed to TileLang" in note for note in document["notes"]), (name, document["notes"])
        pick = document["tuner_pick"]
        assert pick["config_id"] in range(18) and pick["timer"] == "TileLang's own benchmark", (name, pick)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    assert not state_file.exists()
