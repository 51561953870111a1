"""Each config's window in the worker (config_windows): its compile waited for first, outside the
window, so a slow compiler is never the config's timeout (_CompileWait: the compile step beside the
session; _CompileAhead: a served job's or a Space.compile_in_worker's, every point in this worker's
pool of threads before the first window), then its `start` line and its build inside, so that a build which
crashes or hangs is charged to that config.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from pathlib import Path

from nsprof.schema import Failure
from nsprof.worker.launch import Device, error_line
from nsprof.worker.protocol import START_MARKER, Job, Status


def config_windows(job: Job, space, device: Device, status: Status):
    """(config_id, launch) for each config of the job, built just before it is measured.

    Building inside the config's start/done window means a build that crashes the process or
    hangs is charged to that config (and timed out) like a crashing launch. Compilation itself comes
    before the window, so a slow compiler is never the config's timeout: by the compile step beside
    the session (job.compiled: the wait for its marker), or here (job.compile_here: a served job, or
    a Space.compile_in_worker's), and the build loads from the compiler's cache.
    """
    points = job.points
    compiled = None
    if job.compiled:
        compiled = _CompileWait(Path(job.compiled), job.compile_timeout_s)
    elif job.compile_here and space.compile is not None:
        compiled = _CompileAhead(space, points, job.config_ids, job.compile_timeout_s)
    for config_id in job.config_ids:  # point ids (the config ids of a target without shapes)
        why = None if compiled is None else compiled.wait(config_id, status)
        if why is not None:
            status.fail(config_id, why, why.kind)
            continue
        status.write("start", config_id)
        print(START_MARKER, config_id, file=sys.stderr, flush=True)
        try:
            built = [space.build_at(*points.split(config_id))]
        except Exception as exc:
            status.fail(config_id, "build failed: " + error_line(exc), "crash")
            traceback.print_exc()
            if not device.healthy():
                return
            continue
        status.mark("built", config_id)
        # Handed over, not kept here: once the caller drops it, the config's inputs are freed in its own
        # window (a crash then is this config's), never while the next config is built.
        yield config_id, built.pop()


WAIT_LINE_S = 1.0  # while waiting for the compile step: one `wait` line per second (progress)
COMPILE_THREAD = "nsprof-compile"  # the name of _CompileAhead's threads


def _not_reached(why: str) -> Failure:
    """A point the compiles never reached, their pool or step stalled first: nothing is known of the config
    itself, so it is not a compile failure of its own, and a resume compiles it again."""
    return Failure(why, "not_run")


# A pool of compiles in which none finished for this many compile bounds is stalled: a first round of
# hung compiles, and the round that took their places, hung too
STALLED_BOUNDS = 2


class _CompileWait:
    """The worker's waits for the compile step beside the session (nsprof.worker.compile), one
    job's: each config's marker, at most `timeout_s` for one config. A wait that runs out while no
    other compile finished either means the step is stalled: configs not compiled by then fail at
    once instead of each waiting out its own bound."""

    def __init__(self, folder: Path, timeout_s: float) -> None:
        self.folder, self.timeout_s, self.stalled = folder, timeout_s, False

    def _finished(self) -> int:
        return sum(1 for p in self.folder.iterdir() if p.suffix in (".ok", ".fail"))

    def wait(self, point: int, status: Status) -> Failure | None:
        """None when `point` compiled, or when the step ended without it (it died on another point, or
        several at once: this one is compiled at its first launch, in its window, where a compile that kills
        the worker is charged to it alone); else why not (kind compile: its own compile failed or ran past
        its bound; not_run: the step stalled before it). The `wait` lines are progress: the session's bound
        on a phase without one does not fire while the compiler works."""
        from nsprof.worker.compile import state

        began = time.monotonic()
        finished = None if self.stalled else self._finished()
        last_line = None
        while True:
            found = state(self.folder, point)
            if found is not None:
                kind, why = found
                if kind == "lost":  # the step died first: compiled at its first launch, in its own window
                    print(
                        f"==NSPROF== config {point}: {why}; compiled in its window",
                        file=sys.stderr,
                        flush=True,
                    )
                return Failure(why, "compile") if kind == "fail" else None
            now = time.monotonic()
            if self.stalled:
                return _not_reached(
                    f"not compiled: the compile step made no progress for {self.timeout_s:g} s"
                )
            if now - began > self.timeout_s:
                self.stalled = self._finished() == finished
                late = (
                    f"compile timed out: not compiled after {self.timeout_s:g} s (the compile step still ran)"
                )
                return Failure(late, "compile")
            if last_line is None or now - last_line >= WAIT_LINE_S:
                status.write("wait", point)
                last_line = now
            time.sleep(0.01)


class _CompileAhead:
    """The compiles of a served job (its imports paid) or of a Space.compile_in_worker, in this
    worker, all of them before the first window: the first point of each shape alone (the space may
    make that shape's inputs then, on the GPU), then the rest in a pool of threads, in job order.
    None runs while a window does (but one past its bound, which no thread can stop): no GPU work of
    the space's and no thread contending for the interpreter's lock with the timed launches. Each
    point's compile is bounded by `timeout_s`: past it the point fails and a new thread takes the
    place of the one it holds (threads are daemons: a compile that hangs never keeps the worker from
    exiting). Where no compile of the pool finished for STALLED_BOUNDS bounds, the compiles that took
    hung ones' places hang too: the pool is stalled, and every point left fails at once (_stalled)."""

    def __init__(self, space, points, ids, timeout_s: float) -> None:
        self.space, self.points, self.ids, self.timeout_s = space, points, list(ids), timeout_s
        self.outcome: dict[int, Failure | None] = {}  # point -> None (compiled) or why not
        self.started: dict[int, float] = {}
        self.closed = threading.Event()  # set once every point has its outcome: no thread takes more
        self.last_line = 0.0  # when the last `wait` line was written
        self.finished_at = 0.0  # when a compile last finished (within its bound or past it)

    def wait(self, point: int, status: Status) -> Failure | None:
        """None when `point` compiled, else why not (as _CompileWait.wait); the first call compiles them all."""
        if not self.closed.is_set():
            from nsprof.worker.compile import compile_pool_size

            firsts: dict = {}
            for each in self.ids:
                firsts.setdefault(self.points.split(each)[1], each)
            status.write("wait", self.ids[0])  # compiling: a death from now on is a compile's
            self.last_line = time.monotonic()
            on_device = _main_device()
            try:
                for first in firsts.values():
                    self._compile([first], 1, status, on_device)
                rest = [p for p in self.ids if p not in firsts.values()]
                self._compile(rest, compile_pool_size(), status, on_device)
            finally:  # also when the worker is stopped meanwhile: no thread takes another point
                self.closed.set()
        return self.outcome[point]

    def _compile(self, todo: list[int], threads: int, status: Status, on_device) -> None:
        """Compile `todo` in `threads` threads until each has its outcome, writing a `wait` line a
        second for the job's first point, whose window opens next (so the session's bound on a phase
        without a line does not fire, and the phases charge the wait to the window it delays)."""
        queue, lock = iter(todo), threading.Lock()

        def drain() -> None:
            while not self.closed.is_set():
                with lock:
                    point = next(queue, None)
                if point is None:
                    return
                self._one(point, on_device)

        def start() -> None:
            threading.Thread(target=drain, name=COMPILE_THREAD, daemon=True).start()

        for _ in range(min(threads, len(todo))):
            start()
        self.finished_at = time.monotonic()  # the pool's start counts as progress
        late = Failure(
            f"compile timed out: not compiled after {self.timeout_s:g} s (its compile still runs in the worker)",
            "compile",
        )
        left = list(todo)
        # the main thread's polls hold the interpreter's lock the compiles want: over what is left only
        while left := [point for point in left if point not in self.outcome]:
            now = time.monotonic()
            if now - self.last_line >= WAIT_LINE_S:  # one a second across the shapes' first compiles too
                status.write("wait", self.ids[0])
                self.last_line = now
            for point in left:
                if now - self.started.get(point, now) >= self.timeout_s and point not in self.outcome:
                    self.outcome.setdefault(point, late)  # where it ended just now, it keeps its outcome
                    if threads > 1 and now - self.finished_at >= STALLED_BOUNDS * self.timeout_s:
                        return self._stalled()
                    start()  # in place of the thread this compile holds
            time.sleep(0.02)

    def _stalled(self) -> None:
        """The pool's compiles are stalled (no compile finished for STALLED_BOUNDS bounds: the threads
        that took the hung ones' places hang too): every point not compiled yet fails now rather than
        each waiting out its own bound in turn."""
        self.closed.set()  # no thread takes another point
        why = _not_reached(
            f"not compiled: no compile of the worker's finished in {STALLED_BOUNDS * self.timeout_s:g} s"
        )
        for point in self.ids:
            self.outcome.setdefault(point, why)

    def _one(self, point: int, on_device) -> None:
        from nsprof.worker.compile import compile_reason

        self.started[point] = time.monotonic()
        try:
            on_device()
            self.space.compile_at(*self.points.split(point))
            why = None
        except BaseException as exc:  # a result, not a crash (in a thread: a SystemExit ends only it)
            why = compile_reason(exc)
        self.finished_at = time.monotonic()
        self.outcome.setdefault(point, why)  # a point already timed out keeps that reason


def _main_device():
    """What a compile thread does first: make the main thread's CUDA device its own too (a thread
    starts on device 0, and a target may have chosen another)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return lambda: None
    index = torch.cuda.current_device()
    return lambda: torch.cuda.set_device(index)
