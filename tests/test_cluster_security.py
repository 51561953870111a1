"""The local Dask cluster of `--devices` on a shared machine: its scheduler and workers listen on
127.0.0.1, which every local user can reach (loopback TCP checks no uid). A process without the
cluster's credentials, which is what every other user's process is, must not be able to run code
in it, nor read what it is doing over HTTP.

The intruder here is a fresh Python process of this user that knows only the scheduler's address
(another uid could not start this test's Python: its home is mode 700); it holds nothing the cluster
gave its own client.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import pytest

pytest.importorskip("distributed")

INTRUDER = """
import pathlib, sys
import distributed
from distributed.security import Security

security = Security.temporary() if sys.argv[2] == "own-tls" else None
client = distributed.Client(sys.argv[1], timeout=10, security=security)
client.run_on_scheduler(pathlib.Path(sys.argv[3]).write_text, "ran in nsprof's scheduler")
"""


@pytest.fixture
def local_cluster(tmp_path, monkeypatch):
    from nsprof import cluster, cluster_dask
    from nsprof.settings import ClusterSettings

    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    client = cluster.connect(ClusterSettings(devices=(0,)))
    try:
        (local,) = [found for own, found in cluster_dask._clients.values() if own is client]
        yield client, local
    finally:
        cluster_dask.close()


@pytest.mark.parametrize("credentials", ["none", "own-tls"])
def test_a_process_without_the_clusters_credentials_runs_nothing_in_it(local_cluster, tmp_path, credentials):
    client, _ = local_cluster
    marker = tmp_path / "intruded"
    intruder = subprocess.run(
        [sys.executable, "-c", INTRUDER, client.scheduler.address, credentials, str(marker)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert intruder.returncode != 0 and not marker.exists(), intruder.stderr[-500:]
    assert client.run_on_scheduler(lambda: "still nsprof's") == "still nsprof's"  # its own client works


def test_the_scheduler_answers_no_http_request(local_cluster):
    _, local = local_cluster
    ports = [sock.getsockname()[1] for sock in local.scheduler.http_server._sockets.values()]
    assert ports
    for port in ports:
        for path in ("/health", "/info/main/workers.html", "/json/identity.json", "/metrics"):
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
            assert answer.value.code == 404


def test_without_cryptography_devices_is_one_line_naming_it(tmp_path, monkeypatch):
    from nsprof import cluster
    from nsprof.errors import NsprofError
    from nsprof.settings import ClusterSettings

    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "cryptography", None)  # as if not installed
    with pytest.raises(NsprofError, match="cryptography package.*pip install 'nsprof\\[dask\\]'"):
        cluster.connect(ClusterSettings(devices=(0,)))


def _worker_http_ports(client) -> list[int]:
    def ports(dask_worker):
        return [sock.getsockname()[1] for sock in dask_worker.http_server._sockets.values()]

    return [port for found in client.run(ports).values() for port in found]


def _answered(port: int) -> list[str]:
    """The paths a worker's HTTP server answers with a page (anything but 404); its sitemap, a list of
    what it serves, is left out: it lists nothing."""
    answered = []
    for path in ("/health", "/metrics", "/statics/"):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                continue
        answered.append(path)
    return answered


def test_a_worker_its_nanny_starts_again_serves_no_http_page_either(local_cluster):
    import os
    import signal
    import time

    client, _ = local_cluster
    (before,) = _worker_http_ports(client)
    assert _answered(before) == []
    (pid,) = client.run(os.getpid).values()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # the Nanny starts a new worker process
        pids = (
            list(client.run(os.getpid, on_error="ignore").values())
            if client.scheduler_info()["workers"]
            else []
        )
        if pids and pids[0] != pid and isinstance(pids[0], int):
            break
        assert time.monotonic() < deadline, "the Nanny started no new worker"
        time.sleep(0.2)
    (after,) = _worker_http_ports(client)
    assert _answered(after) == []


def test_the_cluster_takes_no_module_from_a_scratch_folder_someone_made_in_the_shared_tmp(
    tmp_path, monkeypatch
):
    """Dask's scheduler and workers put their scratch folder first on sys.path, and by default that is
    $TMPDIR/dask-scratch-space, taken as it is when another user made it first: her modules there ran in
    nsprof's own process (the scheduler runs in it) and in its workers. The cluster keeps its scratch in a
    private folder of its own, removed when it closes."""
    import importlib.util
    import tempfile

    from nsprof import cluster, cluster_dask
    from nsprof.settings import ClusterSettings

    shared = tmp_path / "tmp"
    planted = shared / "dask-scratch-space"
    planted.mkdir(parents=True)
    (planted / "nsprof_planted_probe.py").write_text("")
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))

    def found() -> bool:
        return importlib.util.find_spec("nsprof_planted_probe") is not None

    client = cluster.connect(ClusterSettings(devices=(0,)))
    try:
        assert not found(), "nsprof's own process imports from the planted folder"
        assert not client.run_on_scheduler(found)
        assert not any(client.run(found).values()), "a worker imports from the planted folder"
    finally:
        cluster_dask.close()
    assert sorted(p.name for p in shared.iterdir()) == ["dask-scratch-space"], "its own folder is removed"
    assert sorted(p.name for p in planted.iterdir()) == ["nsprof_planted_probe.py"]
