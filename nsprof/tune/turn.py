"""A `tune --resume --wait` that has points to measure, or adaptive sessions to run, takes its turn: it
decides what is missing, and which reps to add, only once no other nsprof run it waited for can still
be storing them.

Two waits, in this order (the only order any run takes them, so none waits on another in a cycle):
1. the resume turn of this GPU: a lock file beside the GPU's lock (nsprof.host.lock; the same
   folder, made and opened as safely), held from the decision to the end of the truth's adaptive
   reps (nsprof.tune.rankings), so that two resumes that wait together take turns and the second
   decides again after the first has stored what it measured, its adaptive reps too;
2. the GPU's lock itself, when another nsprof run (not an `nsprof serve`, through which this run
   then measures) holds it: waited for and let go at once, so that what that run stored counts;
   each session takes it again as it always does. Where an `nsprof serve` holds it, the runs that
   measure through it hold instead, each from its first pass's start to its last row stored, a shared
   lock beside the GPU's (storing_first_pass): waited for (exclusive) and let go at once the same way.
A resume that finds nothing missing takes its turn only before its first adaptive session
(nsprof.tune.stored.Stored.turn_before_sessions), and decides again if it waited: two such resumes
would otherwise add the same reps of the same configs. One with no session to run waits behind no one.
Only a resume with --wait takes the turn; a run that holds the GPU lock never waits for a turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator

__all__ = ["resume_turn", "storing_first_pass", "takes_turns"]


def takes_turns(settings) -> bool:
    """Whether a run of `settings` (TuneSettings) takes the resume turn: a --resume --wait on one
    GPU (a cluster's workers each hold their own GPU's lock)."""
    return bool(settings.resume and settings.wait and settings.cluster is None)


@contextlib.contextmanager
def resume_turn() -> Iterator[bool]:
    """Hold this GPU's resume turn for the body; yields whether another run was waited for (the
    turn, or the GPU), so that what is missing must be decided again."""
    from nsprof.host.gpu import which_gpu

    # the GPU that gpu_lock(0) holds: CUDA_VISIBLE_DEVICES's first
    fd = _beside_gpu_lock(which_gpu(0), "resume")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = False
        except BlockingIOError:
            _say("waiting for another nsprof resume on this GPU to end before deciding what is missing")
            fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C still interrupts the wait (PEP 475)
            waited = True
        yield _waited_for_the_gpu() or waited
    finally:
        os.close(fd)  # releases the turn


@contextlib.contextmanager
def storing_first_pass(gpu) -> Iterator[None]:
    """Held (shared) by a first pass on `gpu` (an nsprof.host.gpu.Gpu) from its start to its last row stored:
    what a --resume --wait waits for where an `nsprof serve` holds the GPU (_waited_for_served_runs)."""
    fd = _beside_gpu_lock(gpu, "storing")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a resume holds it exclusively only for the instant after its wait
        yield
    finally:
        os.close(fd)


def _beside_gpu_lock(gpu, suffix: str) -> int:
    """A descriptor of the lock file `suffix` beside `gpu`'s lock (made and opened as safely)."""
    from nsprof.host.lock import lock_path, open_lock_file

    path = lock_path(gpu)
    return open_lock_file(path.with_name(f"{path.name}.{suffix}"))


def _waited_for_the_gpu() -> bool:
    """Whether another nsprof run held this GPU and was waited for (where an `nsprof serve` holds it: a
    run measuring through it), since it may have been storing the very points this run would measure."""
    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock
    from nsprof.serve_client import holding_server

    try:
        with gpu_lock(0):
            return False
    except GpuBusy as exc:
        holder = (exc.holder or {}).get("pid")
        if holder == os.getpid():
            return False
        if holding_server(holder) is not None:
            return _waited_for_served_runs(holder)
    _say(
        f"waiting for the nsprof run on this GPU{f' (pid {holder})' if holder else ''} to end before deciding what is missing"
    )
    with gpu_lock(0, wait=True):
        return True


def _waited_for_served_runs(server: int) -> bool:
    """Whether a run measuring through the `nsprof serve` (pid `server`) that holds this GPU was storing a
    first pass (storing_first_pass), and was waited for."""
    from nsprof.host.gpu import which_gpu

    fd = _beside_gpu_lock(which_gpu(0), "storing")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            _say(
                f"waiting for the nsprof run measuring through nsprof serve (pid {server}) on this GPU to "
                "store what it measured before deciding what is missing"
            )
            fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C still interrupts the wait (PEP 475)
            return True
    finally:
        os.close(fd)


def _say(words: str) -> None:
    print(f"nsprof: {words}", file=sys.stderr, flush=True)
