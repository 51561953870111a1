"""A standalone session: worker runs ("parts") until every config is measured or failed.

Holds run_parts (the session proper), make_job (the worker's Job, a part's or a served job's), failure_rows
and refuse_changed; what one finished run leaves (its whole configs, its failures, what it lost) is read by
nsprof.session.reading.

When a worker dies (illegal address, abort, out of memory, timeout) its config is recorded as
failed with the reason, and a new worker starts at the next config. Each run writes its own report
part; every part is read, so nothing measured is lost. A config measured but not whole in its
part's report (a report cut off when its profiler was killed) is measured again, at most
MAX_LOST_RETRIES times, after the configs that have not run yet.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from nsprof.drivers.base import Driver
from nsprof.errors import NsprofError, TargetChanged, ToolFailed, printable
from nsprof.host.children import DeathPipe
from nsprof.reports.checks import one_line
from nsprof.schema import Failure, failure_frame
from nsprof.session.ahead import AheadGone
from nsprof.session.folders import claim_base, numbered
from nsprof.session.reading import Part, complete_configs, drop_empty_stacks, read_part, rows_of
from nsprof.session.request import Measured, SessionRun
from nsprof.session.supervise import RunEnd, run_worker
from nsprof.session.timing import PHASES_FILE, Timing
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import Job, RunStatus, parse_status

MAX_LOST_RETRIES = 2  # a config measured but lost with a crashed run's report is measured again


def failure_rows(failures: dict[int, str], run: SessionRun):
    """nsprof.schema.failure_frame's rows, labelled as the run driver's measurements are."""
    settings = run.settings
    return failure_frame(failures, run.points, source=settings.backend, **run.driver.labels(settings))


def make_job(run: SessionRun, ids: list[int], status_file: Path, **more) -> Job:
    """The worker's job for `ids` of `run` (a standalone part's, or a served one's)."""
    points, settings = run.points, run.settings
    shapes = {"n_configs": points.n_configs, "n_shapes": points.n_shapes} if points.shaped else {}
    return Job(
        target=run.target,
        config_ids=ids,
        status=str(status_file),
        modes=list(settings.modes),
        reps=settings.reps,
        warmup=settings.warmup,
        compile_timeout_s=settings.compile_timeout_s,
        flushes=list(settings.flushes),
        **shapes,
        **more,
        **(run.job_extra or {}),
    )


def refuse_changed(status: RunStatus, log: Path) -> None:
    """A worker that found the target changed since nsprof read it (Job.expect) measured nothing: the
    session ends there, whatever the earlier parts measured (handed over already, of the target as read)."""
    if status.changed:
        raise TargetChanged(
            f"{status.changed}; the worker measured nothing of it (run nsprof again to measure "
            f"the target as it is now; log: {log})"
        )


def _salvage(run: SessionRun, base: Path, log: Path) -> None:
    """After an interrupt: hand over what the interrupted part finished (whole configs only,
    and the failures it recorded). A report that cannot be read loses only this part."""
    driver, settings, points = run.driver, run.settings, run.points
    status = parse_status(base.with_suffix(".status").read_text(errors="replace"))
    drop_empty_stacks(base)
    frames = [failure_rows(status.failed, run)] if status.failed else []
    try:
        report = driver.finish(base, log)
        if report is not None:
            measured = driver.read(report, settings)
            complete = complete_configs(measured, status.done, settings, points) - set(status.failed)
            frames.insert(0, rows_of(measured, complete, points))
    except NsprofError:
        pass
    _hand_over(run, frames)


def _hand_over(run: SessionRun, frames: list) -> None:
    """Give run's on_rows the rows of `frames` (those with rows) in one frame, if there are any."""
    frames = [frame for frame in frames if frame is not None and len(frame)]
    if frames:
        import pandas as pd

        run.hand_over(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])


def _start_failure(
    status: RunStatus, end: RunEnd, settings: ProfileSettings, log: Path, driver: Driver
) -> str:
    """One line saying why a worker reached no config."""
    if status.abort:
        return status.abort
    if end.stalled == "start":
        doing = (
            "before it ran (the profiler's or Python's start-up)"
            if status.pid is None
            else "loading the target or initialising CUDA"
            if status.device is None
            else "before its first config"
        )
        return f"the worker did not start within {settings.phase_bound_s:g} s (it hung {doing})"
    return driver.diagnose(log, end.returncode)


def _part_files(driver: Driver, base: Path) -> list[Path]:
    """The files a worker run with report base `base` leaves (but its status file)."""
    return [*driver.report_files(base), *(base.with_suffix(s) for s in (".log", ".job.json", ".exit"))]


class _Parts:
    """One standalone session across its parts: what became final, and where its time went."""

    def __init__(self, run: SessionRun) -> None:
        self.run = run
        self.reports: list[Path] = []
        self.failures: dict[int, str] = {}
        self.frames: list = []
        self.retries: dict[int, int] = {}
        self.measured_any = False  # did any part keep a measurement (or, with no profiler, finish a config)?
        self.ahead_gone = False  # the worker started ahead for its first run ended before it: none is used
        self.compile_in_windows = False  # a worker died compiling ahead: each config's compile in its window
        self.notes: list[str] = []  # what the session has to say (Measured.notes)
        self.device: dict | None = None
        self.started_at = time.monotonic()
        self.timing = Timing()

    def settle(self, new_failures: dict[int, str], kept=None) -> None:
        """Record what became final, and hand it over at once."""
        self.failures.update(new_failures)
        new = [kept, failure_rows(new_failures, self.run) if new_failures else None]
        new = [frame for frame in new if frame is not None and len(frame)]
        self.frames.extend(new)
        _hand_over(self.run, new)

    def give_up(self, ids: list[int], why: str) -> None:
        """These configs are not run: each fails with `why` (kind not_run)."""
        not_run = {c: Failure(why, "not_run") for c in ids}
        for config_id, failure in not_run.items():
            self.run.notify("fail", config_id, failure)
        self.settle(not_run)

    def _claim(self, number: int) -> Path:
        """part{number}, or the next name no earlier run in a reused work folder has used (claim_base)."""
        run = self.run
        return claim_base(
            run.work_dir, numbered("part", number), ".status", lambda b: _part_files(run.driver, b)
        )

    def part(self, number: int, remaining: list[int], pipe: DeathPipe) -> list[int]:
        """Worker run `number`, of the configs `remaining`: the configs left after it (lost ones last)."""
        run = self.run
        # its first run: a worker started ahead, when given (and not found gone: then one of its own)
        ahead = run.ahead if number == 0 and not self.ahead_gone else None
        base = ahead.base if ahead is not None else self._claim(number)
        status_file = base.with_suffix(".status")
        log = base.with_suffix(".log")
        job = make_job(run, remaining, status_file, watch_fd=pipe.read_fd, watch_inode=pipe.inode)
        job.compile_here = job.compile_here and not self.compile_in_windows
        job_file = base.with_suffix(".job.json")
        command = run.driver.build_command(run.settings, job_file, base)
        if ahead is None:  # a worker started ahead is handed its job once its run follows it (run_worker)
            job.write(job_file)
        settled = False
        try:
            end = run_worker(command, log, status_file, job_file, run.settings, run.notify, pipe, ahead, job)
            status = parse_status(status_file.read_text(errors="replace"))
            if ahead is not None and status.time_of("job") is None:  # its profiler outlived it: handed anyway
                raise AheadGone("the worker started ahead ended before it took its job")
            refuse_changed(status, log)
            part = read_part(run, base, log, end)
            requeued = self._take(part, end, log)
            settled = True
            self.settle(part.failures, part.kept)
        except AheadGone as gone:
            ahead.close()
            self.ahead_gone = True
            self.notes.append(f"{gone}: the session ran in a worker of its own")
            return self.part(number, remaining, pipe)  # this run again
        except KeyboardInterrupt:
            if not settled:
                _salvage(run, base, log)
            raise
        progressed = (set(part.status.done) - set(requeued)) | set(part.failures)
        if not progressed and not requeued:
            if job.compile_here and part.status.waiting and not part.status.abort:
                # It died compiling ahead, all of the job's compiles before its first window, several at
                # once: the next part (one more, past the restarts) leaves each config's compile to its
                # first launch, in its own window, where a compile that kills the worker is charged to
                # that config alone.
                self.compile_in_windows = True
                why = _start_failure(part.status, end, run.settings, log, run.driver)
                self._say(
                    f"the worker died compiling ahead ({why}); each config was compiled at its first "
                    "launch instead, in its own window (its --timeout bounds it there)"
                )
                return remaining
            # The worker never reached a config: it could not start (or hung while starting).
            reason = _start_failure(part.status, end, run.settings, log, run.driver)
            if not self.measured_any:
                raise ToolFailed(f"the profiled worker measured nothing: {reason} (log: {log})")
            # Keep what the earlier parts measured; nothing is known against the configs left.
            self.give_up(remaining, f"not run: the worker failed to start: {reason}")
            return []
        # Lost configs go last, after the configs that have not run yet: a config that crashes
        # the worker again then cannot take them down with it a second time.
        return [c for c in remaining if c not in progressed and c not in requeued] + requeued

    def _say(self, note: str) -> None:
        """A note of the session's (Measured.notes), said on stderr now too."""
        self.notes.append(note)
        print(f"nsprof: {printable(note)}", file=sys.stderr, flush=True)  # it may quote the target

    def _take(self, part: Part, end: RunEnd, log: Path) -> list[int]:
        """Take in a part read: its times, device, report, and what it lost; the configs to measure again."""
        run, status = self.run, part.status
        if end.stalled == "exit" and not part.lost:
            self._say(
                f"the worker did not exit within {run.settings.phase_bound_s:g} s of its last config (a thread "
                "the target left running, or an exit handler?) and was stopped; nothing measured was lost"
            )
        self.timing.add(part, end, log)
        self.device = self.device or status.device
        if part.crashed is not None:
            run.notify("fail", part.crashed, part.failures[part.crashed])
        if part.report is not None:
            self.reports.append(part.report)
        requeued = []
        for config_id, why in part.lost.items():
            # Measured but not (whole) in the report: measure again, then call it a failure.
            self.retries[config_id] = self.retries.get(config_id, 0) + 1
            if self.retries[config_id] > MAX_LOST_RETRIES:
                part.failures[config_id] = Failure(
                    f"measured {MAX_LOST_RETRIES + 1} times, but {run.settings.backend}'s report lost it each time"
                    + (f" ({one_line(why, 120)})" if why else ""),
                    "lost",
                )
            else:
                requeued.append(config_id)
        for config_id in requeued:
            run.notify("retry", config_id, "its report was lost with the crashed run; measuring again")
        if not run.driver.writes_report and status.done or part.kept is not None and len(part.kept):
            self.measured_any = True
        return requeued

    def measured(self) -> Measured:
        """What the session measured, its phases written to its work folder."""
        import pandas as pd

        from nsprof.schema import make_frame

        ended_at = time.monotonic()
        self.timing.write(self.run.work_dir / PHASES_FILE, self.started_at, ended_at)
        return Measured(
            frame=pd.concat(self.frames, ignore_index=True) if self.frames else make_frame([]),
            reports=self.reports,
            failures=self.failures,
            work_dir=self.run.work_dir,
            wall_s=ended_at - self.started_at,
            device=self.device,
            phases=self.timing.total(),
            config_phases=self.timing.configs,
            notes=self.notes,
        )


def run_parts(run: SessionRun) -> Measured:
    """The session proper: worker runs ("parts") until every config of `run` is measured or failed."""
    session = _Parts(run)
    remaining = list(run.ids)
    pipe = DeathPipe() if run.ahead is None else run.ahead.give_pipe()  # the one its worker watches
    try:
        number, parts = 0, run.settings.max_restarts + 1
        while remaining and number < parts + (1 if session.compile_in_windows else 0):  # no restart
            remaining = session.part(number, remaining, pipe)
            number += 1
    finally:
        pipe.close()
    if remaining:  # the restart budget ran out before these ran
        session.give_up(
            remaining,
            f"not run: the worker was restarted {run.settings.max_restarts} times "
            "(raise ProfileSettings.max_restarts)",
        )
    return session.measured()
