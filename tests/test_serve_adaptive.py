"""Adaptive reps through `nsprof serve`: every session is a job of the server's one worker process, so
a close winner's check in a second process (nsprof.analysis.adaptive.to_confirm) cannot happen there:
`tune` must not spend a session on it, nor say that it did. A stand-in server (tests/test_serve.py's
fixture) and real `tune` clients through the stand-in CLI."""

from __future__ import annotations

import json
import signal

import pytest
from conftest import NOISY_TARGET, run_nsprof
from test_serve import _ended, server  # noqa: F401 - server: the fixture

# 0.6% apart (a close winner under the default --equivalence 1%), every rep alike
CLOSE = [{"id": 0, "ns": 1000.0}, {"id": 1, "ns": 1006.0}, {"id": 2, "ns": 3000.0}]


@pytest.mark.parametrize("store", ["store", "no-store"])
def test_a_served_tune_runs_no_check_its_server_cannot_put_in_a_second_process(
    tmp_path,
    server,  # noqa: F811
    own_gpu_lock_folder,
    store,
):
    proc, state = server("--idle-exit", "3600")
    log = tmp_path / "launches.log"
    (tmp_path / "t.py").write_text(NOISY_TARGET.format(log=str(log), configs=CLOSE))
    kept = ("--store", str(tmp_path / "results.sqlite")) if store == "store" else ("--no-store",)
    done = run_nsprof(
        *("tune", "t.py:space", "--backend", "nsys", "--mode", "direct", "--reps", "5", "--budget-s", "600"),
        *(*kept, "--no-feed-back", "--no-tuner-pick", "--json"),
        cwd=tmp_path,
        standins=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"measured by nsprof serve (pid {state['pid']}" in done.stderr
    # the first pass ran in the served worker; the check would have run there too, so it did not run
    assert {line.split()[0] for line in log.read_text().splitlines()} == {str(state["worker_pid"])}
    document = json.loads(done.stdout)
    adaptive = document["adaptive"]
    assert adaptive["history"] == [] and adaptive["sessions"] == 0, adaptive
    assert document["best_config_id"] == 0 and adaptive["stopped"] == "separated"
    assert "second process too" not in adaptive["words"], adaptive["words"]
    assert "not checked in a second" in adaptive["note"], adaptive
    assert f"nsprof serve's worker (pid {state['worker_pid']})" in adaptive["note"], adaptive
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0
