"""The GPU lock is held while any child of a run is alive, even after nsprof itself was SIGKILLed:
the lock is free again only once its profiler and worker are gone. Real processes, real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import running, wait_for

from nsprof.errors import GpuBusy
from nsprof.host.lock import gpu_lock

ROOT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).parent / "standins.py"

# Config 1 starts a helper process of its own (as profilers and drivers do: nsys's daemons, a
# compiler server) that inherits the worker's descriptors, and lives 60 s (or until a test kills it);
# then it hangs.
HANGS = textwrap.dedent("""
    import pathlib, subprocess, time
    from nsprof.space import Space

    def build(config):
        def launch():
            helper = subprocess.Popen(["sleep", "60"], close_fds=False)
            pathlib.Path("helper.pid.part").write_text(str(helper.pid))
            pathlib.Path("helper.pid.part").rename("helper.pid")  # whole once it is there
            time.sleep(3600)
        return launch if config["hang"] else (lambda: None)

    space = Space(name="hangs", configs=[{"hang": False}, {"hang": True}], build=build, device="cpu")
""")


def test_the_lock_outlives_a_sigkilled_nsprof_until_its_children_are_gone(tmp_path):
    (tmp_path / "hangs.py").write_text(HANGS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # NSPROF_LOCK_DIR: this test's own (conftest)
    nsprof = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            "hangs.py:space",
            "--backend",
            "ncu",
            "--mode",
            "direct",
            "--timeout",
            "600",
            "--work-dir",
            "wd",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    status = tmp_path / "wd" / "part0.status"
    deadline = time.monotonic() + 120
    while not (status.exists() and "start 1\n" in status.read_text()):
        assert time.monotonic() < deadline, "config 1 never started"
        time.sleep(0.05)
    while not (tmp_path / "helper.pid").exists():
        assert time.monotonic() < deadline, "config 1 never started its helper"
        time.sleep(0.05)
    time.sleep(0.2)  # the pid file is written
    helper = int((tmp_path / "helper.pid").read_text())
    worker = int(status.read_text().split("\n", 1)[0].split()[1])  # its first line: "pid <pid>"
    nsprof.send_signal(signal.SIGKILL)
    nsprof.wait()
    assert wait_for(lambda: not running(worker)), "the worker outlived nsprof"
    if running(helper):  # the worker, seeing nsprof gone, may have killed it first (watch.py): then no check
        # The run's last process is the helper: the lock is held for it
        with pytest.raises(GpuBusy):
            with gpu_lock(0):
                pass
        os.kill(helper, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with gpu_lock(0):
                # Free: then no child of the run may still be alive (it would be measuring unlocked).
                assert not running(helper), "the GPU lock came free while a process of the run still ran"
                break
        except GpuBusy:
            assert time.monotonic() < deadline, "the lock stayed held a minute after the run's last process"
            time.sleep(0.05)


def test_a_profilers_agent_holding_the_lock_goes_when_nsprof_is_sigkilled(tmp_path):
    """nsys starts an agent in a session of its own that inherits the GPU lock's descriptor; no
    signal of nsprof's reaches it. Once nsprof is SIGKILLed, the worker sees its pipe close and
    takes the agent down with it, so the lock comes free."""
    (tmp_path / "hangs.py").write_text(HANGS)
    agent_pid = tmp_path / "agent.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSPROF_STANDIN_AGENT": str(agent_pid)}
    nsprof = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            "hangs.py:space",
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--timeout",
            "600",
            "--work-dir",
            "wd",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    status = tmp_path / "wd" / "part0.status"
    deadline = time.monotonic() + 120
    while not (status.exists() and "start 1\n" in status.read_text() and agent_pid.exists()):
        assert time.monotonic() < deadline, "config 1 never started"
        time.sleep(0.05)
    time.sleep(0.2)  # the pid file is written
    agent = int(agent_pid.read_text())
    assert running(agent)
    nsprof.send_signal(signal.SIGKILL)
    nsprof.wait()
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                with gpu_lock(0):
                    break
            except GpuBusy:
                assert time.monotonic() < deadline, "the agent kept the GPU lock after nsprof was SIGKILLed"
                time.sleep(0.05)
        assert not running(agent), "the lock came free while the agent still ran"
    finally:
        if running(agent):
            os.kill(agent, signal.SIGKILL)


# Config 1 hangs (nsprof is signalled while it runs); no helper of its own, only the stand-in agent.
STOPPABLE = textwrap.dedent("""
    import time
    from nsprof.space import Space

    def build(config):
        return (lambda: time.sleep(3600)) if config["hang"] else (lambda: None)

    space = Space(name="stoppable", configs=[{"hang": False}, {"hang": True}], build=build, device="cpu")
""")


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_profilers_agent_holding_the_lock_goes_when_nsprof_is_interrupted(tmp_path, signum):
    """Ctrl-C, SIGTERM or SIGHUP: nsprof stops its worker cleanly and exits; nsys's agent (in a session
    of its own, holding the GPU lock's descriptor) must not outlive it: once nsprof has exited, the lock
    is free at once and the agent is gone."""
    (tmp_path / "stoppable.py").write_text(STOPPABLE)
    agent_pid = tmp_path / "agent.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSPROF_STANDIN_AGENT": str(agent_pid)}
    nsprof = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            "stoppable.py:space",
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--timeout",
            "600",
            "--work-dir",
            "wd",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    status = tmp_path / "wd" / "part0.status"
    agent = None
    try:
        assert wait_for(
            lambda: (
                status.exists()
                and "start 1\n" in status.read_text()
                and agent_pid.exists()
                and agent_pid.read_text().strip() != ""
            ),
            120,
        ), "config 1 never started"
        agent = int(agent_pid.read_text())
        assert running(agent)
        nsprof.send_signal(signum)
        _, stderr = nsprof.communicate(timeout=120)
        assert nsprof.returncode == 130, (nsprof.returncode, stderr)
        assert "Traceback" not in stderr, stderr
        try:
            with gpu_lock(0):
                pass
        except GpuBusy as exc:
            raise AssertionError(f"nsprof exited, yet its GPU lock is still held: {exc}") from None
        assert not running(agent), "the stand-in agent outlived nsprof"
    finally:
        if nsprof.poll() is None:
            nsprof.kill()
            nsprof.wait()
        if agent is not None and running(agent):
            os.kill(agent, signal.SIGKILL)
