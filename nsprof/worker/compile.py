"""The compile step beside the session: `python -m nsprof.worker.compile JOB.json`.

nsprof.session.compile_step.CompileAhead starts it at the same time as a standalone session, so
that the compilers run while the profiler, the worker, torch and CUDA start (and, with a cold cache,
while earlier configs are measured) instead of before all of it. It is a process of its own,
outside the profiler, with its own output (a log) and its own GIL: nothing it does opens an
NVTX range or touches the GPU the session measures on, and a compiler that crashes takes only
this process down.

It loads the target, compiles every point of the job in a pool of threads (in job order, the
order the worker builds them in) and writes one marker per point into the job's folder:
`<point>.ok`, or `<point>.fail` holding the reason in one line; then `end`. Each marker is
written whole (a temporary file, then a rename), so a reader never sees half of one. The worker
(nsprof.worker.windows) waits for a point's marker before its start line, and a point with no
marker once `end` exists was never compiled (the step died: its reason is in `end`).
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nsprof.schema import Failure

END = "end"


def marker(folder: Path, point: int, ok: bool) -> Path:
    return Path(folder) / f"{point}.{'ok' if ok else 'fail'}"


def write_marker(path: Path, text: str) -> None:
    """Write `path` whole: a reader sees all of it or nothing."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def compile_reason(exc: BaseException) -> Failure:
    """One line: why a config did not compile (as the served worker words it too); kind compile."""
    try:
        text = " ".join(str(exc).split())[:300]
    except Exception:  # an exception whose message cannot be made: its type is the reason
        text = "(no message: it could not be read)"
    return Failure(f"compile failed: {type(exc).__name__}: {text}", "compile")


def state(folder: Path, point: int) -> tuple[str, str] | None:
    """("ok", ""), ("fail", reason), ("lost", reason: the step ended without this point), or None
    (not compiled yet)."""
    folder = Path(folder)
    end = folder / END
    # `end` first: every marker is written before it, so once it is seen the markers are final
    # (looked at after the markers, a point compiled just before `end` would read as lost).
    ended = end.exists()
    if marker(folder, point, True).exists():
        return "ok", ""
    failed = marker(folder, point, False)
    if failed.exists():
        return "fail", failed.read_text(errors="replace").strip()
    if ended:  # this point was never compiled
        why = end.read_text(errors="replace").strip()
        return "lost", f"not compiled: {why}" if why else "not compiled: the compile step ended without it"
    return None


def compile_pool_size() -> int:
    """How many threads compile at once (the compile step's, and a worker's that compiles ahead): one
    a CPU this process may run on, 2 to 8 (a compile also waits on its compiler's own processes)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(8, max(2, cpus))


def compile_each(space, layout, points: list[int], jobs: int, done) -> None:
    """Compile each of `points` (point ids of `layout`, a nsprof.schema.Points) in a pool of `jobs`
    threads, in order; done(point, reason) as each one finishes, in its thread: reason None when
    it compiled."""

    def one(point: int) -> None:
        try:
            space.compile_at(*layout.split(point))
        except Exception as exc:  # a config that does not compile is a result, not a crash
            done(point, compile_reason(exc))
            return
        done(point, None)

    with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as pool:
        list(pool.map(one, points))


def run(job: dict) -> int:
    from nsprof.schema import Points
    from nsprof.space import load_target

    folder = Path(job["folder"])
    try:
        space = load_target(job["target"])
    except Exception as exc:
        write_marker(
            folder / END,
            f"the target did not load for the compile step: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:200]}",
        )
        raise
    changed = space.changes_since(job["expect"]) if job.get("expect") else None
    if changed is not None:  # compile nothing of an edited target: a build could find it by config id
        write_marker(folder / END, f"the target changed since nsprof read it: {changed}")
        return 0  # not the step's failure: the worker refuses the target in one line (TargetChanged)
    compile_each(
        space,
        Points(job["n_configs"], job["n_shapes"]),
        job["points"],
        job["jobs"],
        lambda point, reason: write_marker(marker(folder, point, reason is None), reason or ""),
    )
    write_marker(folder / END, "")
    return 0


def _reap_group_when_gone() -> None:
    """Fork a child that kills this step's process group once the step is gone, however it died.

    nsprof SIGKILLed kills the step by its parent-death signal, but not the processes its
    compilers started (nvcc, ptxas: in the step's process group, since nsprof gave it a session of
    its own). This child waits, idle, for its own parent-death signal, then kills the group."""
    if not sys.platform.startswith("linux") or os.getpgid(0) != os.getpid():
        return  # not the leader of a group of its own (run by hand): its group is not its to kill
    import ctypes
    import signal

    parent = os.getpid()
    if os.fork() != 0:
        return
    try:

        def kill_group(*_) -> None:
            os.killpg(0, signal.SIGKILL)

        signal.signal(signal.SIGTERM, kill_group)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the step died before the signal was armed
            kill_group()
        while True:
            signal.pause()
    finally:
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m nsprof.worker.compile JOB.json", file=sys.stderr)
        sys.exit(2)
    _reap_group_when_gone()
    sys.exit(run(json.loads(Path(argv[0]).read_text())))


if __name__ == "__main__":
    main()
