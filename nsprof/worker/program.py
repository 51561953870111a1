"""The program the profilers launch: `python -m nsprof.worker JOB.json`.

It loads the target, builds every config before measuring anything, warms each config up
outside all NVTX ranges (ncu does not replay kernels there), then, per config × mode ×
rep, opens an NVTX range `cfg<id>.<mode>.r<rep>` (`cfg<id>.s<shape>.<mode>.r<rep>` for a target
with shapes: the job's ids are then (shape, config) point ids) in the "nsprof" domain (nested in a
range "nsprof", the one ncu's filter names) around the launch and a synchronize. Mode "direct" is the plain
call; mode "graph" replays a CUDA graph captured once from that call after warm-up.

Progress goes to the job's status file, in the protocol of nsprof.worker.protocol.

The worker ends by itself when nsprof dies, however it died (SIGKILL included): nsprof holds
the only write end of a pipe whose read end the worker inherits (through the profiler: ncu and
nsys pass inherited descriptors on), and EOF on it means nsprof is gone. Where that pipe did
not arrive, it watches its parent process (the profiler) instead. SIGTERM from nsprof (on
Ctrl-C) stops it at once but cleanly, so that nsys still flushes the kernels measured so far.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from nsprof.schema import NSPROF_DOMAIN, range_name
from nsprof.worker.protocol import (
    EXIT_CONTEXT_LOST,
    EXIT_PARENT_GONE,
    EXIT_STOPPED,
    START_MARKER,
    Job,
    Status,
)


class Stopped(BaseException):
    """nsprof asked the worker to stop. A BaseException, so that no config's `except Exception`
    records it as that config's failure."""


def request_stop(signum, frame) -> None:
    # Raised wherever the worker is: the current config is dropped anyway (only whole configs
    # count), and a clean exit keeps the configs already done (nsys flushes them at exit).
    raise Stopped


def _inherited_pipe(fd: int, inode: int) -> bool:
    if fd < 0:
        return False
    import stat

    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return stat.S_ISFIFO(info.st_mode) and info.st_ino == inode


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill_run_lock_holders() -> None:
    """nsprof is dead: what else of its run holds its GPU lock (the profiler, nsys's agent, which
    no signal of nsprof's reaches) goes too, so that the GPU is free once this worker is gone.
    (Only then: while nsprof lives, it is one of the holders.)"""
    import signal

    from nsprof.host.lock import inherited_lock_holders

    for pid, command in inherited_lock_holders():
        print(
            f"==NSPROF== worker kills pid {pid}, which holds the GPU lock: {command[:200]}",
            file=sys.stderr,
            flush=True,
        )
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # gone already


def _parent_gone(why: str, nsprof_dead: bool = False) -> None:
    print(f"==NSPROF== worker exits: {why}", file=sys.stderr, flush=True)
    if nsprof_dead:
        _kill_run_lock_holders()
    os._exit(EXIT_PARENT_GONE)


def _pipe_closed(fd: int, wait_s: float) -> bool:
    """nsprof never writes to its pipe: readable means EOF, its last holder is gone."""
    import select

    readable, _, _ = select.select([fd], [], [], wait_s)
    if not readable:
        return False
    try:
        return not os.read(fd, 1)
    except OSError:
        return True


def _watch(fd: int | None, parent: int) -> None:
    import time

    while True:
        if fd is not None:
            if _pipe_closed(fd, 1.0):
                _parent_gone("nsprof is gone (its pipe closed)", nsprof_dead=True)
        else:
            time.sleep(0.5)
            if os.getppid() != parent:
                _parent_gone(f"its parent (pid {parent}) is gone")


def watch_parent(job: Job) -> dict:
    """Start the thread that ends this worker once nsprof is gone; what it watches, for the status.

    The parent-process fallback is armed only where the pipe did not arrive: a profiler that
    started the worker through a short-lived helper would otherwise stop every run at once.
    """
    parent = os.getppid()
    pipe = _inherited_pipe(job.watch_fd, job.watch_inode)
    info = {"pipe": pipe, "parent": parent, "parent_name": _process_name(parent)}
    if job.watch_fd < 0:
        return info
    if pipe:
        os.set_inheritable(job.watch_fd, False)  # the target's own subprocesses need not hold it
    threading.Thread(
        target=_watch, args=(job.watch_fd if pipe else None, parent), daemon=True, name="nsprof-parent-watch"
    ).start()
    return info


class Device:
    """What the worker needs from the device: synchronize, capture a graph, range marks."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        import nvtx

        self._nvtx = nvtx
        if kind == "cuda":
            import torch

            self._torch = torch

    def push(self, name: str) -> None:
        self._nvtx.push_range(name, domain=NSPROF_DOMAIN)

    def pop(self) -> None:
        self._nvtx.pop_range(domain=NSPROF_DOMAIN)

    def sync(self) -> None:
        if self.kind == "cuda":
            self._torch.cuda.synchronize()

    def capture(self, launch):
        if self.kind != "cuda":
            raise RuntimeError("graph mode needs a CUDA device")
        torch = self._torch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch()
        graph.replay()
        torch.cuda.synchronize()
        return graph.replay

    def describe(self) -> dict:
        """The device this worker measures on (initialises CUDA): its UUID as nvidia-smi and
        CUDA_VISIBLE_DEVICES write it ("GPU-..."), name and index among the visible devices."""
        if self.kind != "cuda":
            return {"uuid": "", "name": "cpu"}
        torch = self._torch
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = str(getattr(props, "uuid", "") or "")
        if uuid and not uuid.startswith(("GPU-", "MIG-")):
            uuid = "GPU-" + uuid
        return {"uuid": uuid, "name": props.name, "index": index}

    def healthy(self) -> bool:
        try:
            self.sync()
        except Exception:  # the CUDA context is gone (illegal address, ...): report, don't raise
            return False
        return True


def _reason(exc: BaseException) -> str:
    """One line: the exception's type and the first line of its message (torch appends
    paragraphs of debugging advice after the CUDA error itself)."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return " ".join(f"{type(exc).__name__}: {first}".split())[:300]


def _configs(job: Job, space, device: Device, status: Status):
    """(config_id, launch) for each config of the job, built just before it is measured.

    Building inside the config's start/done window means a build that crashes the process or
    hangs is charged to that config (and timed out) like a crashing launch. Compilation itself comes
    before the window, so a slow compiler is never the config's timeout: by the compile step beside
    the session (job.compiled: the wait for its marker), or here (job.compile_here: a served job),
    and the build loads from the compiler's cache.
    """
    points = job.points
    compiled = _CompileWait(Path(job.compiled), job.compile_timeout_s) if job.compiled else None
    here = job.compile_here and space.compile is not None
    for config_id in job.config_ids:  # point ids (the config ids of a target without shapes)
        why = None
        if compiled is not None:
            why = compiled.wait(config_id, status)
        elif here:
            why = _compile_here(space, points, config_id, status, job.compile_timeout_s)
        if why is not None:
            status.fail(config_id, why, "compile")
            continue
        status.write("start", config_id)
        print(START_MARKER, config_id, file=sys.stderr, flush=True)
        try:
            launch = space.build_at(*points.split(config_id))
        except Exception as exc:
            status.fail(config_id, "build failed: " + _reason(exc), "crash")
            traceback.print_exc()
            if not device.healthy():
                return
            continue
        status.mark("built", config_id)
        yield config_id, launch


WAIT_LINE_S = 1.0  # while waiting for the compile step: one `wait` line per second (progress)


def _compile_here(space, points, point: int, status: Status, timeout_s: float) -> str | None:
    """Compile `point` in this worker (Job.compile_here), before its window: None when it compiled,
    else why not, in one line (as the compile step words it). The compile runs in a thread while
    this one writes a `wait` line each second, so the session's bound on a phase without a line
    does not fire; past `timeout_s` the point fails and its compile is left running."""
    import threading

    from nsprof.worker.compile import compile_reason

    outcome: list[str | None] = []

    def one() -> None:
        try:
            space.compile_at(*points.split(point))
        except Exception as exc:  # a config that does not compile is a result, not a crash
            outcome.append(compile_reason(exc))
            return
        outcome.append(None)

    thread = threading.Thread(target=one, name=f"nsprof-compile-{point}", daemon=True)
    status.write("wait", point)
    thread.start()
    waited = 0.0
    while True:
        thread.join(WAIT_LINE_S)
        if not thread.is_alive():
            return outcome[0]
        waited += WAIT_LINE_S
        if waited >= timeout_s:
            return f"compile timed out: not compiled after {timeout_s:g} s (its compile still runs in the worker)"
        status.write("wait", point)


class _CompileWait:
    """The worker's waits for the compile step beside the session (nsprof.worker.compile), one
    job's: each config's marker, at most `timeout_s` for one config. A wait that runs out while no
    other compile finished either means the step is stalled: configs not compiled by then fail at
    once instead of each waiting out its own bound."""

    def __init__(self, folder: Path, timeout_s: float) -> None:
        self.folder, self.timeout_s, self.stalled = folder, timeout_s, False

    def _finished(self) -> int:
        return sum(1 for p in self.folder.iterdir() if p.suffix in (".ok", ".fail"))

    def wait(self, point: int, status: Status) -> str | None:
        """None when `point` compiled, else why not, in one line. The `wait` lines are progress:
        the session's bound on a phase without one does not fire while the compiler works."""
        import time

        from nsprof.worker.compile import state

        began = time.monotonic()
        finished = None if self.stalled else self._finished()
        last_line = None
        while True:
            found = state(self.folder, point)
            if found is not None:
                return None if found[0] == "ok" else found[1]
            now = time.monotonic()
            if self.stalled:
                return f"not compiled: the compile step made no progress for {self.timeout_s:g} s"
            if now - began > self.timeout_s:
                self.stalled = self._finished() == finished
                return (
                    f"compile timed out: not compiled after {self.timeout_s:g} s (the compile step still ran)"
                )
            if last_line is None or now - last_line >= WAIT_LINE_S:
                status.write("wait", point)
                last_line = now
            time.sleep(0.01)


def process_began() -> float | None:
    """When this process began, on time.monotonic()'s clock (from /proc/self/stat's start time, in
    clock ticks of CLOCK_BOOTTIME: to 10 ms); None where that cannot be read."""
    import time

    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        hz = os.sysconf("SC_CLK_TCK")
        boot, now = time.clock_gettime(time.CLOCK_BOOTTIME), time.monotonic()
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    began = now - (boot - ticks / hz)
    return began if began <= now else None


def run(job: Job) -> int:
    status = Status(job.status)
    status.write("pid", os.getpid())
    began = process_began()
    if began is not None:
        status.mark("process", at=began)
    status.write("watch", json.dumps(watch_parent(job)))
    signal.signal(signal.SIGTERM, request_stop)
    try:
        return run_job(job, status)
    except Stopped:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        status.write("stopped")
        return EXIT_STOPPED
    finally:
        # From here on the worker only exits. A SIGTERM now would cut that short and cost nsys
        # the kernels it flushes at exit; nsprof kills a worker that takes too long to exit.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # Ended before it noticed nsprof's death: nothing of the run may keep the GPU locked.
        if _inherited_pipe(job.watch_fd, job.watch_inode) and _pipe_closed(job.watch_fd, 0):
            _kill_run_lock_holders()


def _check_shapes(job: Job, space) -> None:
    """The target still has the configs and shapes the job's point ids were made for: an id split
    over another layout would name another (shape, config)."""
    if job.n_shapes == 0 and space.shapes is not None:
        raise RuntimeError(f"the target lists {len(space.shapes)} shapes, but this job measures none")
    if job.n_shapes and (space.n_shapes, len(space.configs)) != (job.n_shapes, job.n_configs):
        raise RuntimeError(
            f"the target has {len(space.configs)} configs and {space.n_shapes} shapes now, "
            f"not the {job.n_configs} and {job.n_shapes} this job was made for (edited meanwhile?)"
        )


def _check_expected(job: Job, space, status: Status) -> None:
    """The target is the one nsprof read (job.expect), or nothing is measured: what this job measures is
    stored under the configs and source nsprof read (an edit since, while tune ran, would put the edited
    configs' numbers under the old ones' keys)."""
    from nsprof.errors import TargetChanged

    what = space.changes_since(job.expect) if job.expect else None
    if what is not None:
        reason = f"the target {job.target} changed since nsprof read it: {what}"
        status.write("changed", json.dumps(reason))
        raise TargetChanged(reason)


def run_job(job: Job, status: Status, devices: dict | None = None) -> int:
    """Run `job`; `devices` (kind -> Device): the serving worker's, created once and kept (nsprof.worker.serving)."""
    from nsprof.space import load_target

    try:
        space = load_target(job.target)
        status.mark("target")
        _check_expected(job, space, status)
        _check_shapes(job, space)
        device = devices.get(space.device) if devices is not None else None
        device = device or Device(space.device)
        if devices is not None:
            devices[space.device] = device
        described = device.describe()
        device.sync()  # the CUDA context, now: its cost is this phase's, not the first config's
        status.device(described)
    except Exception as exc:
        status.write("abort", json.dumps(_reason(exc)))
        raise
    if job.task == "timers":
        return _run_timers(job, space, device, status)
    if job.interleave:
        return _run_interleaved(job, space, device, status)
    for config_id, launch in _configs(job, space, device, status):
        try:
            replay = _warm_and_capture(job, device, launch)
            for mode in job.modes:
                call = launch if mode == "direct" else replay
                for rep in job.rep_numbers(config_id):
                    # The outer range opens per rep, so warm-up and capture stay outside
                    # every range and ncu (--nvtx-include nsprof@nsprof/) skips them.
                    _measure_rep(device, job, config_id, mode, rep, call)
        except Exception as exc:
            if not _failed(status, device, config_id, exc):
                return EXIT_CONTEXT_LOST
            continue
        finally:
            # Drop this config's inputs and graph before the next one is built.
            launch = replay = None  # noqa: F841
        status.write("done", config_id)
    if not device.healthy():
        return EXIT_CONTEXT_LOST
    status.write("end")
    return 0


def _warm_and_capture(job: Job, device: Device, launch):
    """`job.warmup` unmeasured launches, then the captured graph's replay when mode graph is asked
    for (None otherwise): all outside every range."""
    for _ in range(job.warmup):
        launch()
    device.sync()
    return device.capture(launch) if "graph" in job.modes else None


def _failed(status: Status, device: Device, config_id: int, exc: Exception) -> bool:
    """Report config `config_id` failed; whether the CUDA context survived it."""
    status.fail(config_id, _reason(exc), "crash")
    traceback.print_exc()
    return device.healthy()


def _measure_rep(device: Device, job: Job, point: int, mode: str, rep: int, call) -> None:
    config_id, shape = job.points.split(point)
    device.push(NSPROF_DOMAIN)
    device.push(range_name(config_id, mode, rep, shape))
    try:
        call()
        device.sync()
    finally:
        device.pop()
        device.pop()


def _run_interleaved(job: Job, space, device: Device, status: Status) -> int:
    """Adaptive reps: every config of the job built (warmed up, its graph captured) first, then
    job.reps rounds of one visit per config, in job order (A B C A B C ...), so that slow drift
    (clocks, temperature) hits every config alike.

    Each visit measures under the first pass's conditions: `job.warmup` launches of the call being
    measured (the graph replay in mode graph), outside every range, then one rep. In the first
    pass a config's reps follow its own warm-up and its own reps; here the visit before belongs to
    another config, whose kernels and data would otherwise fill L2 (nsys, graph replay: warm L2)
    for this config's rep. Under ncu the warm-up costs no replay (outside the ranges) and ncu's
    own cache control applies as in the first pass.

    A "start" line opens each visit, so --timeout bounds one visit (a config's whole first-pass
    window is longer); "done" follows for every config after the last round: only whole sessions
    count (a cut-off session would have given some contenders more reps than others).
    """
    built = []
    for config_id, launch in _configs(job, space, device, status):
        try:
            replay = _warm_and_capture(job, device, launch)
        except Exception as exc:
            if not _failed(status, device, config_id, exc):
                return EXIT_CONTEXT_LOST
            continue
        built.append((config_id, {"direct": launch, "graph": replay}))
    failed: set[int] = set()
    for round_index in range(job.reps):
        for config_id, calls in built:
            if config_id in failed:
                continue
            status.write("start", config_id)
            print(START_MARKER, config_id, file=sys.stderr, flush=True)
            try:
                for mode in job.modes:
                    call = calls[mode]
                    for _ in range(job.warmup):
                        call()
                    device.sync()
                    _measure_rep(device, job, config_id, mode, job.rep_numbers(config_id)[round_index], call)
            except Exception as exc:
                failed.add(config_id)
                if not _failed(status, device, config_id, exc):
                    return EXIT_CONTEXT_LOST
    for config_id, _ in built:
        if config_id not in failed:
            status.write("done", config_id)
    built = []
    if not device.healthy():
        return EXIT_CONTEXT_LOST
    status.write("end")
    return 0


def _run_timers(job: Job, space, device: Device, status: Status) -> int:
    from nsprof.timers.specs import run_method

    with open(job.results, "a", encoding="utf-8") as results:
        for config_id, launch in _configs(job, space, device, status):
            # config_id is a point id; each line names its config and shape itself
            where = dict(zip(("config_id", "shape"), job.points.split(config_id)))
            errors = []
            for method in job.timers:
                try:
                    measured = run_method(method, launch, job.timer_reps)
                except Exception as exc:
                    errors.append(f"{method}: {_reason(exc)}")
                    results.write(json.dumps({**where, "method": method, "error": _reason(exc)}) + "\n")
                    results.flush()
                    traceback.print_exc()
                    if not device.healthy():
                        status.fail(config_id, "; ".join(errors), "crash")
                        return EXIT_CONTEXT_LOST
                    continue
                results.write(json.dumps({**where, "method": method, **measured}) + "\n")
                results.flush()
            if errors and len(errors) == len(job.timers):
                status.fail(config_id, "; ".join(errors), "crash")
            else:
                status.write("done", config_id)
    if not device.healthy():
        return EXIT_CONTEXT_LOST
    status.write("end")
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m nsprof.worker JOB.json | --serve DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(Job.read(Path(argv[0]))))


if __name__ == "__main__":
    main()
