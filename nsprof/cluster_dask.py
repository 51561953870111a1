"""The Dask plumbing of nsprof.cluster: one Client per cluster and process (a LocalCluster of this
host, one Nanny worker per GPU, or a running scheduler), closed at exit; the workers that offer the
GPU resource and which GPU each is; one GPU model per run."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from nsprof.errors import NsprofError
from nsprof.host.gpu import Gpu
from nsprof.reports.checks import one_line
from nsprof.settings import ClusterSettings

GPU_RESOURCE = "GPU"
CONNECT_TIMEOUT_S = 30.0  # reaching an existing scheduler
START_TIMEOUT_S = 120.0  # for a LocalCluster's workers, or an existing cluster's first GPU worker

_clients: dict[
    ClusterSettings, tuple[object, object | None]
] = {}  # settings -> (Client, LocalCluster or None)
_clients_lock = threading.Lock()
_scratch: list[str] = []  # the local clusters' private scratch folders, removed by close()


def load_dask():
    try:
        import distributed
    except ImportError:
        raise NsprofError("--devices and --scheduler need Dask: pip install 'nsprof[dask]'") from None
    return distributed


def _cluster_key(settings: ClusterSettings) -> ClusterSettings:
    """What identifies a cluster: its devices or address, not how it is used."""
    return ClusterSettings(devices=settings.devices, scheduler=settings.scheduler)


def connect(settings: ClusterSettings):
    """The Dask Client for `settings`, started once per process (closed by close() or at exit)."""
    key = _cluster_key(settings)
    with _clients_lock:
        if key in _clients:
            return _clients[key][0]
        distributed = load_dask()
        if settings.scheduler:
            client, cluster = _connect_existing(distributed, settings.scheduler), None
        else:
            client, cluster = _start_local(distributed, settings.devices)
        _clients[key] = (client, cluster)
        _warm(client)
        return client


def _warm(client) -> None:
    """Start the GPU workers' imports of what a batch needs without waiting for them: they run
    while the client loads the target and checks its store, not in the first batch."""
    from nsprof.cluster_batch import warm_imports

    # Only a head start: a worker that cannot take it imports these in its first batch.
    client.run(warm_imports, workers=list(gpu_workers(client)), wait=False, on_error="ignore")


def _connect_existing(distributed, address: str):
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as exc:  # ValueError: an address Dask cannot parse
        raise NsprofError(f"cannot reach the Dask scheduler at {address}: {one_line(exc)}") from None
    deadline = time.monotonic() + START_TIMEOUT_S
    while not gpu_workers(client):
        if time.monotonic() > deadline:
            client.close()
            raise NsprofError(
                f"no worker of the Dask cluster at {address} offers the resource {GPU_RESOURCE} "
                f"after {START_TIMEOUT_S:g} s; start one per GPU with "
                f"CUDA_VISIBLE_DEVICES=N dask worker {address} --nthreads 1 --resources {GPU_RESOURCE}=1"
            )
        time.sleep(0.2)
    return client


def _start_local(distributed, devices: tuple[int, ...]):
    """A LocalCluster of this host: one Nanny worker per GPU, one thread each, resources
    {"GPU": 1}, its environment pinning CUDA_VISIBLE_DEVICES (nvidia-smi's order) to its GPU.

    Every local user can reach 127.0.0.1, and a Dask scheduler runs what any client sends it: the
    cluster speaks mutual TLS with credentials made when it starts (Security.temporary), which only
    this process and its workers hold, and its HTTP servers, which cannot be left out, serve nothing
    but an empty sitemap (docs/trust.md). Its scratch folder, which the scheduler (in this process) and
    the workers put first on sys.path, is a private one of its own: Dask's default,
    $TMPDIR/dask-scratch-space, is taken as it is when another user made it first."""
    import copy
    import logging

    import dask

    try:
        import cryptography  # noqa: F401 - Security.temporary makes the credentials with it
    except ImportError:
        raise NsprofError(
            "--devices needs the cryptography package for its cluster's TLS: pip install 'nsprof[dask]'"
        ) from None
    scratch = _new_scratch()
    routes = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
    with dask.config.set({**routes, "temporary-directory": scratch}):
        cluster = distributed.LocalCluster(
            local_directory=scratch,
            n_workers=0,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            memory_limit=0,
            silence_logs=logging.ERROR,
            security=True,
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # a free port, not 8787
        )
        # a Nanny keeps the config it starts a worker with, a shallow merge that shares the global
        # dicts this block restores on exit: its own copy, or a restarted worker serves HTTP again
        base = {**cluster.new_spec["options"], "config": copy.deepcopy(dask.config.config)}
        for device in devices:
            options = {
                **base,
                "nthreads": 1,
                "memory_limit": 0,
                "resources": {GPU_RESOURCE: 1},
                "env": {"CUDA_VISIBLE_DEVICES": str(device), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            }
            cluster.worker_spec[f"gpu{device}"] = {"cls": distributed.Nanny, "options": options}
        cluster.scale(len(devices))  # the spec above, as it stands: starts its workers
        client = distributed.Client(cluster)
        try:
            client.wait_for_workers(len(devices), timeout=START_TIMEOUT_S)
        except TimeoutError:
            client.close()
            cluster.close()
            raise NsprofError(
                f"the local Dask cluster's {len(devices)} workers did not start within {START_TIMEOUT_S:g} s"
            ) from None
    return client, cluster


def close() -> None:
    """Close every client (and LocalCluster, whose workers and their sessions end with it)."""
    with _clients_lock:
        items = list(_clients.values())
        _clients.clear()
    for client, cluster in items:
        for thing in (client, cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # noqa: BLE001 - closing at exit: nothing left to tell
                    pass
    _remove_scratch()


def _new_scratch() -> str:
    """A private scratch folder (mkdtemp, mode 0700) for a local cluster, removed by close()."""
    import tempfile

    scratch = tempfile.mkdtemp(prefix="nsprof-dask-")
    _scratch.append(scratch)
    return scratch


def _remove_scratch() -> None:
    """The closed clusters' scratch folders, and their places on sys.path (a removed folder's name could be
    made again by anyone)."""
    import shutil

    while _scratch:
        folder = _scratch.pop()
        sys.path[:] = [entry for entry in sys.path if not entry.startswith(folder)]
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(close)


def gpu_workers(client) -> dict[str, dict]:
    """{address: scheduler's worker info} of the workers that offer the GPU resource."""
    workers = (
        client.scheduler_info(n_workers=-1)["workers"]
        if _takes_n_workers(client)
        else client.scheduler_info()["workers"]
    )
    return {address: info for address, info in workers.items() if info.get("resources", {}).get(GPU_RESOURCE)}


def _takes_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _worker_gpu() -> dict:
    """On a worker: the GPU its CUDA device 0 is (nsprof.host.gpu.which_gpu, in its environment)."""
    import dataclasses

    from nsprof.host.gpu import which_gpu

    return {
        **dataclasses.asdict(which_gpu(0)),
        "pid": os.getpid(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


def worker_gpus(client) -> dict[str, dict]:
    """{address: {"index", "uuid", "name", "pid", "visible"}} of every GPU worker."""
    addresses = list(gpu_workers(client))
    return client.run(_worker_gpu, workers=addresses) if addresses else {}


def one_model(names: dict[str, str], what: str) -> str:
    """The one GPU model of `names` ({who: model}, "" unknown), or the refusal."""
    models = sorted({name for name in names.values() if name})
    if len(models) > 1:
        per = "; ".join(
            f"{model}: {', '.join(sorted(w for w, n in names.items() if n == model))}" for model in models
        )
        raise NsprofError(
            f"{what} run on different GPU models ({per}): nsprof never ranks configs measured on "
            "different models together; choose GPUs of one model"
        )
    return models[0] if models else ""


def checked_worker_gpus(client) -> dict[str, dict]:
    """worker_gpus(client), refused when the workers hold GPUs of more than one model."""
    gpus = worker_gpus(client)
    one_model(
        {f"worker {info.get('visible') or address}": info.get("name", "") for address, info in gpus.items()},
        "the Dask workers",
    )
    return gpus


def cluster_gpu(settings: ClusterSettings) -> Gpu:
    """The GPU a run on this cluster is keyed by: its one model and its GPUs' UUIDs (sorted, joined
    by commas); a mixture of models is refused here, before anything runs."""
    gpus = checked_worker_gpus(connect(settings))
    return combined_gpu(
        [info.get("uuid", "") for info in gpus.values()],
        next((info.get("name", "") for info in gpus.values() if info.get("name")), ""),
    )


def combined_gpu(uuids, name: str) -> Gpu:
    """The Gpu of several GPUs of one model: their UUIDs sorted, joined by commas."""
    return Gpu(None, ",".join(sorted({u for u in uuids if u})), name)
