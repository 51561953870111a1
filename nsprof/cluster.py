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
cluster. Both go through the same code (nsprof.cluster_dask; a batch's side in
nsprof.cluster_batch). Dask is imported only when a cluster is used.

One GPU model per ranking: a run whose workers (or whose batches' workers, by what their
profiled worker said after CUDA init) have different GPU models is refused in one line. With
several workers every batch also measures a shared calibration config (the run's first), and
the run's notes say how far apart the GPUs' medians of it are.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import uuid
from dataclasses import replace

from nsprof.cluster_batch import absolute_target, calibration_median, calibration_note, run_batch, shard
from nsprof.cluster_dask import (
    GPU_RESOURCE,
    checked_worker_gpus,
    close,
    cluster_gpu,
    combined_gpu,
    connect,
    load_dask,
    one_model,
    worker_gpus,
)
from nsprof.errors import NsprofError, TargetChanged, printable
from nsprof.measure import Backend, OnRows, Progress, Request
from nsprof.schema import Points
from nsprof.session import Measured
from nsprof.settings import ClusterSettings
from nsprof.timers.interleave import throttle_note

STOP_WAIT_S = 30.0  # how long an interrupted run waits for its running batches' finished rows

# Where callers find them, though they live in cluster_dask.
__all__ = ["Sharded", "close", "cluster_gpu", "connect", "sharded", "worker_gpus"]

BATCH_RETRIES = 1  # Dask's retries of a batch that raised (a worker that died is Dask's allowed-failures)


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
        if self.verbose:  # it names what a worker said: a build's error, a worker's name
            with self.lock:  # one line at a time from the event thread and the main one
                print(f"nsprof: {printable(text)}", file=sys.stderr, flush=True)

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
        elif kind == "stopped":
            self.say(f"{where}: batch {batch} stopped")


def _stop(distributed, client, futures: dict, gather: _Gather, topic: str, batches, n_ids: int) -> None:
    """An interrupted run's batches: asked to stop (the Dask Event named `topic`), each one's result waited
    for (STOP_WAIT_S at most; a second Ctrl-C stops waiting) and taken, a stopped one's as what it finished
    (its session stopped as on Ctrl-C, cluster_batch); then whatever is left is cancelled."""
    left = {future: k for future, k in futures.items() if k not in gather.taken}
    try:
        if left:
            distributed.Event(topic, client=client).set()
            print(
                f"nsprof: interrupted: waiting for {len(left)} batches to stop and hand over what they "
                f"finished (at most {STOP_WAIT_S:g} s)",
                file=sys.stderr,
                flush=True,
            )
            distributed.wait(list(left), timeout=STOP_WAIT_S)
    except (KeyboardInterrupt, TimeoutError, OSError):
        pass  # what came back is taken; the rest stays in its sessions' reports
    finally:
        late = 0
        try:
            for future, k in left.items():
                if future.status != "finished":
                    late += k in gather.follow.attempts  # started: what it finished is in its reports only
                    continue
                try:
                    result = _batch_result(distributed, future, batches[k], gather.inner, gather.layout)
                    if result.get("stopped"):
                        gather.take_stopped(k, result)
                    else:
                        gather.take(k, result, n_ids)
                except NsprofError as exc:  # its target changed, another GPU model: the interrupt goes on
                    print(f"nsprof: batch {k} not taken: {printable(exc)}", file=sys.stderr, flush=True)
        finally:
            client.cancel(list(futures))
            if left:  # a long-lived scheduler keeps a set Event for good
                with contextlib.suppress(Exception):
                    distributed.Event(topic, client=client).clear()
        if late:
            print(
                f"nsprof: {late} batches did not stop in time: what they finished is in their sessions' reports",
                file=sys.stderr,
                flush=True,
            )


def _batch_result(distributed, future, batch: list[int], inner: Backend, layout: Points) -> dict:
    """A batch's result, or one that fails each of its configs as not run when the batch
    itself failed (its workers died, it raised, or its session failed)."""
    try:
        result = future.result()
    except distributed.client.FutureCancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the batch's workers died (KilledWorker) or it raised
        return _not_run(batch, f"{type(exc).__name__}: {exc}", inner, layout, "?")
    if "error" in result and not result.get("changed"):  # its session failed: the other batches go on
        print(
            printable(
                f"nsprof: a batch (configs {batch[0]}..{batch[-1]}) on Dask worker {result['worker']} failed "
                f"({result['error']}): its configs are not run (--resume measures them)"
            ),
            file=sys.stderr,
            flush=True,
        )
        return _not_run(batch, result["error"], inner, layout, result["worker"])
    return result


def _not_run(batch: list[int], error: str, inner: Backend, layout: Points, worker: str) -> dict:
    """A batch's result that fails each of its configs as not run, for `error`."""
    from nsprof.schema import Failure

    why = " ".join(error.split())[:300]
    lost = {c: Failure(f"not run: its Dask batch failed ({why})", "not_run") for c in batch}
    return {"frame": inner.failure_frame(lost, layout), "failures": lost, "device": None, "worker": worker}


class _Gather:
    """What a run's batches have handed back so far: their own rows, failures, GPUs and the
    calibration config's medians per GPU."""

    def __init__(self, inner: Backend, layout: Points, batches, calibration, follow: _Follow, count, on_rows):
        self.inner, self.layout, self.batches, self.calibration = inner, layout, batches, calibration
        self.follow, self.count, self.on_rows = follow, count, on_rows
        self.frames, self.failures, self.devices, self.medians = [], {}, {}, {}
        self.model = ""
        self.notes: list[str] = []  # the batches' own, in order
        self.throttle: list[dict] = []  # every batch's throttle counts (nsprof.timers.interleave), said once
        self.taken: set[int] = set()  # the batches whose rows were handed on

    def take_stopped(self, k: int, result: dict) -> None:
        """What batch k finished before it was stopped: handed on as a part (its other configs neither
        measured nor failed)."""
        self.taken.add(k)
        frame = result["frame"]
        if len(frame):
            self.frames.append(frame)
            if self.on_rows is not None:
                self.on_rows(frame)

    def take(self, k: int, result: dict, n_ids: int) -> None:
        """Batch k's result: its rows handed on, its configs counted."""
        self.taken.add(k)
        batch = self.batches[k]
        if "error" in result:  # a target changed since it was read: nothing of this run may be ranked
            raise TargetChanged(
                f"batch {k} (configs {batch[0]}..{batch[-1]}) on Dask worker {result['worker']}: {result['error']}"
            )
        device = result.get("device") or {}
        self._check_model(k, device)
        own = self._own_rows(batch, result, device)
        self.failures.update({c: why for c, why in result.get("failures", {}).items() if c in set(batch)})
        counts = result.get("throttle_counts", [])
        checks = {throttle_note(method, counts) for method in _methods(counts)}  # said once for all batches
        self.notes += [
            note for note in result.get("notes", []) if note not in self.notes and note not in checks
        ]
        self.throttle += counts
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
            self.model = one_model(
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
            value = calibration_median(frame, self.calibration, layout)
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

        notes = [*self.notes, *(throttle_note(method, self.throttle) for method in _methods(self.throttle))]
        per_gpu = {who: float(pd.Series(values).median()) for who, values in self.medians.items()}
        if len(per_gpu) > 1:
            calibration = calibration_note(self.calibration, self.layout, per_gpu, self.model)
            print(f"nsprof: {printable(calibration)}", file=sys.stderr, flush=True)  # the workers' GPU names
            notes.append(calibration)
        devices = self.devices
        combined = (
            combined_gpu([d.get("uuid", "") for d in devices.values()], self.model) if devices else None
        )
        frame = pd.concat(self.frames, ignore_index=True) if self.frames else make_frame([])
        return Measured(
            frame=frame,
            failures=self.failures,
            device={"uuid": combined.uuid, "name": combined.name} if combined else None,
            wall_s=time.monotonic() - started,
            notes=notes,
            throttle_counts=self.throttle,
        )


def _methods(counts: list[dict]) -> list[str]:
    """The methods of throttle counts, in order."""
    return list(dict.fromkeys(x["method"] for x in counts if "method" in x))


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
        distributed = load_dask()
        client = connect(self.settings)
        gpus = checked_worker_gpus(client)
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
        except KeyboardInterrupt:
            _stop(distributed, client, futures, gather, topic, batches, len(ids))
            raise
        except BaseException:
            client.cancel(list(futures))  # a run that failed (its target changed, say): nothing to wait for
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
        shared = replace(request, target=absolute_target(request.target))
        return {
            client.submit(
                run_batch,
                self.inner.in_subfolder(f"batch{k}"),
                shared,
                batch,
                calibration,
                topic,
                k,
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
