"""An interrupted (or failed) run on a cluster, with a stand-in Dask (no cluster): what _stop takes and cancels."""

from __future__ import annotations

import types

import pytest

from nsprof import cluster
from nsprof.errors import TargetChanged
from nsprof.measure import Request
from nsprof.settings import ClusterSettings


class FakeFuture:
    def __init__(self, status, result=None):
        self.status, self._result = status, result

    def result(self):
        return self._result


class FakeClient:
    def __init__(self):
        self.cancelled = []

    def subscribe_topic(self, topic, handler):
        pass

    def unsubscribe_topic(self, topic):
        pass

    def cancel(self, futures):
        self.cancelled += futures


class FakeEvent:
    set_names: list = []

    def __init__(self, name, client=None):
        self.name = name

    def set(self):
        FakeEvent.set_names.append(self.name)


def fake_dask(order, waited):
    class client_module:
        class FutureCancelledError(Exception):
            pass

    def wait(futures, timeout=None):
        waited.append(timeout)

    return types.SimpleNamespace(
        Event=FakeEvent, wait=wait, as_completed=lambda futures: iter(order), client=client_module
    )


class Inner:
    name = "ncu"
    labels = {}

    def failure_frame(self, failures, points=None):
        from nsprof.schema import make_frame

        return make_frame([])


CHANGED = {"worker": "w1", "batch": 1, "error": "TargetChanged: edited", "changed": True}


def _sharded(monkeypatch, futures, order, waited):
    monkeypatch.setattr(cluster, "load_dask", lambda: fake_dask(order, waited))
    client = FakeClient()
    monkeypatch.setattr(cluster, "connect", lambda settings: client)
    monkeypatch.setattr(cluster, "checked_worker_gpus", lambda c: [0, 1])
    backend = cluster.Sharded(Inner(), ClusterSettings(devices=(0, 1), batch_size=2, calibrate=False))
    monkeypatch.setattr(backend, "_submit", lambda *a, **k: futures)
    return backend, client


def test_a_batch_that_found_the_target_changed_during_the_stop_still_lets_the_rest_be_cancelled(
    monkeypatch, capsys
):
    """Interrupted while batch 0 runs; batch 1 comes back (target changed) during the wait: the
    KeyboardInterrupt goes on (exit 130) and every future is cancelled (the TargetChanged taking it replaced
    the interrupt, and nothing was cancelled)."""
    running, changed = FakeFuture("pending"), FakeFuture("finished", CHANGED)
    futures = {running: 0, changed: 1}

    def interrupted():
        raise KeyboardInterrupt
        yield  # noqa

    waited = []
    backend, client = _sharded(monkeypatch, futures, [], waited)
    monkeypatch.setattr(
        cluster,
        "load_dask",
        lambda: types.SimpleNamespace(
            **{**vars(fake_dask([], waited)), "as_completed": lambda f: interrupted()}
        ),
    )
    with pytest.raises(KeyboardInterrupt):
        backend.measure(Request("t.py:space", range(4), 4), on_rows=lambda f: None)
    assert set(client.cancelled) == {running, changed}


def test_a_run_that_failed_is_not_said_to_be_interrupted_nor_waits(monkeypatch, capsys):
    """Batch 1's target changed (not an interrupt): the run ends with TargetChanged, cancelled at once,
    with no 'interrupted' line and no wait for the other batch."""
    running, changed = FakeFuture("pending"), FakeFuture("finished", CHANGED)
    waited = []
    backend, client = _sharded(monkeypatch, {running: 0, changed: 1}, [changed], waited)
    with pytest.raises(TargetChanged):
        backend.measure(Request("t.py:space", range(4), 4), on_rows=lambda f: None)
    err = capsys.readouterr().err
    assert "interrupted" not in err, err
    assert not waited, f"waited {waited} s for batches of a run that is thrown away"


def test_a_stop_that_lands_in_a_gc_callback_is_raised_again_in_the_batch_and_not_printed():
    """A batch asked to stop gets a KeyboardInterrupt raised in its thread at its next Python instruction.
    Where that instruction is in a garbage collector's callback (Dask's worker registers one), Python prints
    the exception as "ignored" and drops it: the batch would measure on, and the user would see a traceback.
    The stop is raised again, silently, until it reaches the batch's own code."""
    import gc
    import sys
    import threading

    from nsprof.cluster_batch import _StopWhenCancelled

    stop, inside, outcome, printed = threading.Event(), threading.Event(), [], []
    batch_thread: list[threading.Thread] = []

    def callback(phase, info):
        if phase == "start" and threading.current_thread() in batch_thread and not inside.is_set():
            inside.set()
            while True:  # the stop lands in here, the batch's first Python instructions after it is asked
                pass

    def batch():
        try:
            with _StopWhenCancelled(stop.is_set):
                gc.collect()  # into the callback, where it spins until the stop is raised there
                while True:
                    stop.wait(0.01)
        except KeyboardInterrupt:
            outcome.append("stopped")

    previous_hook, sys.unraisablehook = sys.unraisablehook, printed.append
    gc.callbacks.append(callback)
    try:
        batch_thread.append(threading.Thread(target=batch, daemon=True))
        batch_thread[0].start()
        assert inside.wait(60)
        stop.set()
        batch_thread[0].join(60)
    finally:
        gc.callbacks.remove(callback)
        sys.unraisablehook = previous_hook
    assert outcome == ["stopped"] and not printed, (outcome, [p.exc_type for p in printed])
