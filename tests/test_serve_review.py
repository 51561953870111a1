"""`nsprof serve`: a served job measures what the client's own standalone session would have measured
(its folder, its environment, its target's own helpers), through real processes (the stand-in server of
tests/test_serve.py and real `nsprof profile` clients)."""

from __future__ import annotations

import os
import signal

import pytest
from test_serve import GATE, TARGETS, _client, _ended, _measured, _rows, _status, server  # noqa: F401 - a fixture

GATE_SOURCE = (TARGETS / "serve_gate.py").read_text()  # configs 0 and 2 are plain CPU configs

# A target of the same name in the server's folder that is not the client's: every build fails there.
WRONG_SOURCE = '''
import nsprof.space

def build(config):
    raise ValueError("the server's own t.py was measured, not the client's")

space = nsprof.space.Space(name="wrong", configs=[{"kind": "ok"}] * 3, build=build, device="cpu")
'''


@pytest.mark.parametrize("work_dir", ["absolute", "relative"])
def test_a_relative_target_and_work_dir_are_the_clients_not_the_servers(tmp_path, server, own_gpu_lock_folder,
                                                                         work_dir):
    """The client's cwd decides what a relative target path (and --work-dir) names, as standalone."""
    server_cwd, client_cwd = tmp_path / "server_cwd", tmp_path / "client_cwd"
    server_cwd.mkdir()
    client_cwd.mkdir()
    (server_cwd / "t.py").write_text(WRONG_SOURCE)
    (client_cwd / "t.py").write_text(GATE_SOURCE)
    proc, state = server("--idle-exit", "120", cwd=server_cwd)
    done = _client(tmp_path, "w", target="t.py:space", configs="0,2", cwd=client_cwd,
                   work_dir=str(tmp_path / "w") if work_dir == "absolute" else "w")
    assert done.returncode == 0, done.stderr
    rows = _rows(done)
    assert not [row["error"] for row in rows if row["error"]], "the server's t.py was measured"
    assert _measured(rows) == {0: 2, 2: 2}
    folder = tmp_path / "w" if work_dir == "absolute" else client_cwd / "w"
    status = _status(folder.parent, folder.name)
    assert status.pid == state["worker_pid"] and status.ended, "it was served"
    assert not list(server_cwd.glob("w*")), "nothing of the job went to the server's folder"
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


@pytest.mark.parametrize("variable", ["NSPROF_TEST_GATE", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"])
def test_a_server_started_in_another_environment_is_not_used(tmp_path, server, own_gpu_lock_folder, variable):
    """A variable the target (or CUDA, or Python) reads differs between the server and the client: the
    served worker would measure under the server's, so the client must not use it (here: GPU busy)."""
    proc, state = server("--idle-exit", "120")
    value = {"NSPROF_TEST_GATE": str(tmp_path / "gate"), "CUDA_VISIBLE_DEVICES": "0,1",
             "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}[variable]
    done = _client(tmp_path, "other", target=GATE, configs="0,2", env={variable: value})
    assert not (tmp_path / "other" / "served.status").exists(), "a server of another environment measured it"
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("nsprof: error:") and variable in last, last
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


HELPER_CHECK = '''
from pathlib import Path

import helper
import nsprof.space

if Path(helper.__file__).parent != Path(__file__).parent:
    raise ImportError(f"{__file__} got the helper of {helper.__file__}")

def build(config):
    return lambda: None

space = nsprof.space.Space(name="helper", configs=[{"kind": "ok"}] * 2, build=build, device="cpu")
'''


def test_a_served_target_imports_its_own_helpers_not_an_earlier_jobs(tmp_path, server, own_gpu_lock_folder):
    """Two projects, each with its own helper.py: the second job must not get the first job's helper
    (still in sys.modules, its folder still on sys.path)."""
    for project in ("a", "b"):
        (tmp_path / project).mkdir()
        (tmp_path / project / "helper.py").write_text(f"NAME = {project!r}\n")
        (tmp_path / project / "t.py").write_text(HELPER_CHECK)
    proc, state = server("--idle-exit", "120")
    first = _client(tmp_path, "first", target=str(tmp_path / "a" / "t.py") + ":space", configs="0,1")
    assert first.returncode == 0, first.stderr
    second = _client(tmp_path, "second", target=str(tmp_path / "b" / "t.py") + ":space", configs="0,1")
    assert second.returncode == 0, second.stderr
    assert _measured(_rows(second)) == {0: 2, 1: 2}
    assert _status(tmp_path, "second").pid == state["worker_pid"], "both were served by one worker"
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


HEAVY_SOURCE = '''
import sys

# Like torch: a package that cannot be imported twice into one process (its registrations, its CUDA state).
if getattr(sys, "_heavy_imported", False):
    raise RuntimeError("heavy was imported a second time into this process")
sys._heavy_imported = True
'''


def test_a_package_installed_below_the_targets_folder_is_not_imported_again(tmp_path, server, own_gpu_lock_folder):
    """A project whose virtual environment lies in its own folder (uv's .venv): the packages it installs are
    under the target's folder, but they are not the target's helpers, and must not be dropped and imported
    again for the next job (torch cannot be)."""
    project = tmp_path / "project"
    site = project / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "heavy.py").write_text(HEAVY_SOURCE)
    (project / "t.py").write_text("import heavy  # noqa\n" + GATE_SOURCE)
    env = {"PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}"}
    proc, state = server("--idle-exit", "120", env=env)
    for name in ("first", "second"):
        done = _client(tmp_path, name, target=str(project / "t.py") + ":space", configs="0,2", env=env)
        assert done.returncode == 0, done.stderr
        assert _measured(_rows(done)) == {0: 2, 2: 2}
        assert _status(tmp_path, name).pid == state["worker_pid"]
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0
