"""What runs of nsprof.cluster on a Dask worker: one batch of configs (and the calibration config)
compiled and measured in one session on the worker's GPU, its progress sent to the client as
events, its session stopped as on Ctrl-C once its task is cancelled; and the calibration config's
median, which tells how far apart the GPUs measure."""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nsprof.errors import GpuBusy, NsprofError, TargetChanged
from nsprof.measure import Backend, Request
from nsprof.schema import Points

LOCK_WAIT_S = 30.0  # a batch re-run on a restarted worker waits this long for the dead one's children
CANCEL_POLL_S = 0.1  # how often a running batch looks whether its task was cancelled
# a stop not seen to end its batch by then is raised again: the client no longer waits for that batch
# (nsprof.cluster.STOP_WAIT_S), and a second interrupt of its handover costs nothing
RESTOP_S = 30.0


def shard(config_ids: list[int], workers: int, batch_size: int | None = None) -> list[list[int]]:
    """The config ids in batches, in order: `batch_size` each, or one batch per worker (each profiled
    session costs its start-up, ~10 s: fewer batches measure faster)."""
    if not config_ids:
        return []
    size = batch_size or math.ceil(len(config_ids) / max(1, workers))
    return [config_ids[i : i + size] for i in range(0, len(config_ids), size)]


async def warm_imports() -> None:
    """On a worker: import what a batch needs, before its first batch comes (in a thread: the
    worker's event loop goes on answering the scheduler)."""
    import asyncio

    await asyncio.to_thread(_batch_imports)


def _batch_imports() -> None:
    import pandas  # noqa: F401

    import nsprof.profile  # noqa: F401
    import nsprof.session.run  # noqa: F401


def absolute_target(target: str) -> str:
    """file.py:space with the file's absolute path: a worker's folder may not be the client's."""
    where, sep, attr = target.rpartition(":")
    if sep and (where.endswith(".py") or "/" in where) and Path(where).is_file():
        return f"{Path(where).resolve()}:{attr}"
    return target


def run_batch(
    backend: Backend, request: Request, batch: list[int], calibration: int | None, topic: str, index: int
) -> dict:
    """On a Dask worker: compile and measure one batch (and the calibration config) in one session on
    this worker's GPU, holding its lock; progress goes to the client as events on `topic`. `request`:
    the run's, whose target, layout and expectations the batch shares (the target is not imported
    here: the session's worker does that). The batch's ids are point ids (nsprof.schema.Points).

    Stopped (the client, interrupted, set the Dask Event named after `topic`; or its task was cancelled), its
    session stops as on Ctrl-C, and the result holds what it finished, with "stopped" set."""
    from distributed import get_worker

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
    _batch_imports()  # before the interrupt can come: never a half-imported pandas in this worker
    finished: list = []  # the frames of the configs the session made final, as it goes
    stop = _StopWhenCancelled(_stop_asked(worker, topic))
    try:
        with stop:
            _wait_for_dead_predecessor(backend)
            result = backend.measure(replace(request, ids=ids), on_progress=progress, on_rows=finished.append)
    except KeyboardInterrupt:  # stopped: what it finished goes to the client, which waits for it
        send(event="stopped")
        return {**me, "stopped": True, "frame": _own_frame(finished, own, request.points)}
    except NsprofError as exc:
        send(event="error", detail=str(exc)[:300])
        # a target changed since it was read stays that kind at the client (nsprof.errors.TargetChanged)
        return {**me, "error": f"{type(exc).__name__}: {exc}", "changed": isinstance(exc, TargetChanged)}
    finally:
        stop.close()  # again where the stop landed in __exit__ itself
    send(event="end")
    return {
        **me,
        "frame": result.frame,
        "failures": dict(result.failures),
        "notes": list(result.notes),
        "throttle_counts": list(result.throttle_counts),
        "device": result.device,
        "wall_s": time.monotonic() - started,
        "work_dir": str(result.work_dir) if result.work_dir else None,
    }


def _own_frame(frames: list, own: set[int], layout: Points):
    """The rows of a batch's own points among `frames` (an empty tidy frame for none)."""
    import pandas as pd

    from nsprof.schema import make_frame

    if not frames:
        return make_frame([])
    frame = pd.concat(frames, ignore_index=True)
    return frame[layout.of_frame(frame).isin(own).fillna(False).astype(bool)]


class _StopWhenCancelled:
    """While a batch measures: once `should_stop()` (nsprof.cluster_batch._stop_asked) says so, a
    KeyboardInterrupt is raised in the batch's thread, where its session stops its profiler and worker as
    on Ctrl-C and hands over what they finished (nsprof.session.supervise). A Dask task that runs on is not
    stopped by Dask itself, and the interrupt of the client's Ctrl-C reaches only the client.

    Python drops an exception raised where it cannot propagate (a garbage collector's callback, which
    Dask's worker registers; a __del__) and prints it as "ignored": this stop, dropped there, is not printed
    and is raised again (_hook_over); one lost where no hook sees it is raised again after RESTOP_S.
    close() may be called again: a stop that lands in __exit__ itself skips it."""

    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop
        self.thread = threading.get_ident()
        self.lock = threading.Lock()
        self.ended = threading.Event()
        self.raised = False
        self.dropped_once = threading.Event()

    def _watch(self) -> None:
        while not self.ended.wait(CANCEL_POLL_S):
            if self.should_stop():
                break
        else:
            return
        while True:
            with self.lock:
                if self.ended.is_set():
                    return
                self.dropped_once.clear()
                self.raised = True
                _async_raise(self.thread, KeyboardInterrupt)
            unseen_until = time.monotonic() + RESTOP_S
            while not self.dropped_once.wait(CANCEL_POLL_S):
                if self.ended.is_set():
                    return
                if time.monotonic() >= unseen_until:  # lost where no hook saw it (or slow to hand over)
                    break
            # raised again a moment later, by when the batch's thread has left the hook that saw it dropped
            if self.ended.wait(CANCEL_POLL_S):
                return

    def dropped(self) -> bool:
        """A KeyboardInterrupt was dropped in this batch's thread: if it may be this stop, the watch raises
        it again."""
        if not self.raised or self.ended.is_set():
            return False
        self.dropped_once.set()
        return True

    def __enter__(self) -> _StopWhenCancelled:
        with _HOOK_LOCK:
            if not getattr(sys.unraisablehook, "nsprof_stops", False):
                sys.unraisablehook = _hook_over(sys.unraisablehook)
            _STOPPING[self.thread] = self
        try:
            threading.Thread(target=self._watch, name=f"nsprof-stop-{self.thread}", daemon=True).start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """No stop from now on; the hook put back once no batch runs here."""
        while not self.ended.is_set():
            try:
                with self.lock:
                    self.ended.set()
            except KeyboardInterrupt:  # this stop, raised just before: taken, and the batch ends anyway
                continue
        with _HOOK_LOCK:
            if _STOPPING.get(self.thread) is self:
                del _STOPPING[self.thread]
            if not _STOPPING and getattr(sys.unraisablehook, "nsprof_stops", False):
                sys.unraisablehook = sys.unraisablehook.previous


_HOOK_LOCK = threading.Lock()
_STOPPING: dict[int, _StopWhenCancelled] = {}  # thread id -> the stop watching the batch running there


def _hook_over(previous: Callable) -> Callable:
    """A sys.unraisablehook for while batches run here, over `previous`: a KeyboardInterrupt dropped in a
    batch's thread (where it may land in `previous` too) is that batch's stop, raised again and not
    printed; anything else goes to `previous`."""

    def hook(unraisable) -> None:
        stop = _STOPPING.get(threading.get_ident())
        if stop is not None and issubclass(unraisable.exc_type, KeyboardInterrupt) and stop.dropped():
            return
        try:
            previous(unraisable)
        except KeyboardInterrupt:
            if stop is None or not stop.dropped():
                raise

    hook.nsprof_stops, hook.previous = True, previous
    return hook


def _async_raise(thread: int, exc: type[BaseException]) -> None:
    """Raise `exc` in the thread `thread` at its next Python instruction."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc))


def _stop_asked(worker, stop: str) -> Callable[[], bool]:
    """Whether a batch on `worker` is to stop: the client, interrupted, set the Dask Event named `stop` (and
    waits for the batches' results), or the batch's task was cancelled (the client is gone and nobody wants
    its result)."""
    from distributed import Event, get_client

    event = Event(stop, client=get_client())  # the worker's client, named: the watch thread asks it
    key = worker.get_current_task()

    def asked() -> bool:
        task = worker.state.tasks.get(key)
        if task is None or task.state == "cancelled":
            return True
        try:
            return event.is_set()
        except Exception:  # noqa: BLE001 - the scheduler gone: the cancelled task says it instead
            return False

    return asked


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


def calibration_median(frame, point: int, layout: Points) -> float | None:
    """The point's median over reps of the per-rep duration (summed over its kernels)."""
    rows = frame[
        (layout.of_frame(frame) == point).fillna(False) & frame["error"].isna() & frame["duration_ns"].notna()
    ]
    if rows.empty:
        return None
    per_rep = rows.groupby(["mode", "rep"], dropna=False)["duration_ns"].sum()
    return float(per_rep.median())


def calibration_note(point: int, layout: Points, medians: dict[str, float], model: str) -> str:
    """How far apart the GPUs' medians of the calibration point are, in one line."""
    config_id, shape = layout.split(point)
    shown = ", ".join(f"{who} {value / 1e3:.3f} µs" for who, value in sorted(medians.items()))
    low, high = min(medians.values()), max(medians.values())
    spread = (high / low - 1) * 100 if low > 0 else float("nan")
    return (
        f"calibration: config {config_id}{'' if shape is None else f' at shape {shape}'} measured on each of {len(medians)} GPUs"
        + (f" ({model})" if model else "")
        + f": medians {shown}; they differ by {spread:.1f}%"
    )
