"""`nsprof serve` through real processes: a stand-in server (tests/standins.py serve: the real server
and serving worker, the stand-in driver's collections), real clients (`nsprof profile`), real
signals. Each test has its own GPU-lock folder (conftest), so its server's files are its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run_nsprof, wait_for
from conftest import running as _running

from nsprof.host.lock import gpu_lock, lock_dir
from nsprof.worker.protocol import parse_status

TARGETS = FIXTURES.parent / "targets"
STANDINS = FIXTURES.parent / "standins.py"
HEALTHY = str(TARGETS / "faulty_cpu.py") + ":space"  # configs 0, 2, 4, 8 are healthy; 1 crashes the worker
GATE = str(TARGETS / "serve_gate.py") + ":space"
DEADLINE_S = 60.0  # generous: a busy machine must not fail these; a hang never ends at all


def _serve_folder(lock_dir: Path) -> Path:
    """This user's folder for its server's files, in the lock's folder."""
    return lock_dir / f"nsprof-serve-{os.geteuid()}"


def _state_file(lock_dir: Path) -> Path:
    from nsprof.serve_files import serve_paths

    assert serve_paths()[0].parent == _serve_folder(lock_dir)
    return serve_paths()[0]


def _socket(lock_dir: Path) -> Path:
    from nsprof.serve_files import serve_paths

    assert serve_paths()[1].parent == _serve_folder(lock_dir)
    return serve_paths()[1]


def _make_serve_folder(lock_dir: Path) -> None:
    """The folder a server makes (mode 0700), for a test that writes a server's files itself."""
    from nsprof.serve_files import check_folder

    assert check_folder(_serve_folder(lock_dir), create=True)


@pytest.fixture
def server(tmp_path, own_gpu_lock_folder, monkeypatch):
    """start(*args, env=...) starts a stand-in server and waits until it serves; every server started is
    ended at the test's end. `env` is the test's too, so that the clients it starts share the server's
    environment (a client uses only a server of its own environment); a value None removes a variable."""
    started = []

    def start(
        *args, env: dict | None = None, backend: str = "nsys", cwd: Path | None = None, hung_up: bool = False
    ) -> tuple[subprocess.Popen, dict]:
        # hung_up: its stderr a pipe whose reader is gone, as a closed terminal's
        err = subprocess.PIPE if hung_up else open(tmp_path / f"server{len(started)}.err", "w")
        scratch = (
            tmp_path / f"server{len(started)}.tmp"
        )  # the server's own folder (its log, FIFO) goes in $TMPDIR
        scratch.mkdir()
        proc = subprocess.Popen(
            [sys.executable, str(STANDINS), "serve", "--backend", backend, *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=cwd,
            env={
                name: value
                for name, value in {**os.environ, "TMPDIR": str(scratch), **(env or {})}.items()
                if value is not None
            },
        )
        started.append(proc)
        for name, value in (env or {}).items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        state_file = _state_file(lock_dir())  # the test's own (conftest), or the one `env` names
        assert wait_for(lambda: state_file.exists() or proc.poll() is not None), "the server never started"
        if hung_up:
            proc.stderr.close()
        else:
            assert proc.poll() is None, (tmp_path / f"server{len(started) - 1}.err").read_text()
        return proc, json.loads(state_file.read_text())

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def _client(
    tmp_path: Path,
    name: str,
    *args,
    target: str = HEALTHY,
    configs: str = "0,2,4",
    backend: str = "nsys",
    env: dict | None = None,
    cwd: Path | None = None,
    work_dir: str | None = None,
    program: Path | None = None,
) -> subprocess.CompletedProcess:
    return run_nsprof(
        "profile",
        target,
        "--backend",
        backend,
        "--configs",
        configs,
        "--mode",
        "direct",
        "--reps",
        "2",
        "--warmup",
        "0",
        "--json",
        "--work-dir",
        work_dir or str(tmp_path / name),
        *args,
        env=env,
        cwd=cwd,
        standins=True,
        program=program,
    )


def _rows(done: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(done.stdout)


def _measured(rows: list[dict]) -> dict[int, int]:
    """config id -> its number of measured rows."""
    counts: dict[int, int] = {}
    for row in rows:
        if row["error"] is None:
            counts[row["config_id"]] = counts.get(row["config_id"], 0) + 1
    return counts


def _status(tmp_path: Path, name: str, part: str = "served"):
    return parse_status((tmp_path / name / f"{part}.status").read_text())


def _lock_is_free() -> bool:
    try:
        with gpu_lock(0):
            return True
    except Exception:  # noqa: BLE001 - GpuBusy: still held
        return False


def _ended(proc: subprocess.Popen, lock_dir: Path) -> int:
    """The server's exit status, once it exited and its files are gone."""
    code = proc.wait(timeout=DEADLINE_S)
    assert not _state_file(lock_dir).exists() and not _socket(lock_dir).exists()
    return code


# The serving worker bare (the server's own child), or under the stand-in profiler (its grandchild).
UNDER = {"bare": {}, "under a profiler": {"NSPROF_STANDIN_SERVE_PROFILER": "-"}}


@pytest.mark.parametrize("under", list(UNDER))
def test_a_second_client_is_measured_by_the_same_served_worker(tmp_path, server, own_gpu_lock_folder, under):
    proc, state = server("--idle-exit", "120", env=UNDER[under])
    assert state["worker_pid"] != proc.pid
    if under != "bare":
        assert "fake_profiler.py" in " ".join(state["command"])
    assert state["backend"] == "nsys" and state["worker_pid"] and state["socket"].endswith(".serve.sock")
    assert os.stat(state["socket"]).st_mode & 0o777 == 0o600
    first = _client(tmp_path, "first")
    second = _client(tmp_path, "second", configs="0,2,4,8")
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert _measured(_rows(first)) == {0: 2, 2: 2, 4: 2}  # 2 reps x 1 kernel, mode direct
    assert _measured(_rows(second)) == {0: 2, 2: 2, 4: 2, 8: 2}
    for run, job in (("first", 1), ("second", 2)):
        status = _status(tmp_path, run)
        assert status.pid == state["worker_pid"], "both jobs ran in the server's one worker"
        assert status.served == {"job": job, "server": state["pid"]}
        assert status.ended
        assert not list((tmp_path / run).glob("part*.status")), "no standalone worker started"
        assert f"measured by nsprof serve (pid {state['pid']}" in (first if run == "first" else second).stderr
    assert _running(state["worker_pid"])
    assert not _lock_is_free(), "the server holds the GPU lock between jobs"
    maps = Path(f"/proc/{state['pid']}/maps").read_text()
    assert "nsprof" in maps or "python" in maps  # the server's own map, read while it runs
    assert "pandas" not in maps, "the server follows jobs and reads no report: it never loads pandas"
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0
    assert wait_for(lambda: not _running(state["worker_pid"]))
    assert _lock_is_free()


def test_the_server_ends_by_itself_when_idle(tmp_path, server, own_gpu_lock_folder):
    proc, state = server("--idle-exit", "1")
    assert _ended(proc, own_gpu_lock_folder) == 0
    assert wait_for(lambda: not _running(state["worker_pid"]))
    assert _lock_is_free()
    assert "no job for 1 s" in (tmp_path / "server0.err").read_text()


@pytest.mark.parametrize("under", list(UNDER))
def test_a_sigkilled_server_leaves_nothing_and_clients_run_standalone(
    tmp_path, server, own_gpu_lock_folder, under
):
    proc, state = server("--idle-exit", "120", env=UNDER[under])
    proc.kill()
    proc.wait(timeout=DEADLINE_S)
    assert wait_for(lambda: not _running(state["worker_pid"])), "the worker ends when its server dies"
    assert _state_file(own_gpu_lock_folder).exists()  # the dead server's files are still there
    done = _client(tmp_path, "after")
    assert done.returncode == 0, done.stderr
    assert _measured(_rows(done)) == {0: 2, 2: 2, 4: 2}
    assert (
        not (tmp_path / "after" / "served.status").exists() and (tmp_path / "after" / "part0.status").exists()
    )
    assert "nsprof serve" not in done.stderr
    assert not _state_file(own_gpu_lock_folder).exists() and not _socket(own_gpu_lock_folder).exists(), (
        "the client removed the dead server's files"
    )
    assert _lock_is_free()


@pytest.mark.parametrize("under", list(UNDER))
def test_a_worker_crash_in_a_served_job_loses_nothing_and_ends_the_server(
    tmp_path, server, own_gpu_lock_folder, under
):
    proc, state = server("--idle-exit", "120", env=UNDER[under])
    done = _client(tmp_path, "crash", configs="0,1,2")
    assert done.returncode == 0, done.stderr
    rows = _rows(done)
    assert _measured(rows) == {0: 2, 2: 2}, "nothing measured is lost, nothing is measured twice"
    failed = {row["config_id"]: row["error"] for row in rows if row["error"] is not None}
    assert list(failed) == [1] and "illegal memory access" in failed[1]
    assert [row["failure_kind"] for row in rows if row["error"] is not None] == ["crash"]
    served = _status(tmp_path, "crash")
    assert served.pid == state["worker_pid"] and served.done == [0] and served.current == 1
    standalone = _status(tmp_path, "crash", "part0")
    assert standalone.done == [2] and standalone.pid != state["worker_pid"], "what was left ran standalone"
    assert "configs measured without it" in done.stderr
    assert _ended(proc, own_gpu_lock_folder) == 1
    assert "the worker died" in (tmp_path / "server0.err").read_text()
    assert _lock_is_free()


def test_a_server_of_another_backend_is_not_used(tmp_path, server, own_gpu_lock_folder):
    proc, state = server("--idle-exit", "120")
    busy = _client(tmp_path, "ncu", backend="ncu")
    assert busy.returncode == 2
    lines = busy.stderr.strip().splitlines()
    assert (
        lines[-1].startswith("nsprof: error:")
        and "being profiled by" in lines[-1]
        and str(state["pid"]) in lines[-1]
    )
    assert not (tmp_path / "ncu" / "served.status").exists()
    # NSPROF_SERVE=0: a client of the same backend does not use it either
    off = _client(tmp_path, "off", env={"NSPROF_SERVE": "0"})
    assert (
        off.returncode == 2
        and "being profiled by" in off.stderr
        and not (tmp_path / "off" / "served.status").exists()
    )
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_client_of_another_backend_waits_for_the_server_to_end(tmp_path, server, own_gpu_lock_folder):
    proc, state = server("--idle-exit", "1")
    done = _client(tmp_path, "ncu", "--wait", backend="ncu")
    assert done.returncode == 0, done.stderr
    assert _measured(_rows(done)) == {0: 2, 2: 2, 4: 2}
    assert not (tmp_path / "ncu" / "served.status").exists()
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_busy_server_refuses_a_second_client_unless_it_waits(tmp_path, server, own_gpu_lock_folder):
    gate = tmp_path / "gate"
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    holder = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            GATE,
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
            "--work-dir",
            str(tmp_path / "holder"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(
            lambda: (
                (tmp_path / "holder" / "served.status").exists() and 1 in _status(tmp_path, "holder").started
            )
        )
        refused = _client(tmp_path, "refused", target=GATE, configs="0")
        assert (
            refused.returncode == 2 and "is measuring another job" in refused.stderr.strip().splitlines()[-1]
        )
        waiting = subprocess.Popen(
            [
                sys.executable,
                str(STANDINS),
                "profile",
                GATE,
                "--backend",
                "nsys",
                "--configs",
                "0,2",
                "--mode",
                "direct",
                "--reps",
                "1",
                "--warmup",
                "0",
                "--json",
                "--wait",
                "--work-dir",
                str(tmp_path / "waiting"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert wait_for(
            lambda: (tmp_path / "waiting" / "served.status").exists() or waiting.poll() is not None
        )
        assert waiting.poll() is None and (tmp_path / "waiting" / "served.status").read_text() == "", (
            "it waits its turn"
        )
        gate.write_text("")
        out, err = holder.communicate(timeout=120)
        assert holder.returncode == 0, err
        assert _measured(json.loads(out)) == {0: 1, 1: 1, 2: 1}
        out, err = waiting.communicate(timeout=120)
        assert waiting.returncode == 0, err
        assert _measured(json.loads(out)) == {0: 1, 2: 1}
        status = _status(tmp_path, "waiting")
        assert status.pid == state["worker_pid"] and status.served["job"] == 2
    finally:
        gate.write_text("")
        for child in (holder,):
            if child.poll() is None:
                child.kill()
                child.wait()
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


@pytest.mark.parametrize("runner", ["standins", "nsprof"])
def test_serve_refuses_ncu_in_one_line(tmp_path, runner):
    done = run_nsprof("serve", "--backend", "ncu", standins=runner == "standins", timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("nsprof: error: ncu cannot serve") and "--nvtx" in lines[0]
    ), lines


def test_a_dead_or_unfitting_servers_state_is_told_apart(tmp_path, own_gpu_lock_folder, monkeypatch):
    import standins

    from nsprof.serve_client import find_server
    from nsprof.serve_identity import identity
    from nsprof.settings import ProfileSettings

    driver = standins.StatusDriver()
    settings = ProfileSettings(backend="nsys")
    _make_serve_folder(own_gpu_lock_folder)
    state_file = _state_file(own_gpu_lock_folder)
    assert find_server(driver, settings) == (None, None)  # no server
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    state_file.write_text(
        json.dumps(
            {
                "pid": int(dead.stdout),
                "identity": identity(driver, settings),
                "socket": str(_socket(own_gpu_lock_folder)),
            }
        )
    )
    assert find_server(driver, settings) == (None, None) and not state_file.exists(), (
        "a dead server's file goes"
    )
    state_file.write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "identity": {**identity(driver, settings), "backend": "ncu"},
                "socket": str(_socket(own_gpu_lock_folder)),
            }
        )
    )
    server, unfit = find_server(driver, settings)
    assert server is None and "does not fit this run" in unfit and "backend 'ncu', not 'nsys'" in unfit
    assert state_file.exists(), "a live server's file stays"
    monkeypatch.setenv("NSPROF_SERVE", "0")
    assert find_server(driver, settings) == (None, None)


def test_a_served_job_starts_no_compile_step_its_warm_worker_compiles_each_config(
    tmp_path, server, own_gpu_lock_folder
):
    """On the H200 a served tune waited 7-10 s for the compile step beside it (a fresh process paying
    torch's and TileLang's imports). The served worker compiles each config itself, before its window:
    a config that does not compile is one failed row with the compiler's reason, as standalone."""
    folder = tmp_path / "ahead"
    folder.mkdir()
    env = {"NSPROF_TEST_AHEAD_DIR": str(folder)}
    _, state = server("--idle-exit", "120", env=env)
    done = _client(
        tmp_path, "c", target=str(TARGETS / "compile_in_worker.py") + ":space", configs="0,1,2", env=env
    )
    assert done.returncode == 0, done.stderr
    rows = _rows(done)
    assert _measured(rows) == {0: 2, 2: 2}
    failed = [row["error"] for row in rows if row["config_id"] == 1]
    assert failed == ["compile failed: ValueError: no valid tile for this config (simulated)"], failed
    assert _status(tmp_path, "c").pid == state["worker_pid"]
    compiled = sorted(line.split() for line in (folder / "compiled.log").read_text().splitlines())
    assert compiled == [["0", str(state["worker_pid"])], ["2", str(state["worker_pid"])]], (
        "each config compiled once, in the served worker: no compile step beside it, nothing in the client"
    )


def test_the_socket_of_a_gpu_named_by_its_uuid_fits_a_unix_socket_path(own_gpu_lock_folder, monkeypatch):
    """On the H200 the lock is named by the GPU's UUID: a socket named after it did not fit a Unix
    socket's path in pytest's own folder (the server refused to start)."""
    from nsprof.serve_files import serve_paths

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-765d8652-190c-2afc-a912-c353311f4958")
    state, socket_path = serve_paths()
    assert "765d8652" in state.name, "the state file keeps the lock's name"
    assert socket_path.parent == _serve_folder(own_gpu_lock_folder) and socket_path.name.endswith(
        ".serve.sock"
    )
    assert len(os.fsencode(str(socket_path))) - len(os.fsencode(str(own_gpu_lock_folder))) <= 50


def test_a_socket_path_too_long_for_a_unix_socket_still_serves(tmp_path, server):
    """Under a long $TMPDIR (the tests' lock folder lies in it) the socket's path passed a Unix
    socket's 107 bytes and the server refused to start. It binds, and clients connect, through a short
    path to the same socket."""
    from nsprof.serve_files import serve_paths

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    locks = deep / "locks"
    deep.mkdir(parents=True)
    proc, state = server("--idle-exit", "120", env={"NSPROF_LOCK_DIR": str(locks), "TMPDIR": str(deep)})
    socket_path = serve_paths()[1]
    assert len(os.fsencode(str(socket_path))) > 107 and socket_path.parent.parent == locks
    assert state["socket"] == str(socket_path) and socket_path.is_socket()
    done = _client(tmp_path, "served")
    assert done.returncode == 0, done.stderr
    assert _measured(_rows(done)) == {0: 2, 2: 2, 4: 2}
    assert f"measured by nsprof serve (pid {state['pid']}" in done.stderr
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, locks) == 0


def _hold_a_job(tmp_path: Path, name: str, env: dict | None = None) -> subprocess.Popen:
    """A client whose served job stays open at config 1 until the gate file exists."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            GATE,
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
            "--work-dir",
            str(tmp_path / name),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert wait_for(
        lambda: (
            (tmp_path / name / "served.status").exists()
            and 1 in _status(tmp_path, name).started
            or proc.poll() is not None
        )
    )
    assert proc.poll() is None, proc.communicate()
    return proc


def _abandon(holder: subprocess.Popen) -> None:
    """Stop a client of _hold_a_job at once, its job running on in the server: SIGTERM acts as Ctrl-C (the
    client follows the job on, to keep what it measures), and a second one stops it there."""
    holder.send_signal(signal.SIGTERM)
    assert "interrupted: the served job stops" in holder.stderr.readline()
    holder.send_signal(signal.SIGTERM)
    holder.communicate(timeout=60)
    assert holder.returncode == 130


def test_sigterm_ends_the_server_after_the_current_job(tmp_path, server, own_gpu_lock_folder):
    gate = tmp_path / "gate"
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    holder = _hold_a_job(tmp_path, "holder")
    proc.send_signal(signal.SIGTERM)
    gate.write_text("")
    out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err
    assert _measured(json.loads(out)) == {0: 1, 1: 1, 2: 1}
    assert _status(tmp_path, "holder").ended and not (tmp_path / "holder" / "part0.status").exists(), (
        "the job the server had begun was finished by it"
    )
    assert _ended(proc, own_gpu_lock_folder) == 0
    assert _lock_is_free()


def test_a_client_whose_server_is_killed_mid_job_measures_the_rest_standalone(
    tmp_path, server, own_gpu_lock_folder
):
    gate = tmp_path / "gate"
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    holder = _hold_a_job(tmp_path, "holder", env={"NSPROF_TEST_GATE": str(gate)})
    proc.kill()
    proc.wait(timeout=DEADLINE_S)
    gate.write_text("")  # the standalone worker's config 1 needs it too
    out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err
    rows = json.loads(out)
    assert _measured(rows) == {0: 1, 1: 1, 2: 1} and not any(row["error"] for row in rows), (
        "the config the server died under is measured again, not failed"
    )
    assert _status(tmp_path, "holder").done == [0]
    assert _status(tmp_path, "holder", "part0").done == [1, 2]
    assert wait_for(lambda: not _running(state["worker_pid"]))
    assert _lock_is_free()


def test_a_config_past_its_timeout_in_a_served_job_fails_and_the_rest_is_measured(
    tmp_path, server, own_gpu_lock_folder
):
    proc, state = server("--idle-exit", "120")
    done = _client(tmp_path, "timeout", "--timeout", "1", configs="0,3,4")  # config 3 hangs
    assert done.returncode == 0, done.stderr
    rows = _rows(done)
    assert _measured(rows) == {0: 2, 4: 2}
    failed = {row["config_id"]: row["error"] for row in rows if row["error"] is not None}
    assert list(failed) == [3] and failed[3].startswith("timeout: still running after 1 s")
    kinds = [(row["failure_kind"], row["timeout_s"]) for row in rows if row["error"] is not None]
    assert kinds == [("timeout", 1.0)]  # the server's fault says what it was, and the bound it ran past
    assert _status(tmp_path, "timeout").done == [0] and _status(tmp_path, "timeout", "part0").done == [4]
    assert _ended(proc, own_gpu_lock_folder) == 1
    assert "ran past its timeout" in (tmp_path / "server0.err").read_text()
    assert wait_for(lambda: not _running(state["worker_pid"]))
    assert _lock_is_free()


def test_a_target_that_does_not_load_in_the_worker_ends_the_job_not_the_server(
    tmp_path, server, own_gpu_lock_folder
):
    broken = (
        tmp_path / "broken.py"
    )  # it loads in the client (the CLI loads it first), not in the serving worker
    broken.write_text(
        "import sys\n\nimport nsprof.space\n\nif 'nsprof.worker.serving' in sys.modules:\n"
        "    raise RuntimeError('cuInit failed: CUDA_ERROR_NO_DEVICE (simulated start-up failure)')\n"
        "space = nsprof.space.Space(name='b', configs=[{}, {}], build=lambda c: lambda: None, "
        "device='cpu')\n"
    )
    proc, state = server("--idle-exit", "120")
    done = _client(tmp_path, "broken", target=f"{broken}:space", configs="0,1")
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("nsprof: error: the profiled worker measured nothing")
        and "CUDA_ERROR_NO_DEVICE" in last
    )
    assert proc.poll() is None and _running(state["worker_pid"])
    again = _client(tmp_path, "again")
    assert again.returncode == 0 and _status(tmp_path, "again").pid == state["worker_pid"]
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_the_nsys_serve_commands_put_each_option_where_nsys_takes_it(tmp_path):
    from nsprof.drivers.nsys import NsysDriver
    from nsprof.errors import ToolFailed
    from nsprof.settings import ProfileSettings

    calls = tmp_path / "calls"
    fake = tmp_path / "nsys"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = shutdown ] && exit 3\nexit 0\n')
    fake.chmod(0o755)
    driver = NsysDriver(fake)
    launch = driver.serve_command(ProfileSettings(backend="nsys"), tmp_path / "dir", "nsprof-serve-1")
    assert launch[:6] == [
        str(fake),
        "launch",
        "--session-new=nsprof-serve-1",
        "--trace=cuda,nvtx",
        "--cuda-graph-trace=node",
        sys.executable,
    ]
    assert launch[6] == "-c" and launch[8:] == ["nsprof.worker", "--serve", str(tmp_path / "dir")]
    assert not any(word.startswith(("--sample", "--cpuctxsw")) for word in launch), (
        "launch refuses them (2025.3.1)"
    )
    with open(tmp_path / "log", "w") as log:
        driver.serve_start("nsprof-serve-1", tmp_path / "served", log)
        driver.serve_stop("nsprof-serve-1", tmp_path / "served", log)
        with pytest.raises(ToolFailed, match="^nsys shutdown failed with status 3"):
            driver.serve_shutdown("nsprof-serve-1", log)
    start, stop, shutdown = calls.read_text().splitlines()
    assert start == (
        f"start --session=nsprof-serve-1 --sample=none --cpuctxsw=none -o {tmp_path / 'served'} "
        "--force-overwrite=true"
    )
    assert "--trace" not in start, "start refuses --trace (2025.3.1)"
    assert stop == "stop --session=nsprof-serve-1"
    assert shutdown == "shutdown --session=nsprof-serve-1 --kill sigkill"


def test_a_client_stopped_mid_job_leaves_the_server_serving(tmp_path, server, own_gpu_lock_folder):
    gate = tmp_path / "gate"
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    holder = _hold_a_job(tmp_path, "holder")
    _abandon(holder)
    gate.write_text("")  # the server finishes the abandoned job
    after = _client(tmp_path, "after", "--wait")
    assert after.returncode == 0, after.stderr
    assert _measured(_rows(after)) == {0: 2, 2: 2, 4: 2}
    status = _status(tmp_path, "after")
    assert status.pid == state["worker_pid"] and status.served["job"] == 2
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


# A served job measures what the client's own standalone session would have measured: its folder, its
# environment, its target's own helpers.
GATE_SOURCE = (TARGETS / "serve_gate.py").read_text()  # configs 0 and 2 are plain CPU configs

# A target of the same name in the server's folder that is not the client's: every build fails there.
WRONG_SOURCE = """
import nsprof.space

def build(config):
    raise ValueError("the server's own t.py was measured, not the client's")

space = nsprof.space.Space(name="wrong", configs=[{"kind": "ok"}] * 3, build=build, device="cpu")
"""


@pytest.mark.parametrize("work_dir", ["absolute", "relative"])
def test_a_relative_target_and_work_dir_are_the_clients_not_the_servers(
    tmp_path, server, own_gpu_lock_folder, work_dir
):
    """The client's cwd decides what a relative target path (and --work-dir) names, as standalone."""
    server_cwd, client_cwd = tmp_path / "server_cwd", tmp_path / "client_cwd"
    server_cwd.mkdir()
    client_cwd.mkdir()
    (server_cwd / "t.py").write_text(WRONG_SOURCE)
    (client_cwd / "t.py").write_text(GATE_SOURCE)
    proc, state = server("--idle-exit", "120", cwd=server_cwd)
    done = _client(
        tmp_path,
        "w",
        target="t.py:space",
        configs="0,2",
        cwd=client_cwd,
        work_dir=str(tmp_path / "w") if work_dir == "absolute" else "w",
    )
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
    value = {
        "NSPROF_TEST_GATE": str(tmp_path / "gate"),
        "CUDA_VISIBLE_DEVICES": "0,1",
        "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}",
    }[variable]
    done = _client(tmp_path, "other", target=GATE, configs="0,2", env={variable: value})
    assert not (tmp_path / "other" / "served.status").exists(), "a server of another environment measured it"
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("nsprof: error:") and variable in last, last
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


HELPER_CHECK = """
from pathlib import Path

import helper
import nsprof.space

if Path(helper.__file__).parent != Path(__file__).parent:
    raise ImportError(f"{__file__} got the helper of {helper.__file__}")

def build(config):
    return lambda: None

space = nsprof.space.Space(name="helper", configs=[{"kind": "ok"}] * 2, build=build, device="cpu")
"""


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


HEAVY_SOURCE = """
import sys

# Like torch: a package that cannot be imported twice into one process (its registrations, its CUDA state).
if getattr(sys, "_heavy_imported", False):
    raise RuntimeError("heavy was imported a second time into this process")
sys._heavy_imported = True
"""


def test_a_package_installed_below_the_targets_folder_is_not_imported_again(
    tmp_path, server, own_gpu_lock_folder
):
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


def test_a_job_abandoned_by_its_client_never_writes_into_the_next_runs_files(
    tmp_path, server, own_gpu_lock_folder
):
    """Ctrl-C leaves the server running the abandoned job (it writes its status and report into the client's
    folder until it ends); the same command run again with the same --work-dir must not read that job's lines
    or report as its own."""
    gate = tmp_path / "gate"
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    holder = _hold_a_job(tmp_path, "w")  # configs 0, 1, 2; it waits in config 1
    _abandon(holder)
    again = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            GATE,
            "--backend",
            "nsys",
            "--configs",
            "2",
            "--mode",
            "direct",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
            "--wait",
            "--work-dir",
            str(tmp_path / "w"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The new run's status file is there (empty: the abandoned job waits in config 1, writing nothing).
        assert wait_for(
            lambda: (
                any(path.stat().st_size == 0 for path in (tmp_path / "w").glob("served*.status"))
                or again.poll() is not None
            )
        )
        gate.write_text("")  # the abandoned job goes on: configs 1 and 2
        out, err = again.communicate(timeout=120)
    finally:
        gate.write_text("")
        if again.poll() is None:
            again.kill()
            again.wait()
    assert again.returncode == 0, err
    assert _measured(json.loads(out)) == {2: 1}, "the abandoned job's configs were taken for this run's"
    served = [parse_status(path.read_text()) for path in (tmp_path / "w").glob("served*.status")]
    mine = [status for status in served if status.served and status.served["job"] == 2]
    assert len(mine) == 1 and mine[0].done == [2] and mine[0].ended, (
        "this run's status holds its own job only"
    )
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_servers_files_are_removed_only_while_nobody_holds_the_gpu_lock(tmp_path, own_gpu_lock_folder):
    """A state file whose pid this client cannot see (a server in another pid namespace sharing the lock
    folder, or a pid the client cannot tell apart) is not proof of a dead server: a live server holds the
    GPU lock for its whole life, so its files stay while the lock is held, and go once it is free."""
    import standins

    from nsprof.serve_client import find_server
    from nsprof.serve_identity import identity
    from nsprof.settings import ProfileSettings

    driver, settings = standins.StatusDriver(), ProfileSettings(backend="nsys")
    _make_serve_folder(own_gpu_lock_folder)
    release = tmp_path / "release"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\nfrom pathlib import Path\nfrom nsprof.host.lock import gpu_lock\n"
                "with gpu_lock(0):\n    print('held', flush=True)\n"
                "    while not Path(sys.argv[1]).exists():\n        time.sleep(0.02)\n"
            ),
            str(release),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "NSPROF_LOCK_DIR": str(own_gpu_lock_folder)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        unseen = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        )
        state_file, socket_file = _state_file(own_gpu_lock_folder), _socket(own_gpu_lock_folder)
        state_file.write_text(
            json.dumps(
                {
                    "pid": int(unseen.stdout),
                    "identity": identity(driver, settings),
                    "socket": str(socket_file),
                }
            )
        )
        socket_file.write_text("")
        assert find_server(driver, settings)[0] is None
        assert state_file.exists() and socket_file.exists(), (
            "a client removed the files of a lock holder's server"
        )
    finally:
        release.write_text("")
        holder.wait(timeout=DEADLINE_S)
    assert find_server(driver, settings) == (None, None)
    assert not state_file.exists() and not socket_file.exists(), (
        "a dead server's files go once the lock is free"
    )


def test_a_dead_servers_pid_taken_by_another_process_is_told_apart(tmp_path, own_gpu_lock_folder):
    """The dead server's pid now names another live process: its socket does not answer and nobody holds the
    GPU lock, so the files are a dead server's (removed), not an unfitting server's."""
    import standins

    from nsprof.serve_client import find_server
    from nsprof.serve_identity import identity
    from nsprof.settings import ProfileSettings

    driver, settings = standins.StatusDriver(), ProfileSettings(backend="nsys")
    _make_serve_folder(own_gpu_lock_folder)
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        state_file, socket_file = _state_file(own_gpu_lock_folder), _socket(own_gpu_lock_folder)
        state_file.write_text(
            json.dumps({"pid": other.pid, "identity": identity(driver, settings), "socket": str(socket_file)})
        )
        socket_file.write_text("")  # a socket file without a listener
        assert find_server(driver, settings) == (None, None)
        assert not state_file.exists() and not socket_file.exists()
    finally:
        other.communicate(timeout=DEADLINE_S)


def test_a_variable_an_earlier_served_target_set_is_not_seen_by_the_next_job(
    tmp_path, server, own_gpu_lock_folder
):
    """A target may set environment variables at import (a cache folder, CUDA_LAUNCH_BLOCKING): a fresh worker
    never sees another target's; the served worker must not either."""
    (tmp_path / "a.py").write_text("import os\nos.environ['NSPROF_TEST_LEFT'] = 'by a.py'\n" + GATE_SOURCE)
    (tmp_path / "b.py").write_text(
        "import os\nif 'NSPROF_TEST_LEFT' in os.environ:\n"
        "    raise RuntimeError('b.py sees a variable of a.py')\n" + GATE_SOURCE
    )
    proc, state = server("--idle-exit", "120")
    first = _client(tmp_path, "first", target=f"{tmp_path / 'a.py'}:space", configs="0")
    assert first.returncode == 0, first.stderr
    second = _client(tmp_path, "second", target=f"{tmp_path / 'b.py'}:space", configs="0")
    assert second.returncode == 0, second.stderr
    assert _status(tmp_path, "second").pid == state["worker_pid"]
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_variable_the_client_set_after_it_started_is_the_served_jobs_too(
    tmp_path, server, own_gpu_lock_folder
):
    """A program that sets a variable before it measures (os.environ in a notebook; here a program that
    sets it, then runs nsprof's command line in its own process) gives it to a standalone worker, which
    inherits its environment: a served job must get it too."""
    (tmp_path / "c.py").write_text(
        "import os\n\nimport nsprof.space\n\n"
        "def build(config):\n"
        "    if os.environ.get('NSPROF_TEST_SET_BY_CLIENT') != 'yes':\n"
        "        raise RuntimeError('the job does not have the client environment')\n"
        "    return lambda: None\n\n"
        "space = nsprof.space.Space(name='c', configs=[{}, {}], build=build, device='cpu')\n"
    )
    program = tmp_path / "client.py"
    program.write_text(
        "import os, runpy, sys\n"
        "os.environ['NSPROF_TEST_SET_BY_CLIENT'] = 'yes'\n"
        f"sys.argv[0] = {str(STANDINS)!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    standalone = _client(
        tmp_path, "alone", target=f"{tmp_path / 'c.py'}:space", configs="0,1", program=program
    )
    assert standalone.returncode == 0 and _measured(_rows(standalone)) == {0: 2, 1: 2}, standalone.stderr
    proc, state = server("--idle-exit", "120")
    served = _client(tmp_path, "served", target=f"{tmp_path / 'c.py'}:space", configs="0,1", program=program)
    assert served.returncode == 0, served.stderr
    assert _measured(_rows(served)) == {0: 2, 1: 2}
    assert _status(tmp_path, "served").pid == state["worker_pid"]
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_client_with_a_large_environment_is_served(tmp_path, server, own_gpu_lock_folder):
    """The job's line to the worker holds the client's environment: longer than a pipe's buffer (64 KiB) where
    a module system set many variables; it goes whole."""
    big = {f"NSPROF_TEST_BIG{i}": "x" * 100_000 for i in range(3)}
    proc, state = server("--idle-exit", "120", env=big)
    done = _client(tmp_path, "big", target=GATE, configs="0,2")
    assert done.returncode == 0, done.stderr
    assert _measured(_rows(done)) == {0: 2, 2: 2}
    assert _status(tmp_path, "big").pid == state["worker_pid"]
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_server_of_nsprof_as_it_was_before_an_edit_does_not_fit(tmp_path, own_gpu_lock_folder):
    """The same nsprof folder and version number, but its worker code edited since the server started (a
    checkout being worked on): the server's worker runs the old code, so the identities differ."""
    import shutil

    import standins

    import nsprof
    from nsprof.serve_identity import differences, identity, source_digest
    from nsprof.settings import ProfileSettings

    package = Path(nsprof.__file__).resolve().parent
    copy = tmp_path / "nsprof"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = source_digest(copy)
    assert before == source_digest(package)
    with open(copy / "worker" / "program.py", "a") as handle:
        handle.write("\n# edited after the server started\n")
    edited = source_digest(copy)
    assert edited != before
    driver, settings = standins.StatusDriver(), ProfileSettings(backend="nsys")
    mine = identity(driver, settings)
    assert mine["source"] == before
    assert [d for d in differences({**mine, "source": edited}, mine) if d.startswith("source")]


def test_a_client_that_comes_while_the_server_writes_a_report_waits_in_its_queue(
    tmp_path, server, own_gpu_lock_folder
):
    """`nsys stop` writes a long job's report (seconds): a client with --wait that comes then is told at once
    that the server is busy and queues for it (it holds the GPU lock until it idles out); it never takes the
    server for one that does not fit and waits for the lock."""
    stop_gate = tmp_path / "stop-gate"
    # idle exit 20 s: the first client must reach the server before it idles out, on a busy machine too
    proc, state = server("--idle-exit", "20", env={"NSPROF_STANDIN_STOP_GATE": str(stop_gate)})
    first = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            GATE,
            "--backend",
            "nsys",
            "--configs",
            "0",
            "--mode",
            "direct",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
            "--work-dir",
            str(tmp_path / "first"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(
            lambda: (tmp_path / "first" / "served.status").exists() and _status(tmp_path, "first").ended
        ), "the first job ran; its stop now waits"
        second = subprocess.Popen(
            [
                sys.executable,
                str(STANDINS),
                "profile",
                GATE,
                "--backend",
                "nsys",
                "--configs",
                "2",
                "--mode",
                "direct",
                "--reps",
                "1",
                "--warmup",
                "0",
                "--json",
                "--wait",
                "--work-dir",
                str(tmp_path / "second"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # its ping runs out meanwhile: it says it waits in the queue, and sends its job, before the stop ends
        said = ""
        for line in second.stderr:
            said += line
            if "waits in its queue" in line:
                break
        stop_gate.write_text("")
        out, rest = second.communicate(timeout=120)
        err = said + rest
        assert "is busy (another job, or a report it writes): this job waits in its queue" in said, err
    finally:
        stop_gate.write_text("")
        first.communicate(timeout=120)
    assert second.returncode == 0, err
    assert _measured(json.loads(out)) == {2: 1}
    status = _status(tmp_path, "second")
    assert status.pid == state["worker_pid"] and status.served["job"] == 2, (
        "it was served after the first job"
    )
    proc.send_signal(signal.SIGTERM)  # not its idle exit: that is tested apart, and 20 s away here
    assert _ended(proc, own_gpu_lock_folder) == 0


TUNED = """
import nsprof.space
from nsprof.tuner import TunerHook

class Hook(TunerHook):
    name = "the test's tuner"
    can_pick = True

    def pick(self):
        return {"tuner": self.name, "timer": "own", "config_id": 1, "config": {"i": 1}, "timings_ms": {}}

    def feed_back(self, latencies_ms):
        return "stored " + str(min(latencies_ms, key=latencies_ms.get))

space = nsprof.space.Space(configs=[{"i": i, "ns": 3000 - 1000 * i} for i in range(3)],
                           build=lambda c: (lambda: None), device="cpu", tuner=Hook())
"""


@pytest.mark.parametrize("wait", [(), ("--wait",)], ids=["", "wait"])
def test_a_served_tune_asks_the_tuners_pick_and_feeds_it_back(tmp_path, server, own_gpu_lock_folder, wait):
    """The server holds the GPU lock for as long as it serves: the tuner's own pick and the feed-back
    of a served tune (user kernels, in children of the client) run in a lease of the GPU between its
    jobs, not refused for the lock, nor (--wait) waiting for the lock until the server's idle exit."""
    proc, state = server("--idle-exit", "3600")
    (tmp_path / "t.py").write_text(TUNED)
    done = run_nsprof(
        *("tune", "t.py:space", "--backend", "nsys", "--mode", "direct", "--reps", "2"),
        *("--budget-s", "0", "--no-store", "--json", *wait),
        cwd=tmp_path,
        standins=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"measured by nsprof serve (pid {state['pid']}" in done.stderr
    document = json.loads(done.stdout)
    assert document["best_config_id"] == 2 and document["tuner_pick"]["config_id"] == 1, document["notes"]
    assert any(n.startswith("handed to the test's tuner") and "stored 2" in n for n in document["notes"])
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_client_waits_for_room_in_a_full_accept_queue_within_its_timeout(tmp_path):
    """Many clients at once fill a server's accept queue: a Unix socket's connect then fails at once
    (EAGAIN) where it would wait for room; the client waits within its own timeout instead."""
    import socket
    import threading

    from nsprof.serve_files import connect, unix_address

    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    waiting = []
    with unix_address(Path(path)) as address:  # $TMPDIR may be deeper than a socket's address holds
        listener.bind(address)
        listener.listen(1)
        while True:  # fill the queue: a connect that finds no room fails without blocking
            other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            other.setblocking(False)
            try:
                other.connect(address)
            except BlockingIOError:
                other.close()
                break
            waiting.append(other)
    accepted = []
    server = threading.Timer(0.2, lambda: accepted.extend(listener.accept() for _ in waiting))
    server.start()
    try:
        with connect(path, 60):
            pass
    finally:
        server.join(60)
        for conn in [*waiting, *(c for c, _ in accepted)]:
            conn.close()
        listener.close()
    assert len(accepted) == len(waiting) > 0


def test_a_lease_granted_in_the_same_read_as_its_queued_answer_is_taken(tmp_path, monkeypatch):
    """A server whose job ends just as the lease is asked answers "queued" and "leased" at once: the
    client's first read can hold both lines, and the second must not be lost (the server would lend
    the GPU to a client that gave up on it)."""
    import socket
    import threading

    import nsprof.serve_client as client
    from nsprof.serve_files import unix_address

    monkeypatch.setattr(client, "SERVE_GRACE_S", 5.0)
    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with unix_address(Path(path)) as address:  # $TMPDIR may be deeper than a socket's address holds
        listener.bind(address)
    listener.listen(1)
    closed = []

    def serve_one():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)  # the lease request
            conn.sendall(b'{"queued": true}\n{"leased": true}\n')
            conn.settimeout(30)
            closed.append(conn.recv(1) == b"")  # the lease lasts until the client closes

    thread = threading.Thread(target=serve_one)
    thread.start()
    try:
        with client.lease({"pid": os.getpid(), "socket": path}, 60):
            pass
    finally:
        thread.join(timeout=60)
        listener.close()
    assert closed == [True]


def test_a_lease_waits_for_a_job_that_outlasts_the_answer_grace(
    tmp_path, server, own_gpu_lock_folder, monkeypatch
):
    """A lease queued behind another client's job waits for that job's end however long it runs, while
    the server lives: a long tune ahead must not make this client's pick fail with "no answer"."""
    import threading

    import nsprof.serve_client as client

    gate = tmp_path / "gate"
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    holder = _hold_a_job(tmp_path, "holder", env={"NSPROF_TEST_GATE": str(gate)})

    class ShortGrace(client.LineReader):  # after the first answer, a grace far shorter than the job
        def next(self, timeout_s):
            answer = super().next(timeout_s if not getattr(self, "answered", False) else 0.5)
            self.answered = True
            return answer

    monkeypatch.setattr(client, "LineReader", ShortGrace)
    opened = threading.Timer(3.0, gate.write_text, args=("",))
    opened.start()
    try:
        with client.lease(client.holding_server(state["pid"]), 120):
            leased_after_the_job = gate.exists()
    finally:
        opened.join()
    assert holder.wait(timeout=120) == 0
    assert leased_after_the_job


def test_no_job_runs_while_a_client_holds_a_lease(tmp_path, server, own_gpu_lock_folder):
    """A job that comes during a lease waits for its end: its worker's first line is later than the
    moment the lease was given back (CLOCK_MONOTONIC: one clock for every process of the host)."""
    import time

    from nsprof.serve_client import _ask, holding_server, lease

    proc, state = server("--idle-exit", "120")
    argv = [sys.executable, str(STANDINS), "profile", HEALTHY, "--backend", "nsys", "--configs", "0"]
    argv += ["--mode", "direct", "--reps", "1", "--json", "--wait", "--work-dir", str(tmp_path / "queued")]
    with lease(holding_server(state["pid"]), 120):
        client = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ping = {"op": "ping"}
        assert wait_for(lambda: _ask(state["socket"], ping, 10).get("waiting") == 1), "the job came"
        status = tmp_path / "queued" / "served.status"
        assert not (status.exists() and parse_status(status.read_text()).times), "a job ran during the lease"
        given_back = time.monotonic()
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, err
    times = _status(tmp_path, "queued").times
    assert times and times[0][0] > given_back
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_server_asked_to_end_during_a_lease_keeps_the_gpu_until_the_lease_ends(
    tmp_path, server, own_gpu_lock_folder
):
    """The client's own kernels (its tuner's pick, the feed-back) run under the server's GPU lock: a
    SIGTERM meanwhile must not hand the GPU to another nsprof while they run. The server ends once the
    client gives the lease back."""
    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock
    from nsprof.serve_client import _ask, holding_server, lease

    proc, state = server("--idle-exit", "120")
    said = tmp_path / "server0.err"
    with lease(holding_server(state["pid"]), 120):
        proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "once its lease ends" in said.read_text()), said.read_text()
        assert proc.poll() is None
        with pytest.raises(GpuBusy):
            with gpu_lock(0):
                pass
        # a client that comes meanwhile is told at once, not queued behind the lease
        answer = _ask(state["socket"], {"op": "lease", "timeout_s": 5, "wait": True}, 10)
        assert answer["fault"] == "closing" and "SIGTERM" in answer["reason"], answer
    assert _ended(proc, own_gpu_lock_folder) == 0
    with gpu_lock(0):  # the server let it go as it ended
        pass


def test_a_second_signal_ends_a_server_that_waits_for_a_lease(tmp_path, server, own_gpu_lock_folder):
    from nsprof.serve_client import holding_server, lease

    proc, state = server("--idle-exit", "120")
    said = tmp_path / "server0.err"
    with lease(holding_server(state["pid"]), 3600):
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert wait_for(lambda: "a second signal ends it now" in said.read_text()), said.read_text()
        proc.send_signal(signal.SIGINT)
        assert _ended(proc, own_gpu_lock_folder) == 0  # inside the lease still: its bound is an hour


def test_a_server_whose_terminal_hung_up_keeps_the_gpu_through_a_lease(tmp_path, server, own_gpu_lock_folder):
    """SIGHUP from a closed terminal: the server's lines to that terminal fail, and it must still wait
    for the lease before it lets the GPU go."""
    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock
    from nsprof.serve_client import _ask, holding_server, lease

    proc, state = server("--idle-exit", "120", hung_up=True)
    ask = {"op": "lease", "timeout_s": 5, "wait": True}
    with lease(holding_server(state["pid"]), 120):
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: _ask(state["socket"], ask, 10).get("fault") == "closing"), (
            "it took the signal"
        )
        assert proc.poll() is None
        with pytest.raises(GpuBusy):
            with gpu_lock(0):
                pass
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_client_that_asks_cuda_for_another_device_order_is_served_all_the_same(
    tmp_path, server, own_gpu_lock_folder
):
    # every worker numbers GPUs as nvidia-smi does, whatever either side's CUDA_DEVICE_ORDER
    proc, state = server("--idle-exit", "120")
    done = _client(tmp_path, "first", env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert done.returncode == 0, done.stderr
    assert "CUDA_DEVICE_ORDER=FASTEST_FIRST is not used" in done.stderr
    assert _status(tmp_path, "first").pid == state["worker_pid"], "measured by the served worker"


def test_a_tuner_call_that_finds_the_server_ending_takes_the_gpu_once_the_server_lets_it_go(
    tmp_path, server, own_gpu_lock_folder, monkeypatch
):
    """A served tune's tuner call (its pick, the feed-back) that asks a lease of a server already asked
    to end: no lease, and no error either; it waits for the lock the server lets go as it ends."""
    import threading

    from nsprof.feedback import _gpu_for_the_tuner
    from nsprof.host import lock
    from nsprof.serve_client import holding_server, lease

    proc, state = server("--idle-exit", "120")
    said = tmp_path / "server0.err"
    waiting, got = threading.Event(), []
    take = lock.gpu_lock

    def gpu_lock(device=0, **kwargs):
        if kwargs.get("wait"):
            waiting.set()
        return take(device, **kwargs)

    monkeypatch.setattr(lock, "gpu_lock", gpu_lock)

    def tuner_call() -> None:
        try:
            with _gpu_for_the_tuner(wait=False, timeout_s=120):
                got.append("the GPU")
        except Exception as exc:  # this thread's error is the assertion's message
            got.append(exc)

    with lease(holding_server(state["pid"]), 120):  # another client's tuner holds the GPU
        proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "once its lease ends" in said.read_text()), said.read_text()
        caller = threading.Thread(target=tuner_call)
        caller.start()
        assert waiting.wait(60) and caller.is_alive(), got  # refused a lease, it waits for the lock
    caller.join(120)
    assert got == ["the GPU"], got
    assert _ended(proc, own_gpu_lock_folder) == 0


# configs: 0 plain, 1 waits for $NSPROF_TEST_GATE, 2 would hold its window for 120 s (a long job's rest)
HOLD_SOURCE = GATE_SOURCE.replace('for k in ["ok", "gate", "ok"]', 'for k in ["ok", "gate", "hold"]').replace(
    'if config["kind"] == "gate":',
    'if config["kind"] == "hold":\n        time.sleep(120)\n    if config["kind"] == "gate":',
)


def test_a_client_interrupted_mid_job_stops_it_and_keeps_what_it_measured(
    tmp_path, server, own_gpu_lock_folder
):
    # Ctrl-C (SIGINT) while config 1 of the served job runs: the client asks the server to stop the job,
    # the worker stops before its next config (config 2, which would run on for minutes), and the client
    # keeps the whole configs measured, then ends as interrupted; the server serves on. Before, the
    # client gave the job 15 s, then dropped everything, and the job ran on in the server.
    import sqlite3

    gate, target = tmp_path / "gate", tmp_path / "hold.py"
    target.write_text(HOLD_SOURCE)
    assert '"hold"' in HOLD_SOURCE and "time.sleep(120)" in HOLD_SOURCE
    proc, state = server("--idle-exit", "120", env={"NSPROF_TEST_GATE": str(gate)})
    err = tmp_path / "client.err"
    tune = [sys.executable, str(STANDINS), "tune", f"{target}:space", "--backend", "nsys", "--mode", "direct",
            "--reps", "2", "--store", str(tmp_path / "s.sqlite"), "--work-dir", str(tmp_path / "w"),
            "--no-feed-back"]  # fmt: skip
    with open(err, "w") as stderr:
        client = subprocess.Popen(tune, stdout=subprocess.DEVNULL, stderr=stderr)
        assert wait_for(
            lambda: (tmp_path / "w" / "served.status").exists() and 1 in _status(tmp_path, "w").started
        )
        client.send_signal(signal.SIGINT)
        # the server has taken the stop before config 1 ends
        assert wait_for(lambda: "asked to stop" in Path(state["log"]).read_text()), err.read_text()
        gate.write_text("")
        assert client.wait(timeout=DEADLINE_S) == 130, err.read_text()
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        stored = dict(
            db.execute("SELECT config_id, COUNT(*) FROM measurements WHERE error IS NULL GROUP BY 1")
        )
    assert stored == {0: 2, 1: 2}, (stored, err.read_text())
    assert 2 not in _status(tmp_path, "w").started
    after = _client(tmp_path, "after")  # no --wait: the server is free again
    assert after.returncode == 0, after.stderr
    assert _status(tmp_path, "after").pid == state["worker_pid"] and proc.poll() is None


def test_an_interrupt_stands_when_the_job_it_followed_on_then_fails_to_start(
    tmp_path, server, own_gpu_lock_folder
):
    # Ctrl-C while the serving worker loads the target; the load then fails: the user's interrupt is how
    # the run ends (130, the store's run "interrupted"), not the job's error (nothing was measured either way)
    gate = tmp_path / "gate"
    broken = tmp_path / "late.py"
    broken.write_text(
        "import os, sys, time\n\nimport nsprof.space\n\nif 'nsprof.worker.serving' in sys.modules:\n"
        f"    while not os.path.exists({str(gate)!r}):\n        time.sleep(0.02)\n"
        "    raise RuntimeError('cuInit failed (simulated)')\n"
        "space = nsprof.space.Space(name='b', configs=[{}, {}], build=lambda c: lambda: None, device='cpu')\n"
    )
    server("--idle-exit", "120")
    err = tmp_path / "client.err"
    command = [sys.executable, str(STANDINS), "profile", f"{broken}:space", "--backend", "nsys", "--mode",
               "direct", "--reps", "1", "--work-dir", str(tmp_path / "w")]  # fmt: skip
    with open(err, "w") as stderr:
        client = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        status = tmp_path / "w" / "served.status"
        assert wait_for(
            lambda: status.exists() and _status(tmp_path, "w").served or client.poll() is not None
        )
        client.send_signal(signal.SIGINT)
        assert wait_for(lambda: "interrupted" in err.read_text() or client.poll() is not None)
        gate.write_text("")
        assert client.wait(timeout=120) == 130, err.read_text()


# Compiles that outlast a stopped job: 6 configs compiled in the serving worker's pool, each slow while the
# file `slow` exists; every build logs how many of the pool's threads are alive in its process.
COMPILING = """
import os, threading, time
from pathlib import Path
import nsprof.space
HERE = Path(__file__).parent

def compile(config):
    if (HERE / "slow").exists():
        time.sleep(4)
    with open(HERE / "compiled.log", "a") as f:
        f.write(f"compile {config['i']} {os.getpid()}\\n")

def build(config):
    live = sum(t.name == "nsprof-compile" for t in threading.enumerate())
    with open(HERE / "compiled.log", "a") as f:
        f.write(f"build {config['i']} {os.getpid()} threads={live}\\n")
    return lambda: None

space = nsprof.space.Space(name="c", configs=[{"i": i} for i in range(6)], build=build, compile=compile,
                           device="cpu")
"""


def test_compiles_a_stopped_job_left_running_never_run_beside_the_next_jobs_windows(
    tmp_path, server, own_gpu_lock_folder
):
    # Ctrl-C while the served job's compile pool runs: the job stops, but compiles already under way go on
    # in their threads. The next job (the same target: no fresh image for another target) runs in a fresh
    # image all the same, so that no compile of the stopped job runs while its windows do.
    target = tmp_path / "c.py"
    target.write_text(COMPILING)
    (tmp_path / "slow").write_text("")
    proc, state = server("--idle-exit", "120")
    err = tmp_path / "client.err"
    command = [sys.executable, str(STANDINS), "profile", f"{target}:space", "--backend", "nsys", "--mode",
               "direct", "--reps", "1", "--work-dir", str(tmp_path / "w"), "--json"]  # fmt: skip
    with open(err, "w") as stderr:
        client = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        # the first config compiled alone: the pool's compiles are under way
        assert wait_for(lambda: (tmp_path / "compiled.log").exists())
        client.send_signal(signal.SIGINT)
        assert client.wait(timeout=DEADLINE_S) == 130, err.read_text()
    (tmp_path / "slow").unlink()
    after = _client(tmp_path, "after", target=f"{target}:space", configs="0,1,2,3,4,5")
    assert after.returncode == 0, after.stderr
    assert _measured(_rows(after)) == {c: 2 for c in range(6)}
    assert _status(tmp_path, "after").pid == state["worker_pid"] and proc.poll() is None
    builds = [
        line.split() for line in (tmp_path / "compiled.log").read_text().splitlines() if "build" in line
    ]
    assert len(builds) == 6 and all(words[-1] == "threads=0" for words in builds), builds
    # whatever the compiles' timing: the job after the stopped one ran in a fresh image
    own = (Path(state["log"]).parent / "worker.status").read_text().splitlines()
    assert any(line.startswith('fresh {"job": 2,') for line in own), own


@pytest.mark.parametrize("identity", ['"x"', "[1]"], ids=["text", "list"])
def test_a_state_whose_identity_is_no_object_is_a_server_not_used(tmp_path, own_gpu_lock_folder, identity):
    """The state file is this user's own and names a live pid; its identity edited into no object was an
    AttributeError in every profile and tune. The server is not used: the run measures on its own."""
    _make_serve_folder(lock_dir())
    state = _state_file(lock_dir())
    state.write_text(
        f'{{"pid": {os.getpid()}, "socket": "{state.parent}/x.serve.sock", "identity": {identity}}}'
    )
    state.chmod(0o600)
    done = run_nsprof(
        "profile", HEALTHY, "--backend", "nsys", "--mode", "direct", "--configs", "0", "--json",
        cwd=tmp_path, standins=True, in_process=True,
    )  # fmt: skip
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr
    assert "measured by nsprof serve" not in done.stderr and _measured(_rows(done)) == {0: 5}  # 5 reps
