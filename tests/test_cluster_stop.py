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
    assert _stop_dropped_in_gc_callback() == (["stopped"], [])


class _RaisesInDel:
    def __del__(self):
        raise ValueError("unrelated")


def _unraisable_hook_kept(test):
    """Run `test(printed)` with sys.unraisablehook = printed.append, and put the hook there was back."""
    import sys

    outer, printed = sys.unraisablehook, []
    sys.unraisablehook = printed.append
    try:
        test(printed)
    finally:
        sys.unraisablehook = outer


def _run_to_its_end(batch, printed) -> None:
    """Run `batch` in a thread of its own to its end: then no watch of its runs on, no stop of its is
    registered, and the hook is the one there was (`printed.append`)."""
    import sys
    import threading

    from nsprof import cluster_batch

    thread = threading.Thread(target=batch)
    thread.start()
    thread.join(60)
    watch = [w for w in threading.enumerate() if w.name == f"nsprof-stop-{thread.ident}"]
    for w in watch:
        w.join(10)
    assert not any(w.is_alive() for w in watch)
    assert thread.ident not in cluster_batch._STOPPING and sys.unraisablehook == printed.append


def test_a_stop_asked_before_the_batch_enters_still_ends_its_watch_and_its_hook():
    """The client interrupted while the batch was still starting: the stop comes in the batch's body, and
    once the batch is out, no watch is left running and no hook of its stays installed."""
    import time

    from nsprof import cluster_batch

    def test(printed):
        caught = []

        def batch():
            try:
                with cluster_batch._StopWhenCancelled(lambda: True):
                    for _ in range(3000):  # a raise lands between two sleeps
                        time.sleep(0.01)
            except KeyboardInterrupt:
                caught.append(True)

        _run_to_its_end(batch, printed)
        assert caught

    _unraisable_hook_kept(test)


def test_other_unraisable_exceptions_reach_the_hook_there_was_whatever_hooks_came_between_batches():
    """A library's hook that calls the one it found, installed between batches, and a hook swapped in and
    back around a batch: an unrelated exception Python cannot raise reaches the hook there was, once."""
    import sys

    from nsprof.cluster_batch import _StopWhenCancelled

    def test(printed):
        with _StopWhenCancelled(lambda: False):
            found = sys.unraisablehook
            sys.unraisablehook = lambda unraisable: found(unraisable)  # a library's, over nsprof's
        with _StopWhenCancelled(lambda: False):
            pass
        _RaisesInDel()
        sys.unraisablehook, temporary = printed.append, []
        saved, sys.unraisablehook = sys.unraisablehook, temporary.append
        with _StopWhenCancelled(lambda: False):
            pass
        sys.unraisablehook = saved
        _RaisesInDel()
        assert [u.exc_type for u in printed] == [ValueError, ValueError] and not temporary

    _unraisable_hook_kept(test)


def test_two_batches_entering_at_once_chain_the_hook_once(monkeypatch):
    """Two batches in two threads of one worker enter together (a thread switch forced between one's look
    at the hook and its setting it): an unrelated exception Python cannot raise reaches the hook there was."""
    import sys
    import threading

    from nsprof import cluster_batch

    first_in, second_looked = threading.Event(), threading.Event()

    class Sys:
        paused = False

        @property
        def unraisablehook(self):
            value = sys.unraisablehook
            if threading.current_thread().name == "second" and not Sys.paused:
                Sys.paused = True
                second_looked.set()
                first_in.wait(2)  # a thread switch here (the other batch enters, unless it must wait)
            return value

        @unraisablehook.setter
        def unraisablehook(self, hook):
            sys.unraisablehook = hook

    def first():
        second_looked.wait(10)
        with cluster_batch._StopWhenCancelled(lambda: False):
            first_in.set()

    def second():
        with cluster_batch._StopWhenCancelled(lambda: False):
            pass

    def test(printed):
        monkeypatch.setattr(cluster_batch, "sys", Sys())
        threads = [threading.Thread(target=first), threading.Thread(target=second, name="second")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        monkeypatch.undo()
        _RaisesInDel()
        assert [u.exc_type for u in printed] == [ValueError]

    _unraisable_hook_kept(test)


def test_a_batch_that_ended_unstopped_leaves_a_traced_thread_running():
    """Taking back a stop never raised (PyThreadState_SetAsyncExc with NULL) leaves Python 3.11's
    interrupt check set: a thread under a trace function (coverage, a debugger) then hangs at its next call.
    A batch that was never asked to stop takes nothing back."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom nsprof import cluster_batch\n"
        "with cluster_batch._StopWhenCancelled(lambda: False): pass\n"
        "def f(): pass\nsys.settrace(lambda *a: None)\nf()\nprint('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout == "ok\n", done.stderr


def _stop_dropped_in_gc_callback() -> tuple[list[str], list]:
    """A batch whose stop lands in a gc callback, with sys.unraisablehook as it is: (what the batch did, the
    types of what reached that hook)."""
    import gc
    import sys
    import threading
    import time

    from nsprof.cluster_batch import _StopWhenCancelled

    stop, armed, inside, outcome, printed = (threading.Event(), threading.Event(), threading.Event(), [], [])
    deadline = time.monotonic() + 60  # a bound for the loops below, should the stop never come

    def callback(phase, info):
        if phase == "start" and armed.is_set() and not inside.is_set():
            inside.set()
            while time.monotonic() < deadline:  # the stop lands in here: the batch's next instructions
                pass

    def batch():
        try:
            with _StopWhenCancelled(stop.is_set):
                armed.set()
                gc.collect()  # into the callback, where it spins until the stop is raised there
                while time.monotonic() < deadline:
                    time.sleep(0.01)
            outcome.append("ran on")
        except KeyboardInterrupt:
            outcome.append("stopped")

    previous_hook, sys.unraisablehook = sys.unraisablehook, printed.append
    gc.callbacks.append(callback)
    try:
        thread = threading.Thread(target=batch, daemon=True)
        thread.start()
        assert inside.wait(60)
        stop.set()
        thread.join(120)
    finally:
        gc.callbacks.remove(callback)
        sys.unraisablehook = previous_hook
    return outcome, [p.exc_type for p in printed]


def test_a_dropped_stop_is_raised_again_after_a_hook_set_over_nsprofs_was_replaced_outright():
    """A library sets a hook over nsprof's during a batch, and later the hook is replaced outright (a test
    harness, a library putting an older one back): a later batch's dropped stop is still raised again."""
    import sys

    from nsprof.cluster_batch import _StopWhenCancelled

    def test(printed):
        with _StopWhenCancelled(lambda: False):
            found = sys.unraisablehook
            sys.unraisablehook = lambda unraisable: found(unraisable)
        sys.unraisablehook = printed.append
        assert _stop_dropped_in_gc_callback() == (["stopped"], [])

    _unraisable_hook_kept(test)


def test_a_stopped_batch_leaves_a_traced_thread_running():
    """A batch that was stopped, in a thread: the process's other threads run on under a trace function."""
    import subprocess
    import sys

    code = (
        "import sys, threading, time\nfrom nsprof import cluster_batch\n"
        "def batch():\n"
        "    try:\n"
        "        with cluster_batch._StopWhenCancelled(lambda: True):\n"
        "            for _ in range(1000): time.sleep(0.01)\n"
        "    except KeyboardInterrupt: print('stopped')\n"
        "t = threading.Thread(target=batch); t.start(); t.join()\n"
        "def f(): pass\nsys.settrace(lambda *a: None)\nf()\nprint('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout == "stopped\nok\n", done.stderr


def test_a_stop_that_lands_in_exit_itself_is_ended_by_closing_again():
    """The stop raised as the body ends in a C call that raises (a session's error, say): it is delivered at
    __exit__'s first instruction, which then does nothing. Closed again, as run_batch does, the watch ends
    and the hook is put back."""
    import queue

    from nsprof import cluster_batch

    def test(printed):
        seen = {}

        def batch():
            stop = seen["stop"] = cluster_batch._StopWhenCancelled(lambda: True)
            try:
                with stop:
                    queue.SimpleQueue().get(timeout=1)  # Empty, raised from C: the stop waits until __exit__
            except (KeyboardInterrupt, queue.Empty) as exc:
                seen["exc"] = type(exc)
            finally:
                stop.close()

        _run_to_its_end(batch, printed)
        assert seen["stop"].ended.is_set(), seen

    _unraisable_hook_kept(test)


def _stopped_after(dropping, hook=None) -> list[str]:
    """A batch stopped at once that first drops an exception in its thread (`dropping()` makes an object whose
    __del__ raises), with sys.unraisablehook `hook` (None: as it is): what the batch did."""
    import sys
    import threading
    import time

    from nsprof.cluster_batch import _StopWhenCancelled

    outcome = []

    def batch():
        try:
            with _StopWhenCancelled(lambda: True):
                dropping()
                end = time.monotonic() + 60
                while time.monotonic() < end:
                    time.sleep(0.01)
            outcome.append("ran on")
        except KeyboardInterrupt:
            outcome.append("stopped")

    def test(printed):
        if hook is not None:
            sys.unraisablehook = hook
        thread = threading.Thread(target=batch)
        thread.start()
        thread.join(120)

    _unraisable_hook_kept(test)
    return outcome


def test_a_stop_that_lands_in_the_hook_there_was_is_raised_again():
    """The batch's thread runs the unraisable hook there was (slowly: logging an unrelated exception, say)
    when its stop comes: the stop, raised in that hook, is raised again in the batch's own code."""
    import time

    def slow_hook(unraisable):
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass

    assert _stopped_after(_RaisesInDel, slow_hook) == ["stopped"]


class _RaisesFromC:
    def __del__(self):
        import queue

        queue.SimpleQueue().get(timeout=1)  # Empty, raised from C: a stop raised meanwhile stays pending


def test_a_stop_lost_where_no_hook_sees_it_is_raised_again_once_the_client_stopped_waiting(monkeypatch):
    """The stop pending as Python enters nsprof's own hook (for an unrelated exception it drops in the
    batch's thread) lands at the hook's first instruction: Python reports that through its default hook and
    drops it, unseen. A stop not seen to end its batch is raised again once the client no longer waits for
    the batch (RESTOP_S), so that the batch does not hold its GPU to the end of its configs."""
    from nsprof import cluster_batch

    monkeypatch.setattr(cluster_batch, "RESTOP_S", 0.5)
    assert _stopped_after(_RaisesFromC) == ["stopped"]
