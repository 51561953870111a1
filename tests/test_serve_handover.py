"""How a job and its request cross to the server and on to its worker, when the other side does not read:
a worker that died or stopped (the jobs FIFO), a server inside a report's stop (the client's socket).
Real processes as in test_serve (the stand-in server, real clients, real signals)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

from conftest import wait_for
from test_serve import HEALTHY, STANDINS, _ended, _measured, server  # noqa: F401  (server: the fixture)

from nsprof import serve_client

BIG = "x" * 100_000  # a job line over the FIFO's 64 KiB: the client's environment travels in it


def test_a_job_for_a_worker_that_stopped_then_died_never_hangs_the_server(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    proc, state = server(env={"NSPROF_TEST_BIG": BIG})
    worker = state["worker_pid"]
    os.kill(worker, signal.SIGSTOP)  # alive, reading nothing: the job line fills the FIFO
    client = subprocess.Popen(
        [sys.executable, str(STANDINS), "profile", HEALTHY, "--backend", "nsys", "--configs", "0", "--mode"]
        + ["direct", "--reps", "1", "--warmup", "0", "--json", "--work-dir", str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = state["log"]
        assert wait_for(lambda: "job 1:" in open(log).read()), "the server took the job"
        os.kill(worker, signal.SIGKILL)
        out, err = client.communicate(timeout=120)
    finally:
        client.kill()
        os.kill(worker, signal.SIGCONT) if _alive(worker) else None
    assert client.returncode == 0, err
    assert _measured(json.loads(out)) == {0: 1}, "measured without the server, once it ended"
    assert _ended(proc, own_gpu_lock_folder) != 0
    assert "the worker died in job 1" in (tmp_path / "server0.err").read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_request_larger_than_the_socket_buffer_waits_for_a_server_that_reads_late(tmp_path, monkeypatch):
    """A server inside `nsys stop` reads no request: a client's request larger than the socket's buffer
    cannot all be sent until it comes back, which is no sign that the server went away."""
    monkeypatch.setattr(serve_client, "PING_TIMEOUT_S", 0.5)
    path = tmp_path / "s"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    request = {"op": "job", "environ": {"BIG": BIG * 10}}
    got: list[bytes] = []
    late = threading.Event()

    def serve_late():
        conn, _ = listener.accept()
        late.wait(timeout=60)  # the client's send is under way and blocked
        data = b""
        while not data.endswith(b"\n"):
            data += conn.recv(1 << 20)
        got.append(data)
        conn.close()

    reader = threading.Thread(target=serve_late)
    reader.start()
    try:
        timer = threading.Timer(1.5, late.set)  # three times the connect bound
        timer.start()
        conn, why = serve_client._sent({"socket": str(path), "pid": os.getpid()}, request)
    finally:
        late.set()
        reader.join(timeout=60)
        listener.close()
    assert why == "" and conn is not None
    conn.close()
    assert json.loads(got[0]) == request
