"""Ctrl-C of `nsprof tune --scheduler ADDRESS` (or `--devices 0,1`) stops the work it started on the
cluster: the batch still running on a Dask worker stops its session as Ctrl-C stops one on the command
line (its profiled worker ends), an existing cluster's Dask worker lives on, what was stored stays
stored, and nsprof ends as interrupted (130) in one line.

Real processes throughout: for --scheduler a `dask scheduler` and two `dask worker`s (Nanny and all) on
127.0.0.1, as docs/profile.md starts them; the client a child nsprof with the stand-in profiler
(tests/standins.py).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.xdist_group("cluster_interrupt")  # one worker: one running cluster for the module

from nsprof.host.children import pid_alive  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent
CLI = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import standins; standins.install(); "
    "from nsprof.cli import main; sys.argv[0] = 'nsprof'; main()"
)

# Batch 0 (configs 0..4) measures and comes back; batch 1 (5..9) hangs in config 7, whose launch first
# leaves a mark naming the profiled worker's pid and its parent's (the Dask worker process).
TARGET = textwrap.dedent("""
    import os, pathlib, time
    from nsprof.space import Space

    HERE = pathlib.Path(__file__).parent

    def build(config):
        def launch():
            if config["ns"] == 0:
                (HERE / f"running.{os.getpid()}.{os.getppid()}").write_text("")
                time.sleep(3600)  # the client is interrupted while its batch runs this one
        return launch

    configs = [{"ns": 1000 + 100 * i} for i in range(7)] + [{"ns": 0}, {"ns": 5000}, {"ns": 6000}]
    space = Space(name="stoppable", configs=configs, build=build, device="cpu")
""")


def _wait_for(predicate, what: str, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while not (found := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)
    return found


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each in turn (the workers before their scheduler), SIGKILL one that does not end."""
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _env(folder: Path) -> dict:
    """The environment of the cluster's processes and of nsprof: the tests' modules importable (the workers
    unpickle standins' driver), the GPU locks in `folder`."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
        "NSPROF_LOCK_DIR": str(folder / "locks"),
    }


@pytest.fixture(scope="module")
def running_cluster(tmp_path_factory):
    """A running Dask cluster of two GPU workers ("GPUs" 0 and 1), as docs/profile.md starts one: (its
    address, the environment). One for the module: an existing cluster outlives each run, which is the
    point of these tests (each checks that its worker lives on and takes the next task)."""
    folder = tmp_path_factory.mktemp("cluster")
    env, info = _env(folder), folder / "scheduler.json"
    dask = [sys.executable, "-m"]
    procs = [
        subprocess.Popen(
            [*dask, "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"]
            + ["--no-dashboard", "--scheduler-file", str(info)],
            cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    try:
        address = _wait_for(
            lambda: info.exists() and json.loads(info.read_text() or "{}").get("address"), "the scheduler"
        )
        for gpu in ("0", "1"):
            procs.append(
                subprocess.Popen(
                    [*dask, "distributed.cli.dask_worker", address, "--nthreads", "1", "--resources", "GPU=1"]
                    + ["--no-dashboard"],
                    cwd=folder, env={**env, "CUDA_VISIBLE_DEVICES": gpu},
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        _wait_for(lambda: _workers(address) == 2, "both Dask workers")  # one batch each
        yield address, env
    finally:
        _stop(procs[::-1])


@pytest.fixture(params=["--scheduler", "--devices"])
def cluster(request, tmp_path):
    """nsprof's options for a cluster of two GPU workers, and its environment: the running cluster's
    address, or a LocalCluster of nsprof's own (its GPU locks this test's own)."""
    if request.param == "--devices":
        return ["--devices", "0,1"], _env(tmp_path)
    address, env = request.getfixturevalue("running_cluster")
    return ["--scheduler", address], env


def _done(status: Path) -> set[int]:
    """The configs a session's worker finished, by its status file (none while there is none)."""
    from nsprof.worker.protocol import parse_status

    return set(parse_status(status.read_text()).done) if status.exists() else set()


def _workers(address: str) -> int:
    import distributed

    with distributed.Client(address, timeout=60) as client:
        return len(client.scheduler_info()["workers"])


def _stored_configs(store: Path) -> set[int]:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as db:
            return {c for (c,) in db.execute("SELECT DISTINCT config_id FROM measurements")}
    except sqlite3.Error:  # not made yet, or being written
        return set()


def _next_task_runs_on(address: str, pid: int) -> bool:
    """A new task needing the GPU runs on the Dask worker process `pid`: it lives on, its GPU free again
    (a cancelled task holds its resources until it has returned)."""
    import distributed

    with distributed.Client(address, timeout=60) as client:
        (where,) = [at for at, its in client.run(os.getpid).items() if its == pid]
        future = client.submit(os.getpid, workers=[where], resources={"GPU": 1}, pure=False)
        return future.result(timeout=120) == pid


@pytest.fixture
def stopping(tmp_path, cluster):
    """`nsprof tune` of TARGET on the cluster, once batch 0 is back and stored and batch 1 runs config 7:
    (nsprof's process, the pids of batch 1's profiled worker and of the Dask worker running it)."""
    options, env = cluster
    (tmp_path / "stoppable.py").write_text(TARGET)
    client = subprocess.Popen(
        [sys.executable, "-c", CLI, str(TESTS), "tune", "stoppable.py:space", "--backend", "ncu"]
        + ["--mode", "direct", "--reps", "1", "--store", str(tmp_path / "r.sqlite"), "--timeout", "600"]
        + ["--work-dir", str(tmp_path / "wd"), "--no-feed-back", *options],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    running: list[int] = []
    try:
        mark = _wait_for(lambda: next(tmp_path.glob("running.*"), None), "config 7 to run", 300)
        running = [int(pid) for pid in mark.name.split(".")[1:]]
        _wait_for(lambda: _stored_configs(tmp_path / "r.sqlite") >= set(range(5)), "batch 0 stored", 300)
        yield client, *running
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
        for pid in running[:1]:  # on failure: the batch's profiled worker, which nothing else stops
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def _batch_stopped(tmp_path, cluster, worker: int, dask_worker: int) -> None:
    """Batch 1 stopped its session as Ctrl-C stops one (not at config 7's --timeout): its profiled
    worker ended. An existing cluster's Dask worker that ran it lives on and takes the next task, and
    the session's report of configs 5 and 6 is kept in its work folder (a LocalCluster's worker ended
    with nsprof)."""
    options, _ = cluster
    _wait_for(lambda: not pid_alive(worker), "the batch's profiled worker to end")
    if options[0] == "--devices":
        assert not pid_alive(dask_worker)
        return
    assert _next_task_runs_on(options[1], dask_worker)
    (report,) = (tmp_path / "wd" / "batch1").glob("part0*.standin.json")
    assert {5, 6} <= set(json.loads(report.read_text())["done"])


def test_ctrl_c_stops_the_batch_running_on_a_dask_worker(tmp_path, cluster, stopping):
    client, worker, dask_worker = stopping
    client.send_signal(signal.SIGINT)
    _, stderr = client.communicate(timeout=120)
    assert client.returncode == 130, (client.returncode, stderr)
    assert stderr.strip().splitlines()[-1] == "nsprof: aborted", stderr
    assert "Traceback" not in stderr
    _batch_stopped(tmp_path, cluster, worker, dask_worker)
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        stored = {c for (c,) in db.execute("SELECT DISTINCT config_id FROM measurements")}
        (status,) = db.execute("SELECT status FROM runs").fetchone()
    # batch 0's rows kept, and what batch 1 finished before it was stopped (configs 5 and 6): it hands them
    # over as it stops, as a session stopped on the command line does
    assert stored == set(range(7)) and status == "interrupted"


@pytest.mark.parametrize("cluster", ["--scheduler"], indirect=True)
def test_a_batch_whose_nsprof_was_killed_stops_too(tmp_path, cluster, stopping):
    client, worker, dask_worker = stopping
    client.kill()  # SIGKILL: nothing of nsprof's own cancels the batch
    client.communicate(timeout=120)
    _batch_stopped(tmp_path, cluster, worker, dask_worker)


def test_profile_interrupted_on_a_cluster_shows_what_a_running_batch_finished(tmp_path, cluster):
    """`profile` on two GPU workers: batch 0 (configs 0..4) is back, batch 1 measured 5 and 6 and hangs in 7.
    Interrupted, it shows every config measured (0..6): the running batch hands over what it finished as it
    stops (they were in its session's reports only)."""
    options, env = cluster
    (tmp_path / "stoppable.py").write_text(TARGET)
    client = subprocess.Popen(
        [sys.executable, "-c", CLI, str(TESTS), "profile", "stoppable.py:space", "--backend", "ncu"]
        + ["--mode", "direct", "--reps", "1", "--warmup", "0", "--timeout", "600", "--json", *options]
        + ["--work-dir", str(tmp_path / "wd"), "--verbose"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = None
    try:
        mark = _wait_for(lambda: next(tmp_path.glob("running.*"), None), "config 7 to run", 300)
        worker = int(mark.name.split(".")[1])
        _wait_for(lambda: set(range(5)) <= _done(tmp_path / "wd" / "batch0" / "part0.status"), "batch 0", 300)
        client.send_signal(signal.SIGINT)  # batch 0 back or not: what it measured is shown either way
        out, err = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
        if worker is not None and pid_alive(worker):
            os.kill(worker, signal.SIGKILL)
    assert client.returncode == 130 and "Traceback" not in err, err
    measured = {row["config_id"] for row in json.loads(out) if row["error"] is None}
    assert measured == set(range(7)), (measured, err)
