"""A session's worker started ahead: the profiler and its worker launched before the session's job is
known, so that the worker's import of the target (torch, the tuner: most of a session's start-up) runs
while something else does, the session before it among them.

Holds Ahead (start: launch it, in its own folder or --work-dir; take: the session that runs next under
the same command makes it its first worker run, nsprof.session.parts; hand: the GPU locks and the job
given to it; close: one never handed a job ends and its files go) and Aheads (one started at a time,
for each next session of one truth).

Tune's adaptive sessions use it (nsprof.tune.rankings): each is a second process, as a check of a close
winner needs, without a second start-up to wait for. Until its job comes the worker makes no CUDA call
of nsprof's, holds no GPU lock and inherits none: a lock it kept would keep the GPU from the session it
waits for. A target whose import itself runs CUDA work runs it there outside the lock, as the compile
step beside a session does. The session hands it the locks nsprof holds then (their descriptors, over a
socket it inherited), so that the lock stays held while the worker, or what it starts, lives.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path

from nsprof.drivers.base import Driver
from nsprof.errors import NsprofError
from nsprof.host.children import DeathPipe, exit_code, kill_group, launch_child, wait_exit
from nsprof.host.lock import held_fds
from nsprof.host.owned import own_folder
from nsprof.session.folders import claim_base, numbered
from nsprof.session.supervise import kill_left_worker, worker_pid
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import Job, ahead_file


class AheadGone(NsprofError):
    """The worker started ahead ended before it took its job (its import crashed, say): the session
    starts one of its own."""


END_BOUND_S = 30.0  # how long a worker never handed a job gets to end cleanly before its group is killed


def _files(driver: Driver, base: Path) -> list[Path]:
    """The files a worker run with report base `base` may leave, its claim (`.status`) last: once that is
    gone another run may claim the name."""
    job = base.with_suffix(".job.json")
    return [
        *driver.report_files(base),
        *(base.with_suffix(s) for s in (".log", ".exit", ".job.stack")),
        job.with_name(job.name + ".partial"),
        job,
        ahead_file(job),
        ahead_file(job).with_name(ahead_file(job).name + ".partial"),
        base.with_suffix(".status"),
    ]


class Ahead:
    """A worker launched under `settings`' profiler ahead of its session (start), waiting for its job."""

    def __init__(self, target: str, settings: ProfileSettings, driver: Driver) -> None:
        self.target, self.settings, self.driver = target, settings, driver
        self.temporary = settings.work_dir is None
        self.folder: Path | None = None
        self.base: Path | None = None
        self.pipe: DeathPipe | None = None
        self.command: list[str] = []
        self.proc = None
        self.log_handle = None
        self._locks: socket.socket | None = None  # nsprof's end of the socket the locks go over
        self.taken = False  # by a session (take): no other may have it
        self.in_session = False  # its folder is the taking session's work folder: never removed here
        self.handed = False  # its job written (hand): the session's run owns it from then
        self.pipe_given = False  # to the session's runs (give_pipe), which close it
        self._done = False  # its end is through (_end): its descriptors are closed, once
        self._ended = threading.Lock()
        self._ender: threading.Thread | None = None

    @classmethod
    def start(cls, target: str, settings: ProfileSettings, driver: Driver) -> Ahead:
        """Launch the profiler and its worker, which imports `target` and waits for its job."""
        ahead = cls(target, settings, driver)
        try:
            ahead._launch()
        except BaseException:
            ahead.close()
            raise
        return ahead

    def _launch(self) -> None:
        settings, driver = self.settings, self.driver
        self.folder = (
            Path(tempfile.mkdtemp(prefix="nsprof-"))
            if self.temporary
            else own_folder(Path(settings.work_dir), "--work-dir")
        )
        self.base = claim_base(self.folder, numbered("ahead"), ".status", lambda b: _files(driver, b))
        self.pipe = DeathPipe()
        self._locks, theirs = socket.socketpair()
        with theirs:
            job_file = self.base.with_suffix(".job.json")
            pipe = self.pipe
            Job(
                self.target,
                [],
                str(self.base.with_suffix(".status")),
                watch_fd=pipe.read_fd,
                watch_inode=pipe.inode,
                locks_fd=theirs.fileno(),
                locks_inode=os.fstat(theirs.fileno()).st_ino,
            ).write(ahead_file(job_file))
            self.command = driver.build_command(settings, job_file, self.base)
            self.log_handle = open(self.base.with_suffix(".log"), "w")  # noqa: SIM115 - the run's log
            self.proc = launch_child(self.command, self.log_handle, pipe, fds=(theirs.fileno(),))

    def take(self, target: str, settings: ProfileSettings, driver: Driver) -> Ahead | None:
        """This worker, for a session of `target` under `settings` and `driver` (once: None after that), if
        it runs the command that session would run, in the same folder, and still runs; one that ended
        meanwhile is closed (the session starts its own)."""
        if self.taken or self.base is None:
            return None
        job_file = self.base.with_suffix(".job.json")
        fits = (
            target == self.target
            and settings.work_dir == self.settings.work_dir
            and not settings.l2_hit_rate  # ncu's application replay runs the worker again, with no lock to hand
            and driver.build_command(settings, job_file, self.base) == self.command
        )
        if not fits:
            return None
        self.taken = True
        if self.proc is None or exit_code(self.proc) is not None:
            self.close()
            return None
        self.in_session = True
        return self

    def give_pipe(self) -> DeathPipe:
        """Its death pipe, for every run of the session that took it (nsprof.session.parts.run_parts),
        which closes it: not closed here from then on."""
        self.pipe_given = True
        return self.pipe

    def hand(self, job: Job) -> None:
        """Give the worker the GPU locks this thread holds (nsprof.host.lock.held_fds), then its job; the
        session's run owns it from here. AheadGone where the worker is gone (its owner closes it)."""
        locks = held_fds()
        try:
            if locks:  # one message, with or without descriptors: the worker reads one
                socket.send_fds(self._locks, [b"L"], list(locks))
            else:
                self._locks.sendall(b"L")
        except OSError as exc:  # its end closed: the worker is gone
            raise AheadGone(f"the worker started ahead ended before its job: {exc}") from None
        job.write(self.base.with_suffix(".job.json"))
        self.handed = True
        self._locks.close()

    def close(self, bound_s: float = END_BOUND_S) -> None:
        """Unless a session's run has it (handed): the worker is told to stop (SIGTERM: it stops its import
        or its wait, cleanly, and its profiler ends with it; a killed nsys can leave its agent behind), and a
        thread waits for that, up to `bound_s` before the group is killed, and removes its files and its own
        folder: meanwhile the command goes on, and at its exit whatever is left is waited for (_at_exit).
        Its owner calls it once it is done with it."""
        if self.handed or self._ender is not None:
            return
        self.taken = True
        _PENDING.append(self)
        self._ender = threading.Thread(
            target=self._end, args=(bound_s,), name="nsprof-ahead-end", daemon=True
        )
        self._ender.start()

    def _end(self, bound_s: float) -> None:
        with self._ended:
            if self._done:
                return
            self._done = True
            try:
                if self.proc is not None and exit_code(self.proc) is None:
                    self._stop(bound_s)
            finally:
                for handle in (self.log_handle, self._locks):
                    if handle is not None:
                        handle.close()
                if self.pipe is not None and not self.pipe_given:
                    self.pipe.close()
                self._remove()
                if self in _PENDING:
                    _PENDING.remove(self)

    def _stop(self, bound_s: float) -> None:
        """SIGTERM to the worker once its pid is known (it wrote its status `pid` line), then its exit, up
        to `bound_s`; past that its group is killed, and the worker if it runs outside that group."""
        status = self.base.with_suffix(".status")
        job_file = self.base.with_suffix(".job.json")
        told = False
        for _ in range(int(bound_s / 0.05)):
            pid = None if told else worker_pid(status, job_file)
            if pid is not None:
                told = True
                with contextlib.suppress(OSError):  # gone already: its profiler is ending
                    os.kill(pid, signal.SIGTERM)
            if wait_exit(self.proc, 0.05) is not None:
                return
        kill_group(self.proc)
        kill_left_worker(status, job_file)

    def _remove(self) -> None:
        """Its files; its folder too where it made that folder and no session works there."""
        if self.folder is None:
            return
        if self.temporary and not self.in_session:
            shutil.rmtree(self.folder, ignore_errors=True)  # its own folder: nothing else was there
        elif self.base is not None:
            for path in _files(self.driver, self.base):
                with contextlib.suppress(OSError):  # one left behind must not keep the others
                    path.unlink(missing_ok=True)

    def kill(self) -> None:
        """End it now (an interrupt while its end was waited for at exit): its group killed, its files gone."""
        if self.proc is not None:
            kill_group(self.proc)
        self._end(0.0)


# Workers closed whose end is not through yet: waited for at the interpreter's exit (_at_exit).
_PENDING: list[Ahead] = []


def _at_exit() -> None:
    for ahead in list(_PENDING):
        try:
            if ahead._ender is not None:
                ahead._ender.join(END_BOUND_S + 5)
        except KeyboardInterrupt:  # interrupted again: stop waiting, leave nothing
            for left in list(_PENDING):
                left.kill()
            return


atexit.register(_at_exit)


class Aheads:
    """Workers started ahead for the sessions of `target` under `settings`, one at a time: the first at
    once; each next one as its predecessor is taken (next), so that it imports while that session runs.
    One that cannot start (its profiler not there, its folder refused) is none: the session starts its
    own, and says why if it cannot either. close: the one not taken, and any other never run, end."""

    def __init__(self, target: str, settings: ProfileSettings, driver: Driver) -> None:
        self.target, self.settings, self.driver = target, settings, driver
        self.started: list[Ahead | None] = [self._start()]

    def _start(self) -> Ahead | None:
        try:
            return Ahead.start(self.target, self.settings, self.driver)
        except (OSError, NsprofError):
            return None

    @property
    def ready(self) -> bool:
        """Whether a worker is started ahead for the next session."""
        return self.started[-1] is not None

    def next(self) -> Ahead | None:
        """The worker started last, for the session about to run; the one after it starts now."""
        current = self.started[-1]
        self.started.append(self._start())
        return current

    def close(self) -> None:
        for ahead in self.started:
            if ahead is not None:
                ahead.close()
