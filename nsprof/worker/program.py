"""The program the profilers launch: `python -m nsprof.worker JOB.json`.

It loads the target, builds every config before measuring anything, warms each config up
outside all NVTX ranges (ncu does not replay kernels there), then, per config × mode ×
rep, opens an NVTX range `cfg<id>.<mode>.r<rep>` (`cfg<id>.s<shape>.<mode>.r<rep>` for a target
with shapes: the job's ids are then (shape, config) point ids) in the "nsprof" domain (nested in a
range "nsprof", the one ncu's filter names) around the launch and a synchronize. Mode "direct" is the plain
call; mode "graph" replays a CUDA graph captured once from that call after warm-up.

Progress goes to the job's status file, in the protocol of nsprof.worker.protocol. A worker started
ahead of its job (nsprof.session.ahead: the next session's, while this one runs) imports the target first
and then waits for the job, so that the session it serves pays no import.

The worker ends by itself when nsprof dies, however it died (SIGKILL included): nsprof holds
the only write end of a pipe whose read end the worker inherits (through the profiler: ncu and
nsys pass inherited descriptors on), and EOF on it means nsprof is gone. Where that pipe did
not arrive, it watches its parent process (the profiler) instead. SIGTERM from nsprof (on
Ctrl-C) stops it at once but cleanly, so that nsys still flushes the kernels measured so far.

This module holds main and run (a standalone job), run_job (any job: the target loaded and checked,
its device, then the job's loop) and the loops themselves: one config after another, adaptive reps'
interleaved rounds, the fast timers (plain, and interleaved in rounds). The parent watch is
nsprof.worker.watch's, each config's window (its compile waited for, its build)
nsprof.worker.windows', the device and a rep's launch nsprof.worker.launch's.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

from nsprof.host.children import process_began
from nsprof.worker.launch import Device, config_failed, error_line, measure_rep, warm_and_capture
from nsprof.worker.protocol import EXIT_CONTEXT_LOST, EXIT_PARENT_GONE, START_MARKER, Job, Status, ahead_file
from nsprof.worker.watch import Stopped, release_if_orphaned, request_stop, stopped, watch_parent
from nsprof.worker.windows import config_windows


def run(job: Job, job_file: Path | None = None) -> int:
    """Run `job`; with `job_file`, `job` is the ahead file's (ahead_file): the target is imported first,
    then the job is waited for at job_file, the GPU locks taken from nsprof, and the job run."""
    status = Status(job.status)
    parent = os.getppid()
    locks = _locks_socket(job) if job_file is not None else None  # checked now, before the target runs
    signal.signal(signal.SIGTERM, request_stop)  # before the pid line: nsprof stops it by that pid
    try:
        status.write("pid", os.getpid())
        began = process_began()
        if began is not None:
            status.mark("process", at=began)
        watched = watch_parent(job)
        status.write("watch", json.dumps(watched))
        if job_file is None:
            return run_job(job, status)
        space = _imported_ahead(job.target, status)
        job = _wait_for(job_file, None if watched["pipe"] else parent)
        _locks_handed(locks)
        status.mark("job")  # taken: a worker that ends before this line never ran its job
        return run_job(job, status, space=space)
    except Stopped:
        return stopped(status)
    finally:
        # From here on the worker only exits. A SIGTERM now would cut that short and cost nsys
        # the kernels it flushes at exit; nsprof kills a worker that takes too long to exit.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        release_if_orphaned(job)


def _imported_ahead(target: str, status: Status):
    """The target's Space, imported before its job comes; None where that failed: the job's own import
    then fails again and says why, as any worker's does."""
    from nsprof.space import load_target

    try:
        space = load_target(target)
    except Exception:
        return None
    status.mark("target")
    return space


def _locks_socket(job: Job):
    """The socket nsprof sends the GPU locks on (Job.locks_fd), where the descriptor is that socket (its
    inode: a profiler may not pass it on, and the number then names nothing, or later another file);
    None otherwise."""
    import socket
    import stat

    try:
        info = os.fstat(job.locks_fd) if job.locks_fd >= 0 else None
        if info is None or not stat.S_ISSOCK(info.st_mode) or info.st_ino != job.locks_inode:
            return None
        os.set_inheritable(job.locks_fd, False)  # the target's own subprocesses need not hold it
        return socket.socket(fileno=job.locks_fd)
    except OSError:
        return None


def _locks_handed(channel) -> None:
    """The GPU locks nsprof holds, sent on `channel` (_locks_socket) before the job: kept open, and
    inherited by what the worker starts, as a worker launched with them holds them."""
    import socket

    if channel is None:
        print(
            "==NSPROF== worker started ahead: no channel for the GPU lock arrived",
            file=sys.stderr,
            flush=True,
        )
        return
    with channel:
        channel.settimeout(10.0)  # sent before the job was written: there already
        try:
            message, fds, _, _ = socket.recv_fds(channel, 16, 16)
        except OSError as exc:
            message, fds = b"", []
            print(f"==NSPROF== worker got no GPU lock from nsprof: {exc}", file=sys.stderr, flush=True)
    if not message:
        print("==NSPROF== worker got no word of the GPU lock from nsprof", file=sys.stderr, flush=True)
    for lock in fds:
        os.set_inheritable(lock, True)


def _wait_for(job_file: Path, parent: int | None) -> Job:
    """The job, once nsprof has written it (whole: Job.write). nsprof's death ends the wait (watch_parent's
    thread); so does the parent's (the profiler's, `parent` at the worker's start), for a worker that
    watches no pipe (`parent` None where it does: a profiler may start it through a short-lived helper)."""
    import time

    while not job_file.exists():
        if parent is not None and os.getppid() != parent:
            os._exit(EXIT_PARENT_GONE)
        time.sleep(0.005)
    return Job.read(job_file)


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


def run_job(job: Job, status: Status, devices: dict | None = None, space=None) -> int:
    """Run `job`; `devices` (kind -> Device): the serving worker's, created once and kept (nsprof.worker.serving);
    `space`: the target imported already (a worker started ahead of its job)."""
    from nsprof.space import load_target

    try:
        if space is None:
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
        status.write("abort", json.dumps(error_line(exc)))
        raise
    if job.task == "timers":
        return (_run_timers_interleaved if job.interleave else _run_timers)(job, space, device, status)
    if job.interleave:
        return _run_interleaved(job, space, device, status)
    for config_id, launch in config_windows(job, space, device, status):
        try:
            replay = warm_and_capture(job, device, launch)
            for mode in job.modes:
                call = launch if mode == "direct" else replay
                for rep in job.rep_numbers(config_id):
                    # The outer range opens per rep, so warm-up and capture stay outside
                    # every range and ncu (--nvtx-include nsprof@nsprof/) skips them.
                    measure_rep(device, job, config_id, mode, rep, call)
        except Exception as exc:
            if not config_failed(status, device, config_id, exc):
                return EXIT_CONTEXT_LOST
            continue
        finally:
            # Drop this config's inputs and graph in its own window, before the next one is built.
            launch = replay = call = None  # noqa: F841
        status.write("done", config_id)
    return _end(device, status)


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
    built = _built(
        config_windows(job, space, device, status),
        status,
        device,
        lambda launch: {"direct": launch, "graph": warm_and_capture(job, device, launch)},
    )
    if built is None or not device.healthy():  # a build that lost the context ended the windows
        return EXIT_CONTEXT_LOST

    def visit(round_index: int, config_id: int, calls: dict) -> None:
        for mode in job.modes:
            call = calls[mode]
            for _ in range(job.warmup):
                call()
            device.sync()
            measure_rep(device, job, config_id, mode, job.rep_numbers(config_id)[round_index], call)

    failed = _rounds(job.reps, built, status, device, visit)
    if failed is None:
        return EXIT_CONTEXT_LOST
    for config_id, _ in built:
        if config_id not in failed:
            status.write("done", config_id)
    built = []
    return _end(device, status)


def _end(device: Device, status: Status) -> int:
    if not device.healthy():
        return EXIT_CONTEXT_LOST
    status.write("end")
    return 0


def _built(windows, status: Status, device: Device, prepare, full=None) -> list | None:
    """[(config_id, prepare(launch))] of the configs `windows` (config_windows) builds, each in its
    window (a config whose build or preparation raised has failed), up to the first after which
    `full()` says the device holds enough; None when the CUDA context was lost."""
    built = []
    for config_id, launch in windows:
        try:
            built.append((config_id, prepare(launch)))
        except Exception as exc:
            if not config_failed(status, device, config_id, exc):
                return None
        if full is not None and built and full():
            break
    return built


def _rounds(
    count: int, built: list, status: Status, device: Device, visit, rotate: bool = False
) -> set[int] | None:
    """`count` rounds of one visit per built config, in job order (A B C A B C ...), or with `rotate`
    each round starting one config later (A B C, B C A, C A B: no config always first after the
    last round's end), a "start" line opening each visit; the configs that failed, or None when the
    CUDA context was lost."""
    failed: set[int] = set()
    for round_index in range(count):
        shift = round_index % len(built) if rotate and built else 0
        for config_id, prepared in built[shift:] + built[:shift]:
            if config_id in failed:
                continue
            status.write("start", config_id)
            print(START_MARKER, config_id, file=sys.stderr, flush=True)
            try:
                visit(round_index, config_id, prepared)
            except Exception as exc:
                failed.add(config_id)
                if not config_failed(status, device, config_id, exc):
                    return None
    return failed


def _run_timers(job: Job, space, device: Device, status: Status) -> int:
    from nsprof.timers.specs import run_method

    with open(job.results, "a", encoding="utf-8") as results:
        for config_id, launch in config_windows(job, space, device, status):
            # config_id is a point id; each line names its config and shape itself
            where = dict(zip(("config_id", "shape"), job.points.split(config_id)))
            errors = []
            for method in job.timers:
                try:
                    measured = run_method(method, launch, job.timer_reps)
                except Exception as exc:
                    errors.append(f"{method}: {error_line(exc)}")
                    results.write(json.dumps({**where, "method": method, "error": error_line(exc)}) + "\n")
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
    return _end(device, status)


def _run_timers_interleaved(job: Job, space, device: Device, status: Status) -> int:
    """Interleaved fast timers (nsprof.timers.interleave), batch after batch of the configs that
    fit in the GPU's memory together (memory_full): each config built and its samplers prepared in
    its own window, then ROUNDS rounds of one visit per config of the batch, rotated, a "start"
    line opening each visit (--timeout bounds one visit), then the batch's result lines and "done"
    lines: only whole batches count, as only whole sessions of adaptive reps do."""
    from nsprof.timers.interleave import memory_full, release

    windows = config_windows(job, space, device, status)
    batch = 0
    while True:
        built = _built(
            windows, status, device, lambda launch: _samplers(job.timers, launch, device), memory_full
        )
        if built is None or not device.healthy():  # a build that lost the context ended the windows
            return EXIT_CONTEXT_LOST
        if not built:
            break
        batch += 1
        if not _timed_batch(job, built, batch, status, device):
            return EXIT_CONTEXT_LOST
        built = []  # the batch's inputs and graphs go before the next batch is built
        release()
    return _end(device, status)


class _Unprepared:
    """A method that could not be prepared for a config: its first visit raises why."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def visit(self, reps: int):
        raise self.exc


def _samplers(methods, launch, device: Device) -> dict:
    """Each interleaved method's sampler of `launch`; one that failed to prepare fails at its first visit,
    on its own: the config's other methods are measured. A failure that lost the CUDA context is the
    config's, at once (_built)."""
    from nsprof.timers.interleave import prepare

    samplers = {}
    for method in methods:
        try:
            samplers[method] = prepare(method, launch)
        except Exception as exc:
            if not device.healthy():
                raise
            samplers[method] = _Unprepared(exc)
    return samplers


def _timed_batch(job: Job, built: list, batch: int, status: Status, device: Device) -> bool:
    """One batch's rounds and result lines; False when the CUDA context was lost."""
    from nsprof.timers.base import sm_clock_mhz
    from nsprof.timers.interleave import ROUNDS, Rounds

    rounds = Rounds()
    reps = max(1, job.timer_reps // ROUNDS)
    errors: dict = {}  # (config, method): why that method failed there (its line says so; the others stand)

    def visit(round_index: int, config_id: int, samplers: dict) -> None:
        for method, sampler in samplers.items():
            if (config_id, method) in errors:
                continue
            try:
                rounds.add(config_id, method, sampler.visit(reps), sm_clock_mhz())
            except Exception as exc:
                if not device.healthy():
                    raise
                traceback.print_exc()
                errors[config_id, method] = f"{error_line(exc)} (interleaved {method})"
        if all((config_id, method) in errors for method in samplers):  # nothing of it measured: it failed
            raise RuntimeError("; ".join(errors[config_id, method] for method in samplers))

    failed = _rounds(ROUNDS, built, status, device, visit, rotate=True)
    if failed is None:
        return False
    with open(job.results, "a", encoding="utf-8") as results:
        for config_id, samplers in built:
            if config_id in failed:
                continue
            where = dict(zip(("config_id", "shape"), job.points.split(config_id)))
            for method, sampler in samplers.items():
                error = errors.get((config_id, method))
                line = (
                    {"method": method, "error": error}
                    if error
                    else rounds.line(config_id, method, sampler.conditions)
                )
                # a restarted worker numbers its batches from 1 again: a batch is its process's
                results.write(json.dumps({**where, **line, "batch": batch, "worker_pid": os.getpid()}) + "\n")
            results.flush()
            status.write("done", config_id)
    return True


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m nsprof.worker JOB.json | --serve DIR", file=sys.stderr)
        sys.exit(2)
    job_file = Path(argv[0])
    if ahead_file(job_file).exists():  # started ahead of its job (which may be there already)
        sys.exit(run(Job.read(ahead_file(job_file)), job_file))
    sys.exit(run(Job.read(job_file)))


if __name__ == "__main__":
    main()
