"""A SIGKILLed `nsprof tune` keeps in the results store what it had stored as each config
completed, and `--resume` measures only the rest. Real child processes, a real SIGKILL, synced on
the worker's status file and on the store itself, never on time.

A fast timer's bare worker writes each config's result before its "done" line, so nsprof stores
the config then: a SIGKILL loses only the config in flight. (A profiler's measurements are in its
report, which ncu and nsys complete only at their end: docs/tune.md, "Ranking and the results store".) The timer
here is tests/targets/standin_timers.py: the real worker, with a stand-in for the GPU timer.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import running, wait_for

from nsprof.store import ResultStore
from nsprof.worker.protocol import parse_status

ROOT = Path(__file__).resolve().parents[1]
STANDIN_TIMERS = Path(__file__).parent / "targets" / "standin_timers.py"
STANDINS = Path(__file__).parent / "standins.py"

# nsprof's CLI with the bare worker's fast timers stood in for (registered as the "none" backend).
RUNNER = textwrap.dedent(f"""
    import sys

    from nsprof.drivers import registry
    from nsprof.drivers.none import PlainDriver


    class StandinTimers(PlainDriver):
        def build_command(self, settings, job_file, report_base):
            return [settings.python, {str(STANDIN_TIMERS)!r}, str(job_file)]


    registry.register("none", StandinTimers, ground_truth=False)
    from nsprof.cli import main

    sys.argv[0] = "nsprof"
    main()
""")

# Config 3 hangs while the file `hang` exists (nsprof is SIGKILLed while it runs), then measures.
TARGET = textwrap.dedent("""
    import pathlib
    import time

    import nsprof.space

    HANG = pathlib.Path(__file__).with_name("hang")


    class Launch:
        def __init__(self, config):
            self.config = config
            self.timer_ns = {"cupti": config["ns"]}

        def __call__(self):
            while self.config.get("hang") and HANG.exists():
                time.sleep(0.05)


    configs = [{"ns": 1000 + 100 * i} for i in range(3)] + [{"ns": 4000, "hang": True}, {"ns": 5000}]
    space = nsprof.space.Space(name="killed", configs=configs, build=Launch, device="cpu")
""")


def _stored_configs(store: Path) -> set[int]:
    """The configs the store holds, read as another process would (read-only, no nsprof code)."""
    if not store.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            return {row[0] for row in db.execute("SELECT DISTINCT config_id FROM measurements")}
    except sqlite3.Error:  # not created yet
        return set()


def test_a_sigkilled_tune_keeps_the_configs_it_had_finished_and_resume_measures_the_rest(tmp_path):
    (tmp_path / "run_nsprof.py").write_text(RUNNER)
    (tmp_path / "killed.py").write_text(TARGET)
    (tmp_path / "hang").write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "run_nsprof.py",
        "tune",
        "killed.py:space",
        "--backend",
        "cupti",
        "--store",
        "r.sqlite",
        "--work-dir",
        "wd",
        "--timeout",
        "600",
    ]
    nsprof = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    status_file = tmp_path / "wd" / "timer-cupti" / "part0.status"
    worker = None
    try:

        def reached() -> bool:
            if not status_file.exists():
                return False
            status = parse_status(status_file.read_text())
            return set(status.done) == {0, 1, 2} and status.current == 3

        assert wait_for(lambda: reached() or nsprof.poll() is not None, 120) and nsprof.poll() is None, (
            nsprof.communicate()
        )
        worker = parse_status(status_file.read_text()).pid
        # The worker now hangs in config 3 for good: what nsprof stores of 0, 1 and 2 it stores while it runs.
        assert wait_for(lambda: _stored_configs(tmp_path / "r.sqlite") == {0, 1, 2}, 60), (
            f"the store held {sorted(_stored_configs(tmp_path / 'r.sqlite'))} of the 3 finished configs"
        )
        nsprof.send_signal(signal.SIGKILL)
        nsprof.communicate(timeout=60)
        assert wait_for(lambda: not running(worker), 60), "the worker outlived its SIGKILLed nsprof"
    finally:
        if nsprof.poll() is None:
            nsprof.kill()
            nsprof.communicate()
        if worker is not None and running(worker):
            os.kill(worker, signal.SIGKILL)

    with ResultStore(tmp_path / "r.sqlite") as store:
        rows, runs = store.frame(), store.runs()
    assert rows["error"].isna().all()
    assert sorted(rows["config_id"]) == [0, 1, 2]  # each once
    assert rows.set_index("config_id")["duration_ns"].to_dict() == {0: 1000.0, 1: 1100.0, 2: 1200.0}
    assert runs["status"].tolist() == ["running"]  # killed: never finished

    (tmp_path / "hang").unlink()
    resumed = subprocess.run(
        [*command, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: 3 of 5 configs came from the results store" in resumed.stdout, resumed.stdout
    with ResultStore(tmp_path / "r.sqlite") as store:
        rows = store.frame()
    assert sorted(rows["config_id"]) == [0, 1, 2, 3, 4]  # the resumed run measured 3 and 4 only
    assert rows.set_index("config_id")["duration_ns"].to_dict() == {
        0: 1000.0,
        1: 1100.0,
        2: 1200.0,
        3: 4000.0,
        4: 5000.0,
    }


# A profiler's stand-in (tests/standins.py): like ncu, its report is written as the kernels run, or
# like nsys, only at a clean exit; either way nsprof reads it once the worker run has ended.
PROFILED = textwrap.dedent("""
    import pathlib
    import time

    from nsprof.space import Space

    HANG = pathlib.Path(__file__).with_name("hang")


    def build(config):
        def launch():
            while config.get("hang") and HANG.exists():
                time.sleep(0.05)

        return launch


    configs = [{"ns": 1000 + 100 * i} for i in range(3)] + [{"ns": 4000, "hang": True}, {"ns": 5000}]
    space = Space(name="profiled", configs=configs, build=build, device="cpu")
""")


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_a_sigkilled_profiled_tune_loses_its_running_part_and_resume_measures_it_again(tmp_path, backend):
    """What docs/tune.md says a SIGKILL loses with a profiler: the configs of the worker run in progress
    (the profiler dies with nsprof, before its report is whole), nothing else; --resume measures them."""
    (tmp_path / "profiled.py").write_text(PROFILED)
    (tmp_path / "hang").write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(STANDINS), "tune", "profiled.py:space", "--backend", backend, "--mode", "direct",
               "--store", "r.sqlite", "--work-dir", "wd", "--timeout", "600"]  # fmt: skip
    nsprof = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    status_file = tmp_path / "wd" / "part0.status"
    worker = None
    try:

        def reached() -> bool:
            status = parse_status(status_file.read_text()) if status_file.exists() else None
            return status is not None and set(status.done) == {0, 1, 2} and status.current == 3

        assert wait_for(lambda: reached() or nsprof.poll() is not None, 120) and nsprof.poll() is None, (
            nsprof.communicate()
        )
        worker = parse_status(status_file.read_text()).pid
        nsprof.send_signal(signal.SIGKILL)
        nsprof.communicate(timeout=60)
        assert wait_for(lambda: not running(worker), 60), "the worker outlived its SIGKILLed nsprof"
    finally:
        if nsprof.poll() is None:
            nsprof.kill()
            nsprof.communicate()
        if worker is not None and running(worker):
            os.kill(worker, signal.SIGKILL)
    with ResultStore(tmp_path / "r.sqlite") as store:
        rows, runs = store.frame(), store.runs()
    assert rows.empty and runs["status"].tolist() == ["running"]

    (tmp_path / "hang").unlink()
    resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: 0 of 5 configs came from the results store" in resumed.stdout, resumed.stdout
    with ResultStore(tmp_path / "r.sqlite") as store:
        rows = store.frame()
    measured = rows[rows["error"].isna()].groupby("config_id")
    assert measured["run_id"].nunique().to_dict() == {
        c: 1 for c in range(5)
    }  # each measured once, by the resume
    assert measured["duration_ns"].first().to_dict() == {
        0: 1000.0,
        1: 1100.0,
        2: 1200.0,
        3: 4000.0,
        4: 5000.0,
    }
