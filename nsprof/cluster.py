"""Several GPUs and many hosts: Dask distributed as the engine (`pip install 'nsprof[dask]'`).

    from nsprof.cluster import sharded
    backend = sharded(GroundTruth(settings), ClusterSettings(devices=(0, 1)))
    measured = backend.measure(Request(target, config_ids, n))

`Sharded` is a Backend (nsprof.measure) that wraps another: it cuts the config ids into
batches and runs each batch as one task on a Dask worker that offers the resource `GPU` (one
worker per GPU, its CUDA_VISIBLE_DEVICES pinned to that GPU). On the worker the batch is
compiled and then measured by the wrapped Backend as it would be on one GPU: one supervised
session (nsprof.session: crash isolation, timeouts, requeue) holding that GPU's lock. Each
batch's tidy rows come back to the client as the batch completes (as_completed); only the
client hands them on (to the results store, to the ranking). A batch whose worker dies is run
again elsewhere by Dask's own scheduler (its allowed-failures; `retries` for errors): a result
is always one attempt's whole batch, so no config is lost and no row is attached to another
config's id.

`--devices 0,1` starts a LocalCluster of this host (one Nanny worker per GPU, resources
{"GPU": 1}, env CUDA_VISIBLE_DEVICES); `--scheduler tcp://host:port` connects to a running
cluster. Both go through the same code below. Dask is imported only when a cluster is used.

One GPU model per ranking: a run whose workers (or whose batches' workers, by what their
profiled worker said after CUDA init) have different GPU models is refused in one line. With
several workers every batch also measures a shared calibration config (the run's first), and
the run's notes say how far apart the GPUs' medians of it are.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from nsprof.errors import GpuBusy, NsprofError
from nsprof.host.gpu import Gpu
from nsprof.measure import Backend, OnRows, Progress, Request
from nsprof.schema import Points
from nsprof.session import Measured
from nsprof.settings import ClusterSettings

GPU_RESOURCE = "GPU"
CONNECT_TIMEOUT_S = 30.0  # reaching an existing scheduler
START_TIMEOUT_S = 120.0  # for a LocalCluster's workers, or an existing cluster's first GPU worker
LOCK_WAIT_S = 30.0  # a batch re-run on a restarted worker waits this long for the dead one's children
BATCH_RETRIES = 1  # Dask's retries of a batch that raised (a worker that died is Dask's allowed-failures)

_clients: dict[
    ClusterSettings, tuple[object, object | None]
] = {}  # settings -> (Client, LocalCluster or None)
_clients_lock = threading.Lock()


def _dask():
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
        distributed = _dask()
        if settings.scheduler:
            client, cluster = _connect_existing(distributed, settings.scheduler), None
        else:
            client, cluster = _start_local(distributed, settings.devices)
        _clients[key] = (client, cluster)
        return client


def _connect_existing(distributed, address: str):
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise NsprofError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
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
    {"GPU": 1}, its environment pinning CUDA_VISIBLE_DEVICES (nvidia-smi's order) to its GPU."""
    import logging

    cluster = distributed.LocalCluster(
        n_workers=0,
        processes=True,
        threads_per_worker=1,
        dashboard_address=None,
        memory_limit=0,
        silence_logs=logging.ERROR,
    )
    base = dict(cluster.new_spec["options"])
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


def _one_model(names: dict[str, str], what: str) -> str:
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


def cluster_gpu(settings: ClusterSettings) -> Gpu:
    """The GPU a run on this cluster is keyed by: its one model and its GPUs' UUIDs (sorted, joined
    by commas); a mixture of models is refused here, before anything runs."""
    gpus = worker_gpus(connect(settings))
    _one_model(
        {f"worker {info.get('visible') or address}": info.get("name", "") for address, info in gpus.items()},
        "the Dask workers",
    )
    return _combined(
        [info.get("uuid", "") for info in gpus.values()],
        next((info.get("name", "") for info in gpus.values() if info.get("name")), ""),
    )


def _combined(uuids, name: str) -> Gpu:
    return Gpu(None, ",".join(sorted({u for u in uuids if u})), name)


def shard(config_ids: list[int], workers: int, batch_size: int | None = None) -> list[list[int]]:
    """The config ids in batches, in order: `batch_size` each, or one batch per worker (each profiled
    session costs its start-up, ~10 s: fewer batches measure faster)."""
    if not config_ids:
        return []
    size = batch_size or math.ceil(len(config_ids) / max(1, workers))
    return [config_ids[i : i + size] for i in range(0, len(config_ids), size)]


def _absolute_target(target: str) -> str:
    """file.py:space with the file's absolute path: a worker's folder may not be the client's."""
    where, sep, attr = target.rpartition(":")
    if sep and (where.endswith(".py") or "/" in where) and Path(where).is_file():
        return f"{Path(where).resolve()}:{attr}"
    return target


def _run_batch(
    backend: Backend,
    target: str,
    batch: list[int],
    n_configs: int,
    calibration: int | None,
    topic: str,
    index: int,
    expect: dict | None = None,
    n_shapes: int = 0,
) -> dict:
    """On a Dask worker: compile and measure one batch (and the calibration config) in one session
    on this worker's GPU, holding its lock; progress goes to the client as events on `topic`. With
    `n_shapes` (a target with shapes), the batch's ids are point ids (nsprof.schema.Points)."""
    from distributed import get_worker

    from nsprof.profile import profile_result

    worker = get_worker()
    me = {
        "worker": str(worker.name),
        "address": worker.address,
        "pid": os.getpid(),
        "batch": index,
        "attempt": uuid.uuid4().hex,
    }

    own = set(batch)
    send, progress = _batch_events(worker, topic, me, own)
    send(event="start")
    ids = list(batch) + ([calibration] if calibration is not None and calibration not in own else [])
    started = time.monotonic()
    try:
        _wait_for_dead_predecessor(backend)
        result = profile_result(
            target,
            backend=backend,
            **({"points": ids} if n_shapes else {"config_ids": ids}),
            on_progress=progress,
            expect=expect,
        )
    except NsprofError as exc:
        send(event="error", detail=str(exc)[:300])
        return {**me, "error": f"{type(exc).__name__}: {exc}"}
    send(event="end")
    return {
        **me,
        "frame": result.frame,
        "failures": dict(result.failures),
        "device": result.device,
        "wall_s": time.monotonic() - started,
        "work_dir": str(result.work_dir) if result.work_dir else None,
    }


def _batch_events(worker, topic: str, me: dict, own: set[int]):
    """A batch's senders of events to the client: send(**message), and on_progress for the
    batch's own configs (not the calibration config of another batch)."""

    def send(**message) -> None:
        try:
            worker.log_event(topic, {**me, **message})
        except Exception:  # noqa: BLE001 - progress is not worth failing a batch for
            pass

    def progress(event: str, config_id: int, detail: str) -> None:
        if config_id in own:
            send(event=event, config=int(config_id), detail=str(detail)[:300])

    return send, progress


def _wait_for_dead_predecessor(backend: Backend) -> None:
    """Wait (at most LOCK_WAIT_S) until this worker's GPU lock is free, unless the session waits
    itself (--wait)."""
    from nsprof.host.lock import gpu_lock

    # A batch re-run on a worker whose predecessor was killed: that one's children let go of
    # the GPU lock within seconds (its pipe closes, its profiler gets the parent-death signal).
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            with gpu_lock(0):
                break
        except GpuBusy:
            if time.monotonic() > deadline or getattr(getattr(backend, "settings", None), "wait_gpu", False):
                break  # the session says who holds it, or waits (--wait)
            time.sleep(0.2)


def _calibration_median(frame, point: int, layout: Points) -> float | None:
    """The point's median over reps of the per-rep duration (summed over its kernels)."""
    rows = frame[
        (layout.of_frame(frame) == point).fillna(False) & frame["error"].isna() & frame["duration_ns"].notna()
    ]
    if rows.empty:
        return None
    per_rep = rows.groupby(["mode", "rep"], dropna=False)["duration_ns"].sum()
    return float(per_rep.median())


def calibration_note(config_id: int, medians: dict[str, float], model: str) -> str:
    """How far apart the GPUs' medians of the calibration config are, in one line."""
    shown = ", ".join(f"{who} {value / 1e3:.3f} µs" for who, value in sorted(medians.items()))
    low, high = min(medians.values()), max(medians.values())
    spread = (high / low - 1) * 100 if low > 0 else float("nan")
    return (
        f"calibration: config {config_id} measured on each of {len(medians)} GPUs"
        + (f" ({model})" if model else "")
        + f": medians {shown}; they differ by {spread:.1f}%"
    )


class _Follow:
    """The client's view of a job's progress, from the workers' events and the batches' results:
    each config counted once however many attempts report it, one bar for the whole job."""

    def __init__(self, on_progress: Progress | None, verbose: bool, batches: list[list[int]]) -> None:
        self.on_progress = on_progress
        self.verbose = verbose
        self.batches = batches
        self.counted: set[int] = set()
        self.attempts: dict[int, dict] = {}  # batch -> its latest attempt's start event
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        if self.verbose:
            print(f"nsprof: {text}", file=sys.stderr, flush=True)

    def count(self, event: str, config_id: int, detail: str = "") -> None:
        with self.lock:
            if event == "retry":
                if config_id in self.counted:
                    self.counted.discard(config_id)
                    if self.on_progress:
                        self.on_progress(event, config_id, detail)
                return
            if config_id in self.counted:
                return
            self.counted.add(config_id)
            if self.on_progress:
                self.on_progress(event, config_id, detail)

    def event(self, event) -> None:
        """A worker's event (subscribe_topic handler): (timestamp, message)."""
        message = event[1] if isinstance(event, tuple) else event
        if not isinstance(message, dict):
            return
        kind, batch, where = message.get("event"), message.get("batch"), f"worker {message.get('worker')}"
        if kind == "start":
            before = self.attempts.get(batch)
            self.attempts[batch] = message
            configs = self.batches[batch] if isinstance(batch, int) and batch < len(self.batches) else []
            if before is not None:
                self.say(
                    f"{where}: batch {batch} again (its run on worker {before.get('worker')} did not "
                    "come back)"
                )
            else:
                self.say(f"{where}: batch {batch} started ({len(configs)} configs)")
        elif kind in ("done", "fail", "retry"):
            if message.get("attempt") == (self.attempts.get(batch) or {}).get("attempt"):
                self.count(kind, int(message["config"]), str(message.get("detail", "")))
                if self.verbose and kind != "done":
                    self.say(f"{where}: config {message['config']} {kind}: {message.get('detail', '')}")
        elif kind == "error":
            self.say(f"{where}: batch {batch} failed: {message.get('detail', '')}")
        elif kind == "end":
            self.say(f"{where}: batch {batch} measured")


def _batch_result(distributed, future, batch: list[int], inner: Backend, layout: Points) -> dict:
    """A batch's result, or one that fails each of its configs as not run when the batch
    itself failed (its workers died, or it raised)."""
    from nsprof.schema import Failure

    try:
        return future.result()
    except distributed.client.FutureCancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the batch's workers died (KilledWorker) or it raised
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        lost = {c: Failure(f"not run: its Dask batch failed ({why})", "not_run") for c in batch}
        frame = inner.failure_frame(lost, layout)
        return {"frame": frame, "failures": lost, "device": None, "worker": "?"}


class _Gather:
    """What a run's batches have handed back so far: their own rows, failures, GPUs and the
    calibration config's medians per GPU."""

    def __init__(self, inner: Backend, layout: Points, batches, calibration, follow: _Follow, count, on_rows):
        self.inner, self.layout, self.batches, self.calibration = inner, layout, batches, calibration
        self.follow, self.count, self.on_rows = follow, count, on_rows
        self.frames, self.failures, self.devices, self.medians = [], {}, {}, {}
        self.model = ""

    def take(self, k: int, result: dict, n_ids: int) -> None:
        """Batch k's result: its rows handed on, its configs counted."""
        batch = self.batches[k]
        if "error" in result:
            raise NsprofError(
                f"batch {k} (configs {batch[0]}..{batch[-1]}) on Dask worker "
                f"{result['worker']}: {result['error']}"
            )
        device = result.get("device") or {}
        self._check_model(k, device)
        own = self._own_rows(batch, result, device)
        self.failures.update({c: why for c, why in result.get("failures", {}).items() if c in set(batch)})
        for config_id in batch:
            self.count(self.follow, config_id, self.failures)
        self.frames.append(own)
        if self.on_rows is not None and len(own):
            self.on_rows(own)
        self.follow.say(
            f"batch {k} back from worker {result.get('worker')} ({len(self.follow.counted)}/{n_ids} configs)"
        )

    def _check_model(self, k: int, device: dict) -> None:
        """Refuse a batch measured on another GPU model than the batches before it."""
        name = str(device.get("name") or "")
        if name and name != "cpu":
            self.devices[k] = device
            self.model = _one_model(
                {
                    f"configs {self.batches[j][0]}..{self.batches[j][-1]} (worker "
                    f"{(self.devices[j].get('uuid') or '?')})": self.devices[j].get("name", "")
                    for j in self.devices
                },
                "configs were",
            )

    def _own_rows(self, batch: list[int], result: dict, device: dict):
        """The result's rows of the batch's own configs (the calibration config's median noted),
        with a failure row for any config it holds no row of."""
        import pandas as pd

        from nsprof.schema import Failure

        layout = self.layout
        frame = result["frame"]
        own = frame[layout.of_frame(frame).isin(batch).fillna(False).astype(bool)]
        if self.calibration is not None:
            value = _calibration_median(frame, self.calibration, layout)
            if value is not None:
                who = device.get("uuid") or f"worker {result['worker']}"
                self.medians.setdefault(who, []).append(value)
        unrun = sorted(set(batch) - set(layout.of_frame(own).dropna().astype(int)))
        if unrun:  # never seen: a session hands back every config it was given
            missing = {c: Failure("not run: its batch's result held no row of it", "not_run") for c in unrun}
            own = pd.concat([own, self.inner.failure_frame(missing, layout)], ignore_index=True)
            result["failures"] = {**result.get("failures", {}), **missing}
        return own

    def measured(self, started: float) -> Measured:
        """The run's Measured, with a note on how far apart the GPUs' calibration medians are."""
        import pandas as pd

        from nsprof.schema import make_frame

        notes = []
        per_gpu = {who: float(pd.Series(values).median()) for who, values in self.medians.items()}
        if len(per_gpu) > 1:
            notes.append(calibration_note(self.calibration, per_gpu, self.model))
        for note in notes:
            print(f"nsprof: {note}", file=sys.stderr, flush=True)
        devices = self.devices
        combined = _combined([d.get("uuid", "") for d in devices.values()], self.model) if devices else None
        frame = pd.concat(self.frames, ignore_index=True) if self.frames else make_frame([])
        return Measured(
            frame=frame,
            failures=self.failures,
            device={"uuid": combined.uuid, "name": combined.name} if combined else None,
            wall_s=time.monotonic() - started,
            notes=notes,
        )


class Sharded(Backend):
    """`inner` over the GPU workers of a Dask cluster, one batch of configs per task."""

    def __init__(self, inner: Backend, settings: ClusterSettings) -> None:
        self.inner = inner
        self.settings = settings
        self.name = inner.name

    @property
    def labels(self) -> dict[str, str]:
        return self.inner.labels

    def failure_frame(self, failures: dict[int, str], points=None):
        return self.inner.failure_frame(failures, points)

    def tool_version(self) -> str:
        return self.inner.tool_version()

    def measure(
        self, request: Request, *, on_progress: Progress | None = None, on_rows: OnRows | None = None
    ) -> Measured:
        """As Backend.measure, request.ids batched as they come (shape by shape for a target with shapes)."""
        if request.device != 0:
            raise NsprofError(
                "a Dask run measures on its workers' GPUs (--devices), not on one device of its own"
            )
        if request.plan is not None:
            raise NsprofError("adaptive reps are not spread over a cluster (--devices, --scheduler)")
        layout = request.points
        distributed = _dask()
        client = connect(self.settings)
        gpus = worker_gpus(client)
        _one_model(
            {
                f"worker {info.get('visible') or address}": info.get("name", "")
                for address, info in gpus.items()
            },
            "the Dask workers",
        )
        ids = list(request.ids)
        batches = shard(ids, len(gpus), self.settings.batch_size)
        calibration = ids[0] if self.settings.calibrate and len(gpus) > 1 and len(batches) > 1 else None
        follow = _Follow(on_progress, self.settings.verbose, batches)
        job = uuid.uuid4().hex[:12]
        topic = f"nsprof-{job}"
        client.subscribe_topic(topic, follow.event)
        started = time.monotonic()
        futures = self._submit(client, request, batches, calibration, topic, job)
        follow.say(f"{len(ids)} configs in {len(batches)} batches over {len(gpus)} GPU workers")
        gather = _Gather(self.inner, layout, batches, calibration, follow, self.count_final, on_rows)
        try:
            for future in distributed.as_completed(list(futures)):
                k = futures[future]
                gather.take(k, _batch_result(distributed, future, batches[k], self.inner, layout), len(ids))
        except BaseException:
            client.cancel(list(futures))
            raise
        finally:
            try:
                client.unsubscribe_topic(topic)
            except Exception:  # noqa: BLE001
                pass
        return gather.measured(started)

    def _submit(
        self, client, request: Request, batches: list[list[int]], calibration, topic: str, job: str
    ) -> dict:
        """One Dask task per batch, each on a worker with one GPU: future -> batch number."""
        where = _absolute_target(request.target)
        return {
            client.submit(
                _run_batch,
                self.inner.in_subfolder(f"batch{k}"),
                where,
                batch,
                request.n_configs,
                calibration,
                topic,
                k,
                request.expect,
                request.n_shapes,
                key=f"nsprof-batch-{job}-{k}",
                resources={GPU_RESOURCE: 1},
                retries=BATCH_RETRIES,
                pure=False,
            ): k
            for k, batch in enumerate(batches)
        }

    @staticmethod
    def count_final(follow: _Follow, config_id: int, failures: dict[int, str]) -> None:
        """A config's batch came back: count it, if no event did yet."""
        follow.count("fail" if config_id in failures else "done", config_id, failures.get(config_id, ""))


def sharded(backend: Backend, settings: ClusterSettings | None) -> Backend:
    """`backend` spread over the Dask cluster `settings` names, or itself when None."""
    return backend if settings is None else Sharded(backend, settings)
