"""`nsprof serve` and the environment a served worker really measures in, through real processes (the
stand-in server and serving worker of tests/test_serve.py, real clients): a target that changes os.environ
at its import (TileLang prepends to PYTHONPATH) is served, since its import in the worker does the same;
a server whose environment truly differs is named, with what to do, and `--wait` does not wait in silence
for a server that never fits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import test_serve
from test_serve import DEADLINE_S, HEALTHY, STANDINS, _client, _ended, _measured, _rows, _status

server = test_serve.server  # the stand-in server fixture, its servers ended at each test's end
REPO = Path(__file__).resolve().parents[1]

# As TileLang's env.py does (prepend_pythonpath): at its import, in every process that imports it.
PREPENDS = """
import os

import nsprof.space

os.environ["PYTHONPATH"] = "/somewhere:" + os.environ.get("PYTHONPATH", "")


def build(config):
    return lambda: None


space = nsprof.space.Space(name="prepends", configs=[{}, {}, {}], build=build, device="cpu")
"""


def _without_pythonpath(tmp_path: Path) -> dict[str, str | None]:
    """Variables under which this checkout's nsprof is imported with PYTHONPATH unset: a user site folder
    (PYTHONUSERBASE) whose .pth names the checkout, so that every process of the test (the server, its
    worker, the client) runs this code, not an installed copy's."""
    base = tmp_path / "userbase"
    site = Path(sysconfig.get_path("purelib", f"{os.name}_user", vars={"userbase": str(base)}))
    site.mkdir(parents=True)
    (site / "nsprof_checkout.pth").write_text(str(REPO) + "\n")
    env = {"PYTHONPATH": None, "PYTHONUSERBASE": str(base)}
    found = subprocess.run(
        [sys.executable, "-c", "import nsprof; print(nsprof.__file__)"],
        env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert Path(found.stdout.strip()).resolve().parent == REPO / "nsprof", found.stderr
    return env


@pytest.mark.parametrize("pythonpath", ["set", "unset"])
def test_a_target_that_prepends_to_pythonpath_at_import_is_served(
    tmp_path, server, own_gpu_lock_folder, pythonpath
):
    """The client imports the target (the CLI reads its configs), which sets PYTHONPATH in the client's own
    process; the served worker imports it too and sets the same: that is no difference of environment."""
    env = (
        {"PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
        if pythonpath == "set"
        else _without_pythonpath(tmp_path)
    )
    (tmp_path / "prepends.py").write_text(PREPENDS)
    proc, state = server("--idle-exit", "120", env=env)
    done = _client(tmp_path, "served", target=f"{tmp_path / 'prepends.py'}:space", configs="0,1,2")
    assert done.returncode == 0, done.stderr
    assert f"measured by nsprof serve (pid {state['pid']}" in done.stderr, done.stderr
    assert "does not fit" not in done.stderr
    assert _measured(_rows(done)) == {0: 2, 1: 2, 2: 2}  # 2 reps x 1 kernel each, mode direct
    status = _status(tmp_path, "served")
    assert status.pid == state["worker_pid"] and status.served["server"] == state["pid"]
    assert not list((tmp_path / "served").glob("part*.status")), "no standalone worker started"
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


@pytest.mark.parametrize("variable", ["LD_LIBRARY_PATH", "PYTHONPATH"])
def test_a_server_of_another_environment_is_named_with_what_to_do(
    tmp_path, server, own_gpu_lock_folder, variable
):
    """The client's shell gives the worker another value (a standalone worker would get it; the server's
    worker has its own): refused in one line that names the variable and says what to do."""
    proc, state = server("--idle-exit", "120")
    value = {"LD_LIBRARY_PATH": str(tmp_path / "lib"), "PYTHONPATH": f"{tmp_path}:{os.environ['PYTHONPATH']}"}
    done = _client(tmp_path, "other", env={variable: value[variable]})
    assert done.returncode == 2
    assert not (tmp_path / "other" / "served.status").exists(), "a server of another environment measured it"
    lines = done.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("nsprof: error:")] == lines[-1:], done.stderr
    last, pid = lines[-1], state["pid"]
    assert last.startswith("nsprof: error:") and f"nsprof serve (pid {pid})" in last, last
    assert f"environment differs in {variable}" in last, last
    assert f"stop it (kill {pid})" in last and "start `nsprof serve` from this run's environment" in last, (
        last
    )
    assert "wait for it or pass --wait" not in last, "waiting would never make it fit"
    assert proc.poll() is None, "the server serves on"
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_wait_for_a_server_that_never_fits_says_so_and_runs_once_it_ends(
    tmp_path, server, own_gpu_lock_folder
):
    """--wait behind a server that does not fit: it is told at once (why, what to do, how long the server
    holds the GPU), then waits for the GPU, at most until that server would end; once it ends (here: stopped,
    as the line says to), the run is measured standalone, whole."""
    proc, state = server("--idle-exit", "120")
    client = subprocess.Popen(
        [sys.executable, str(STANDINS), "profile", HEALTHY, "--backend", "nsys", "--configs", "0,2,4"]
        + ["--mode", "direct", "--reps", "2", "--warmup", "0", "--json", "--wait"]
        + ["--work-dir", str(tmp_path / "waits")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path / "lib")},
    )
    try:
        told = ""
        while not told.startswith("nsprof:"):  # its first line of nsprof's, said before it waits
            told = client.stderr.readline()
            assert told, "it ended without a word"
        assert f"nsprof serve (pid {state['pid']}) does not fit this run" in told, told
        assert "environment differs in LD_LIBRARY_PATH" in told and f"stop it (kill {state['pid']})" in told
        assert "waiting for the GPU until it ends (after 120 s without a job), at most 300 s" in told, told
        assert client.poll() is None and proc.poll() is None, "it waits; the server serves on"
        proc.send_signal(signal.SIGTERM)
        out, err = client.communicate(timeout=DEADLINE_S)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    assert client.returncode == 0, err
    assert _measured(json.loads(out)) == {0: 2, 2: 2, 4: 2}
    assert not (tmp_path / "waits" / "served.status").exists() and "measured by nsprof serve" not in err
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_the_environment_before_targets_undoes_only_what_their_imports_set(tmp_path, monkeypatch):
    """In-process: each import of the target prepends again (the CLI, the tuner's own load); a variable the
    import adds goes; what the program sets itself afterwards stays as it is now."""
    from nsprof import space

    monkeypatch.setattr(space, "_SET_BY_TARGETS", {})
    monkeypatch.setenv("PYTHONPATH", "/orig")
    monkeypatch.delenv("NSPROF_TEST_ADDED", raising=False)
    monkeypatch.setenv("NSPROF_TEST_KEPT", "the program's")
    (tmp_path / "adds.py").write_text(PREPENDS + "\nos.environ['NSPROF_TEST_ADDED'] = 'by the target'\n")
    for _ in range(2):
        assert len(space.load_target(f"{tmp_path / 'adds.py'}:space").configs) == 3
    assert os.environ["PYTHONPATH"] == "/somewhere:/somewhere:/orig"
    before = space.environ_before_targets()
    assert before["PYTHONPATH"] == "/orig" and "NSPROF_TEST_ADDED" not in before
    assert before["NSPROF_TEST_KEPT"] == "the program's"
    os.environ["PYTHONPATH"] = "/set by the program"
    assert space.environ_before_targets()["PYTHONPATH"] == "/set by the program"


def test_wait_behind_a_server_that_never_fits_is_bounded_by_its_end(
    tmp_path, own_gpu_lock_folder, monkeypatch
):
    """In-process, the bound made short: a server that does not fit holds the GPU and never ends (others keep
    it busy, or it hangs): --wait gives up once that server should have ended, in one line, and measures
    nothing."""
    import standins

    from nsprof import serve_client
    from nsprof.errors import GpuBusy
    from nsprof.serve_files import check_folder, serve_paths
    from nsprof.serve_identity import identity
    from nsprof.session import run_session
    from nsprof.settings import ProfileSettings

    driver, settings = standins.StatusDriver(), ProfileSettings(backend="nsys", wait_gpu=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom nsprof.host.lock import gpu_lock\n"
            "with gpu_lock(0):\n    print('held', flush=True)\n    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        mine = identity(driver, settings)
        state = {
            "pid": holder.pid,
            "identity": {**mine, "environment": {**mine["environment"], "LD_LIBRARY_PATH": "another"}},
            "socket": str(serve_paths()[1]),
            "idle_exit_s": 0.25,
        }
        assert check_folder(serve_paths()[0].parent, create=True)
        serve_paths()[0].write_text(json.dumps(state))
        monkeypatch.setattr(serve_client, "EXIT_WAIT_S", 0.5)
        with pytest.raises(GpuBusy) as caught:
            run_session(HEALTHY, 9, settings, config_ids=[0], driver=driver)
        message = str(caught.value)
        assert (
            "still busy after 0.75 s" in message
            and f"nsprof serve (pid {holder.pid}) does not fit" in message
        )
        assert "environment differs in LD_LIBRARY_PATH" in message and "\n" not in message
    finally:
        holder.kill()
        holder.wait()


def test_an_environment_larger_than_a_request_holds_is_named_not_taken_for_a_dead_server(
    tmp_path, server, own_gpu_lock_folder
):
    """A client's request carries its environment: one larger than the server reads in a request (its
    line limit) was cut there, so the live server looked dead and the client waited for its GPU for
    minutes. It is named as a server that does not fit, in one line, at once."""
    big = {f"NSPROF_TEST_BIG{i}": "x" * 100_000 for i in range(12)}  # 1.2 MB, under the kernel's limits
    proc, state = server("--idle-exit", "120", env=big)
    done = _client(tmp_path, "big")
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"nsprof serve (pid {state['pid']}) does not fit this run" in last and "environment" in last, last
    assert "ended during this run" not in done.stderr, done.stderr
    assert proc.poll() is None, "the server serves on"
