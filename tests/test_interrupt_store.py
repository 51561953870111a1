"""Ctrl-C, SIGTERM or SIGHUP during `nsprof tune` keeps every config measured so far in the results
store, so that --resume measures only the rest. Real child processes and real signals; a stand-in
profiler (tests/standins.py) reports each finished config's "ns"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nsprof.store import ResultStore

ROOT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).parent / "standins.py"

TARGET = textwrap.dedent("""
    import time
    from nsprof.space import Space

    def build(config):
        def launch():
            if config["ns"] == 0:
                time.sleep(3600)  # nsprof is stopped while it runs this one
        return launch

    configs = [{"ns": 1000 + 100 * i} for i in range(7)] + [{"ns": 0}, {"ns": 5000}, {"ns": 6000}]
    space = Space(name="stoppable", configs=configs, build=build, device="cpu")
""")


def _wait_for(predicate, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopped_tune_keeps_every_finished_config(tmp_path, signum):
    (tmp_path / "stoppable.py").write_text(TARGET)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        str(STANDINS),
        "tune",
        "stoppable.py:space",
        "--backend",
        "ncu",
        "--mode",
        "direct",
        "--store",
        "r.sqlite",
        "--work-dir",
        "wd",
        "--timeout",
        "600",
    ]
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    status = tmp_path / "wd" / "part0.status"
    _wait_for(lambda: status.exists() and "start 7\n" in status.read_text(), "config 7 to start")
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in stderr, stderr
    with ResultStore(tmp_path / "r.sqlite") as store:
        rows, runs = store.frame(), store.runs()
    measured = rows[rows["error"].isna()]
    assert sorted(set(measured["config_id"])) == list(range(7))
    assert measured.groupby("config_id")["duration_ns"].first().to_dict() == {
        i: 1000.0 + 100 * i for i in range(7)
    }
    assert runs["status"].tolist() == ["interrupted"]
    # --resume measures only the configs the stopped run did not finish
    resumed = subprocess.run(
        [*command[:-2], "--timeout", "600", "--resume", "--configs", "0,1,2,3,4,5,6,8,9", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: 7 of 9 configs came from the results store" in resumed.stdout


def test_a_ctrl_c_stays_an_interrupt_when_the_store_was_replaced_meanwhile(tmp_path):
    """The store's file replaced while the tune runs, then Ctrl-C: the run's end finds the store gone
    and says so, and the command still ends as interrupted (130), not as the store's error."""
    (tmp_path / "stoppable.py").write_text(TARGET)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = (
        "tune stoppable.py:space --backend ncu --mode direct --store r.sqlite --work-dir wd --timeout 600"
    )
    proc = subprocess.Popen(
        [sys.executable, str(STANDINS), *command.split()],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    status = tmp_path / "wd" / "part0.status"
    _wait_for(lambda: status.exists() and "start 7\n" in status.read_text(), "config 7 to start")
    for leftover in tmp_path.glob("r.sqlite*"):
        leftover.unlink()
    ResultStore(tmp_path / "r.sqlite").close()  # someone else's new, empty store at the same name
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert "Traceback" not in stderr, stderr
    [said] = [line for line in stderr.splitlines() if "replaced while nsprof wrote to it" in line]
    assert said.startswith("nsprof: error: results store r.sqlite was replaced"), said
    assert stderr.rstrip().endswith("nsprof: aborted"), stderr
