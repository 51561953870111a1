"""nsprof serve at its edges: a module target's helpers, the client's environment, a resume waiting behind
another run's served job (real processes: the stand-in server of tests/test_serve.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import wait_for
from test_serve import (  # noqa: F401  (server: the fixture)
    STANDINS,
    _client,
    _ended,
    _measured,
    _rows,
    _status,
    server,
)

MODULE_TARGET = """
import json, os, pathlib
import mthelper
import nsprof.space

def build(config):
    with open(pathlib.Path(__file__).parent / "observed.jsonl", "a") as out:
        out.write(json.dumps({"version": mthelper.VERSION, "pid": os.getpid()}) + "\\n")
    return lambda: None

space = nsprof.space.Space(name="mt", configs=[{"i": 0}, {"i": 1}], build=build, device="cpu")
"""


def test_a_module_targets_edited_helper_is_seen_by_the_next_served_job(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    """docs/serve.md: "the target is loaded fresh (the modules imported from the target's folder are dropped
    first, so an edited helper is seen too)". A module target (`mt:space`, found from the client's folder)
    whose helper is edited between two runs: the second served job must run the edited helper, as a
    standalone worker would (the client's fingerprint already covers the edit, so nothing refuses it)."""
    project, server_cwd = tmp_path / "project", tmp_path / "server_cwd"
    project.mkdir()
    server_cwd.mkdir()
    (project / "mt.py").write_text(MODULE_TARGET)
    helper = project / "mthelper.py"
    helper.write_text("VERSION = 1\n")
    proc, state = server("--idle-exit", "120", cwd=server_cwd)
    first = _client(tmp_path, "first", target="mt:space", configs="0,1", cwd=project)
    assert first.returncode == 0, first.stderr
    helper.write_text("VERSION = 22  # edited\n")
    os.utime(helper, (helper.stat().st_atime + 10, helper.stat().st_mtime + 10))
    second = _client(tmp_path, "second", target="mt:space", configs="0,1", cwd=project)
    assert second.returncode == 0, second.stderr
    assert _status(tmp_path, "second").pid == state["worker_pid"], "served"
    seen = [json.loads(line)["version"] for line in (project / "observed.jsonl").read_text().splitlines()]
    assert seen[:2] == [1, 1]
    assert seen[2:] == [22, 22], f"the served job ran the helper as it was before the edit: {seen}"
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_variable_the_client_unset_after_it_started_is_not_the_served_jobs(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    """The mirror of test_serve.py's "a variable the client set after it started": a program that removes a
    variable before it measures gives a standalone worker an environment without it; a served job must not
    see it either (the worker keeps every variable of its own start that the client's request lacks)."""
    (tmp_path / "u.py").write_text(
        "import os\n\nimport nsprof.space\n\n"
        "def build(config):\n"
        "    if 'NSPROF_TEST_UNSET_BY_CLIENT' in os.environ:\n"
        "        raise RuntimeError('the job sees a variable its client removed')\n"
        "    return lambda: None\n\n"
        "space = nsprof.space.Space(name='u', configs=[{}, {}], build=build, device='cpu')\n"
    )
    program = tmp_path / "client.py"
    program.write_text(
        "import os, runpy, sys\n"
        "del os.environ['NSPROF_TEST_UNSET_BY_CLIENT']\n"
        f"sys.argv[0] = {str(STANDINS)!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    env = {"NSPROF_TEST_UNSET_BY_CLIENT": "1"}
    target = f"{tmp_path / 'u.py'}:space"
    standalone = _client(tmp_path, "alone", target=target, configs="0,1", program=program, env=env)
    assert standalone.returncode == 0 and _measured(_rows(standalone)) == {0: 2, 1: 2}, standalone.stderr
    proc, state = server("--idle-exit", "120", env=env)
    served = _client(tmp_path, "served", target=target, configs="0,1", program=program, env=env)
    assert served.returncode == 0, served.stderr
    assert _status(tmp_path, "served").pid == state["worker_pid"], "served"
    errors = [row["error"] for row in _rows(served) if row["error"]]
    assert not errors and _measured(_rows(served)) == {0: 2, 1: 2}, errors
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


GATE = str(Path(__file__).parent / "targets" / "serve_gate.py") + ":space"


def _tune(tmp_path: Path, name: str, *more: str) -> subprocess.Popen:
    command = [sys.executable, str(STANDINS), "tune", GATE, "--backend", "nsys", "--mode", "direct",
               "--reps", "1", "--budget-s", "0", "--no-feed-back",
               "--store", str(tmp_path / "s.sqlite"), "--work-dir", str(tmp_path / name), *more]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_resume_wait_behind_another_runs_served_job_does_not_measure_its_points_again(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    """docs/tune.md: "With --wait, a --resume that finds another nsprof run on the GPU decides what is
    missing only once that run has ended, so that what it stored is not measured twice". Through
    `nsprof serve` the other run is a job of the server (which holds the GPU lock): the resume waits for
    that run to store its first pass (it decided at once, queued behind that job, and measured every config
    that job stored again)."""
    import sqlite3

    gate = tmp_path / "gate"
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    first = _tune(tmp_path, "first")
    second = None
    try:
        assert wait_for(
            lambda: (
                (tmp_path / "first" / "served.status").exists()
                and 1 in _status(tmp_path, "first").started
                or first.poll() is not None
            )
        )
        second = _tune(tmp_path, "second", "--resume", "--wait")
        said = ""
        for line in second.stderr:  # it decided, and queued behind the first run's job
            said += line
            if "waits in its queue" in line or "waiting" in line:
                break
        gate.write_text("")
        _, err1 = first.communicate(timeout=120)
        _, err2 = second.communicate(timeout=120)
    finally:
        gate.write_text("")
        for child in (first, second):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
    assert first.returncode == 0, err1
    assert second.returncode == 0, said + err2
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        stored = dict(
            db.execute("SELECT config_id, COUNT(*) FROM measurements WHERE error IS NULL GROUP BY 1")
        )
    second_job = tmp_path / "second" / "served.status"
    again = _status(tmp_path, "second").done if second_job.exists() else []
    assert stored == {0: 1, 1: 1, 2: 1} and not again, (
        f"the resume measured again what the served run stored: {stored}, its job did {again}; {said}"
    )
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def _runs_stored(store: Path) -> int:
    import sqlite3

    if not store.exists():
        return 0
    with contextlib.closing(sqlite3.connect(store)) as db:
        try:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        except sqlite3.OperationalError:  # its tables not made yet
            return 0


def test_a_served_resume_wait_is_not_held_by_a_run_the_server_cannot_take(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    """A run the nsys server cannot take (ncu, --wait) waits for the GPU the server holds, and stores nothing
    until the server ends: a served `--resume --wait` does not wait for it (it waited, as if for a run
    measuring through the server, for the server's whole life)."""
    proc, state = server("--idle-exit", "120")
    other = _tune(tmp_path, "other", "--backend", "ncu", "--wait")
    resume = None
    try:
        assert wait_for(lambda: _runs_stored(tmp_path / "s.sqlite") == 1), (
            "the ncu run never began its first pass"
        )
        resume = _tune(tmp_path, "resume", "--backend", "nsys", "--resume", "--wait")
        _, err = resume.communicate(timeout=120)
    finally:
        for child in (other, resume):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
    assert resume.returncode == 0, err
    assert "measuring through nsprof serve" not in err, err
    assert f"measured by nsprof serve (pid {state['pid']}" in err, err
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0
