"""The serving worker: `python -m nsprof.worker --serve DIR`, started once by `nsprof serve`
(nsprof.serve) under the profiler, and given one job after another.

It imports what it needs and creates the CUDA context once (where torch and a GPU are there),
then reads job lines from the FIFO DIR/jobs (`{"job": PATH, "n": N, "server": PID, "cwd": the client's
folder}`, or `exit`). Each job runs
exactly as a standalone worker's does (nsprof.worker.program.run_job: the target loaded fresh, the
same ranges, the same status file, ending with `end`), on the devices it already has. The job's
status file starts with `pid` and `served {"job": N, "server": PID}`, so that a reader can tell
a served job from a standalone one and which worker ran it.

A job of another target than the last one this process ran (its file, or a module target's name and
folder: _target_place) runs in a fresh image of this process: the worker execs itself (same pid, the
profiler's injection inherited, the server's descriptors kept), imports and creates the CUDA context
again, then runs that job. A target's import and builds can change process-wide state that no module
reload undoes: numpy.seterr, torch.backends.cuda.matmul.allow_tf32 and the like, the globals of an
installed package. A fresh image is the only way a job sees exactly what a standalone worker sees. Not
fork-per-job from a warm parent: CUDA does not survive a fork once initialised (the parent could then
hold no context, and every job would pay for it), and nsys does not trace a forked child that does not
exec (--trace-fork-before-exec, off by default, "relies on undefined behavior"). Jobs of the same target
share the warm image: the state its earlier jobs left is that target's own (docs/serve.md, Limits).

The worker's own status file, DIR/worker.status (nsprof.worker.protocol.Status lines):
    pid <pid>                  first (again after each fresh image)
    ready <json>               imports done, ready for jobs: {"watch": ..., "device": ... or null}
    fresh <json>               job n is of another target than the last, or an earlier job's compiles still
                               run (_compiling): {"job": n, "target": ...}; this process execs itself,
                               and the fresh image runs job n first (DIR/pending.json)
    job <n> <code>             job n is over: 0 (ended), EXIT_CONTEXT_LOST (the worker exits now),
                               JOB_ABORTED (the job could not run: its status file says why),
                               EXIT_STOPPED (its client asked to stop it: DIR/stop-<n>, see stop_file)
    stopped                    SIGTERM: it stopped (the current job is cut short) and exits
DIR/worker.json, written by the server before the launch: {"watch_fd", "watch_inode", "server"}:
the server's death pipe (nsprof.worker.watch.watch_parent ends the worker when it closes).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

from nsprof.worker.launch import Device
from nsprof.worker.program import run_job
from nsprof.worker.protocol import AT_START, EXIT_CONTEXT_LOST, EXIT_STOPPED, Job, JobStopped, Status
from nsprof.worker.watch import Stopped, request_stop, stopped, watch_parent

JOB_ABORTED = 6  # a job that could not run (its target did not load, its files could not be opened)
JOBS_FIFO = "jobs"
WORKER_STATUS = "worker.status"
WORKER_INFO = "worker.json"
PENDING = "pending.json"  # the job request a fresh image runs first


def stop_file(serve_dir: Path, n: int) -> Path:
    """The file whose existence asks job n to stop before its next config (the server makes it when the
    job's client is interrupted or gone; the worker checks it as a window or a compile wait opens)."""
    return serve_dir / f"stop-{n}"


def _warm(devices: dict) -> dict | None:
    """Create the CUDA context now, where torch and a GPU are there, so that no job pays for it."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print(
            "==NSPROF== serving worker: torch is not installed; jobs run on the cpu devices only",
            file=sys.stderr,
            flush=True,
        )
        return None
    try:
        device = Device("cuda")
        described = device.describe()
        device.sync()
    except Exception as exc:  # no GPU here: a cpu space still runs; a cuda job then fails in its own status
        print(
            f"==NSPROF== serving worker: no CUDA context ({type(exc).__name__}: {exc})",
            file=sys.stderr,
            flush=True,
        )
        return None
    devices["cuda"] = device
    return described


def _installed(path: Path) -> bool:
    """A file of an installed package: below a site-packages (dist-packages) folder or Python's prefix (a
    project's own .venv lies in the project's folder: its torch is not the target's to import again)."""
    if {"site-packages", "dist-packages"} & set(path.parts):
        return True
    return any(path.is_relative_to(Path(prefix).resolve()) for prefix in {sys.prefix, sys.base_prefix})


def _targets_own(folders: set[Path], file: str) -> bool:
    """Whether the module of file `file` is a target's own: below one of `folders` and not installed."""
    path = Path(file).resolve()
    return not _installed(path) and any(path.is_relative_to(folder) for folder in folders)


def _forget_target_modules(target: str, folders: set[Path]) -> None:
    """Drop the modules imported from the folder of this job's target or of any earlier job's (not
    nsprof's own, nor installed packages below it: _installed), so that a job sees its target's helpers
    as they are now and never another project's helper of the same name, as a fresh worker would.
    `folders` gains this job's folder (a module target's: the client's, entered already)."""
    from nsprof.errors import TargetError
    from nsprof.space_source import split_target

    try:
        where, _ = split_target(target)
    except TargetError:
        return  # load_target says so next, in the job's abort line
    if not (where.endswith(".py") or "/" in where):
        if not where.startswith("nsprof"):
            sys.modules.pop(where, None)  # a module target: imported again (an installed one too)
        folders.add(
            Path(os.getcwd()).resolve()
        )  # the client's folder it is found from, its helpers beside it
    else:
        folders.add(Path(where).resolve().parent)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if path and not name.startswith("nsprof") and _targets_own(folders, path):
            del sys.modules[name]


class _Place:
    """Where a job runs: the client's folder (its cwd, which a relative target, a module target and
    the target's own relative paths are found from, as in a standalone worker started there; the
    target's import puts it on sys.path) and sys.path as it was at the worker's start (no earlier
    job's target folder or folder on it), and the client's environment (no variable an earlier job's
    target set)."""

    def __init__(self) -> None:
        self.start_cwd = os.getcwd()
        self.path = list(sys.path)
        self.environ = dict(os.environ)  # as the server (and nsys) gave it: a target's own changes undone
        self.folders: set[Path] = set()  # the folders of every target served so far

    def enter(self, cwd: str | None, environ: dict | None, unset: list[str]) -> None:
        cwd = cwd or self.start_cwd
        os.chdir(cwd)
        sys.path[:] = self.path
        # The client's environment, as a standalone worker would inherit it, over the worker's own as it
        # started: that holds what the profiler's injection set (NVTX_INJECTION64_PATH, LD_PRELOAD: read
        # when first used, so never removed), and what a process reads only as it starts
        # (protocol.AT_START: equal to the client's, or it would not be served) stays as it is. A
        # variable an earlier job's target added goes, and one the client removed after it started.
        wanted = dict(self.environ)
        wanted.update({k: v for k, v in (environ or {}).items() if not k.startswith(AT_START)})
        for name in unset:  # the server's the client lacks (the profiler's injection is not the server's)
            if not name.startswith(AT_START):
                wanted.pop(name, None)
        for name in [name for name in os.environ if name not in wanted]:
            del os.environ[name]
        for name, value in wanted.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


def _target_place(request: dict) -> str | None:
    """Which target a job request's job measures: its file, resolved from the client's folder (any
    attribute of it: one module), or a module target's name and that folder; None where the job cannot
    be read (the job itself then says why)."""
    from nsprof.errors import TargetError
    from nsprof.space_source import split_target

    try:
        where, _ = split_target(Job.read(Path(request["job"])).target)
    except (OSError, ValueError, TypeError, KeyError, TargetError):
        return None
    cwd = Path(request.get("cwd") or os.getcwd())
    if where.endswith(".py") or "/" in where or "\\" in where:
        return str((cwd / where).resolve())
    return f"{where} in {cwd}"


def _compiling() -> bool:
    """Whether compiles of an earlier job still run in this image (its client stopped it while they ran, or
    one ran past its bound): they would run beside the next job's windows, so that job gets a fresh image."""
    import threading

    from nsprof.worker.windows import COMPILE_THREAD

    return any(thread.name == COMPILE_THREAD and thread.is_alive() for thread in threading.enumerate())


def _fresh_image(serve_dir: Path, request: dict, place: _Place, watch_fd: int) -> None:
    """Run `request` in a fresh image of this process (see the module's docstring): exec'd with the
    worker's own start folder and environment (the profiler's injection in it), the death pipe kept."""
    (serve_dir / PENDING).write_text(json.dumps(request))
    if watch_fd >= 0:
        try:
            os.set_inheritable(watch_fd, True)  # watch_parent made it close on exec
        except OSError:
            pass  # not open (the pipe did not arrive): the fresh image watches its parent instead
    os.chdir(place.start_cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    from nsprof.host.children import python_module

    os.execve(
        sys.executable,
        python_module(sys.executable, "nsprof.worker", "--serve", str(serve_dir)),
        place.environ,
    )


def _serve_job(request: dict, devices: dict, place: _Place, serve_dir: Path) -> int:
    status = None
    try:
        job = Job.read(Path(request["job"]))
        status = Status(job.status)
        status.stop_file = stop_file(serve_dir, request["n"])
        status.write("pid", os.getpid())
        status.write("served", json.dumps({"job": request["n"], "server": request.get("server")}))
        try:
            place.enter(request.get("cwd"), request.get("environ"), request.get("unset") or [])
        except OSError as exc:
            status.write(
                "abort", json.dumps(f"the client's folder {request.get('cwd')} cannot be entered: {exc}")
            )
            raise
        _forget_target_modules(job.target, place.folders)
        return run_job(job, status, devices)
    except JobStopped:  # the configs done stand; the worker serves on
        status.write("stopped")
        return EXIT_STOPPED
    except Stopped:
        if status is not None:
            status.write("stopped")
        raise
    except Exception:  # the job's abort line (or the missing file) says why; the worker serves on
        traceback.print_exc()
        return JOB_ABORTED
    finally:
        if status is not None:
            status.close()


def serve(serve_dir: Path) -> int:
    info = json.loads((serve_dir / WORKER_INFO).read_text())
    own = Status(str(serve_dir / WORKER_STATUS))
    own.write("pid", os.getpid())
    watch = watch_parent(
        Job(
            target="",
            config_ids=[],
            status="",
            watch_fd=int(info.get("watch_fd", -1)),
            watch_inode=int(info.get("watch_inode", 0)),
        )
    )
    signal.signal(signal.SIGTERM, request_stop)
    devices: dict = {}
    pending = serve_dir / PENDING
    try:
        described = _warm(devices)
        place = _Place()  # after torch's import: what it set stays
        served = None  # the target this image has run (_target_place)
        # Read and write: the FIFO never reports EOF, and opening it never waits for the server.
        with open(os.open(serve_dir / JOBS_FIFO, os.O_RDWR), encoding="utf-8", buffering=1) as jobs:
            own.write("ready", json.dumps({"watch": watch, "device": described}))
            while True:
                if pending.exists():  # the job this fresh image was exec'd for
                    line = pending.read_text()
                    pending.unlink()
                else:
                    line = jobs.readline().strip()
                if not line:
                    continue
                if line == "exit":
                    return 0
                request = json.loads(line)
                target = _target_place(request)
                if served is not None and (target is not None and target != served or _compiling()):
                    own.write("fresh", json.dumps({"job": request["n"], "target": target}))
                    own.close()
                    _fresh_image(serve_dir, request, place, int(info.get("watch_fd", -1)))
                served = target if target is not None else served
                code = _serve_job(request, devices, place, serve_dir)
                own.write("job", request["n"], code)
                if code == EXIT_CONTEXT_LOST:
                    return code
    except Stopped:
        return stopped(own)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
