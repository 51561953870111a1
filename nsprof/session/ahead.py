"""A session's worker started ahead: the profiler and its worker launched before the session's job is
known, so that the worker's import of the target (torch, the tuner: most of a session's start-up) runs
while something else does, the session before it among them.

Holds Ahead: start (launch it: its own folder or --work-dir, report base, death pipe and log), take (the
session that runs next under the same settings makes it its first worker run: nsprof.session.parts) and
close (one never taken is sent a job with no config, so that it and its profiler end cleanly, and its
files go).

Tune's adaptive sessions use it (nsprof.tune.rankings): each is a second process, as a check of a close
winner needs, without a second start-up to wait for. Until its job comes the worker touches no GPU (no
CUDA call): it holds no GPU lock, and inherits none (nsprof.host.children.launch_child); the session that
takes it runs under the GPU lock nsprof holds, as every session does.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from nsprof.drivers.base import Driver
from nsprof.errors import NsprofError
from nsprof.host.children import DeathPipe, exit_code, kill_group, launch_child, wait_exit
from nsprof.host.owned import own_folder
from nsprof.session.folders import claim_base, numbered
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import Job, ahead_file


def _files(driver: Driver, base: Path) -> list[Path]:
    """The files a worker run with report base `base` may leave (nsprof.session.parts' and the ahead file)."""
    job = base.with_suffix(".job.json")
    return [
        *driver.report_files(base),
        *(base.with_suffix(s) for s in (".log", ".status", ".exit", ".job.stack")),
        job,
        ahead_file(job),
    ]


class Ahead:
    """A worker launched under `settings`' profiler ahead of its session (start), waiting for its job."""

    def __init__(self, target: str, settings: ProfileSettings, driver: Driver) -> None:
        self.target, self.settings, self.driver = target, settings, driver
        self.temporary = settings.work_dir is None
        self.folder = (
            Path(tempfile.mkdtemp(prefix="nsprof-"))
            if self.temporary
            else own_folder(Path(settings.work_dir), "--work-dir")
        )
        self.base = claim_base(self.folder, numbered("ahead"), ".status", lambda b: _files(driver, b))
        self.pipe = DeathPipe()
        self.command: list[str] = []
        self.proc = None
        self.log_handle = None
        self._closing = False
        self.taken = False  # by a session (take): no other may have it
        self.handed = False  # its job written (nsprof.session.parts): the session's run owns it from then

    @classmethod
    def start(cls, target: str, settings: ProfileSettings, driver: Driver) -> Ahead:
        """Launch the profiler and its worker, which imports `target` and waits for its job."""
        ahead = cls(target, settings, driver)
        try:
            status = ahead.base.with_suffix(".status")
            job_file = ahead.base.with_suffix(".job.json")
            Job(target, [], str(status), watch_fd=ahead.pipe.read_fd, watch_inode=ahead.pipe.inode).write(
                ahead_file(job_file)
            )
            ahead.command = driver.build_command(settings, job_file, ahead.base)
            ahead.log_handle = open(ahead.base.with_suffix(".log"), "w")  # noqa: SIM115 - the run's log
            ahead.proc = launch_child(ahead.command, ahead.log_handle, ahead.pipe, locks=False)
        except BaseException:
            ahead.close()
            raise
        return ahead

    def take(self, target: str, settings: ProfileSettings, driver: Driver) -> Ahead | None:
        """This worker, for a session of `target` under `settings` and `driver` (once: None after that), if
        it runs the command that session would run, in the same folder, and still runs; one that ended
        meanwhile is closed (the session starts its own)."""
        job_file = self.base.with_suffix(".job.json")
        fits = (
            target == self.target
            and settings.work_dir == self.settings.work_dir
            and driver.build_command(settings, job_file, self.base) == self.command
        )
        if self.taken or not fits:
            return None
        self.taken = True
        if self.proc is None or exit_code(self.proc) is not None:
            self.close()
            return None
        return self

    def close(self, bound_s: float = 30.0) -> None:
        """Unless a session's run has it (handed): its job is one with no config, so that the worker exits
        and its profiler with it, cleanly (a killed nsys can leave its agent behind). A thread that the
        interpreter waits for at exit waits for that, up to `bound_s` before the group is killed, and
        removes its files: meanwhile the command goes on. Its owner calls it once it is done with it."""
        if self.handed or self._closing:
            return
        self.taken = self._closing = True
        job_file = self.base.with_suffix(".job.json")
        if self.proc is not None and exit_code(self.proc) is None and not job_file.exists():
            Job(self.target, [], "").write(job_file)
        threading.Thread(target=self._end, args=(bound_s,), name="nsprof-ahead-end").start()

    def _end(self, bound_s: float) -> None:
        if self.proc is not None and wait_exit(self.proc, bound_s) is None:
            kill_group(self.proc)
        if self.log_handle is not None:
            self.log_handle.close()
        self.pipe.close()
        if self.temporary:
            shutil.rmtree(self.folder, ignore_errors=True)  # its own folder: nothing else was there
            return
        for path in _files(self.driver, self.base):
            path.unlink(missing_ok=True)
        for partial in self.folder.glob(self.base.name + ".*.partial"):
            partial.unlink(missing_ok=True)


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

    def next(self) -> Ahead | None:
        """The worker started last, for the session about to run; the one after it starts now."""
        current = self.started[-1]
        self.started.append(self._start())
        return current

    def close(self) -> None:
        for ahead in self.started:
            if ahead is not None:
                ahead.close()
