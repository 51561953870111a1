"""The worker's protocol, both sides: the job nsprof writes, the status lines the worker writes
back, their reader, and the command line that starts a worker.

The program the profilers launch is `python -m nsprof.worker JOB.json` (nsprof.worker.program). A worker
started ahead of its job finds ahead_file(JOB.json) there: it imports the target, then waits for JOB.json
and the GPU locks nsprof sends it (Job.locks_fd); SIGTERM stops it while it waits, as at any time.
Progress goes to the job's status file, one flushed line per event, so that nsprof can draw a
progress bar, enforce per-config timeouts and restart after a crash:
    pid <pid>                  first, before anything else
    watch <json>               how it watches for nsprof's death: {"pipe": bool, "parent": pid, ...}
    device <json>              after CUDA init: {"uuid": "GPU-...", "name": ..., "index": n};
                               {"uuid": "", "name": "cpu"} for a cpu space
    abort <json reason>        the target could not be loaded (or CUDA not initialised)
    changed <json reason>      before `abort`: the target loaded is not the one nsprof read (Job.expect):
                               it was edited meanwhile, and nothing of it is measured
    start <cfg> | done <cfg> | fail <cfg> <kind> <json reason>
                               (<kind>: nsprof.schema.FAILURE_KINDS, what the worker knows the cause
                               was; a fail line without one reads as a crash)
                               (<cfg> is a point id: the config id, or for a job with shapes the
                               (shape, config) pair's id, nsprof.schema.Points)
                               (an interleaved job writes start before each visit of a config, and
                               done once, for every config, after the last round)
    wait <cfg>                 each second while the worker waits for that config's compile, before
                               its start: no config runs meanwhile
    served <json>              second, in a job run by nsprof serve's long-lived worker
                               (nsprof.worker.serving): {"job": n, "server": pid}
    stopped                    nsprof asked it to stop (SIGTERM): it stopped early and cleanly
    end                        every config ran
    at <t> <word> [<arg>]      when (t: the worker's time.monotonic(), seconds) the line `<word> [<arg>]`
                               was written: Status.write follows every line above with one. Also
                               for events with no line of their own (Status.mark): `process` (the
                               worker process began, from /proc/self/stat), `target` (the target
                               imported), `built <cfg>` (a config's build returned). CLOCK_MONOTONIC
                               is one clock for every process of a host, so nsprof reads these
                               beside its own time.monotonic() (nsprof.worker.phases).
parse_status reads exactly these; Status writes them. A file may hold several runs of the worker, each
from its `pid` line: ncu's application replay runs it once per pass (parse_status says how they merge).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from nsprof.schema import FAILURE_KINDS, Failure

EXIT_CONTEXT_LOST = 3
EXIT_STOPPED = 4  # nsprof asked it to stop (it was interrupted); it stopped cleanly
EXIT_PARENT_GONE = 5  # nsprof died (or, where its pipe did not arrive, the profiler did)
START_MARKER = "==NSPROF== start config"  # in the log, so a crash's reason is read after it


@dataclass
class Job:
    target: str
    config_ids: list[int]
    status: str
    modes: list[str] = field(default_factory=lambda: ["direct", "graph"])
    reps: int = 5
    warmup: int = 3
    # task "ranges": launches inside NVTX ranges for a profiler; task "timers": fast
    # in-process timers, one JSON line per config × method appended to `results`.
    task: str = "ranges"
    timers: list[str] = field(default_factory=list)
    timer_reps: int = 100
    results: str = ""
    # nsprof's death pipe: the read end's descriptor number and the pipe's inode, so that a
    # descriptor the profiler did not pass on (and that now names something else) is not taken
    # for it. -1: nothing to watch (the worker run by hand).
    watch_fd: int = -1
    watch_inode: int = 0
    # A worker started ahead of its job: the socket on which nsprof sends it the GPU locks it holds (their
    # descriptors, SCM_RIGHTS) as it hands the job over, so that the lock stays held while the worker, or
    # what it starts, lives, as a worker launched with them does. -1: none.
    locks_fd: int = -1
    locks_inode: int = 0  # that socket's inode: a descriptor that names something else is not it
    # Adaptive reps (nsprof.adaptive): the configs built first, then `reps` rounds over them, each
    # round one visit per config in job order (warm-up outside every range, then one rep of each
    # mode). A config's reps are numbered from first_rep[str(id)] (0 where absent), so that its
    # range names continue after the reps it has.
    interleave: bool = False
    first_rep: dict = field(default_factory=dict)
    # A target with shapes: config_ids (and first_rep's keys, and the status lines' ids) are point
    # ids of nsprof.schema.Points(n_configs, n_shapes), and the worker checks that the target still
    # has this many configs and shapes before it measures anything. 0: a target without shapes.
    n_configs: int = 0
    n_shapes: int = 0
    # The folder of the compile step running beside this session (nsprof.worker.compile): each
    # point's build waits for its marker there, before its start line, writing `wait <id>` lines
    # meanwhile. "": nothing to compile, or compile_here.
    compiled: str = ""
    # Compile every point in this worker, in a pool of threads before the first window, writing
    # `wait <id>` lines meanwhile: a served job's (nsprof serve: its warm worker's imports are paid),
    # the standalone rest of a served session's, and every job of a Space.compile_in_worker. Bounded
    # by compile_timeout_s per point.
    compile_here: bool = False
    compile_timeout_s: float = 600.0  # ProfileSettings.compile_timeout_s
    # What nsprof read of the target (nsprof.space.Space.as_read: each config's canonical JSON, the
    # shapes', the source's fingerprint), under which it keys what this job measures: the worker refuses
    # a target that differs (a `changed` line) before it measures anything. {}: nothing to check.
    expect: dict = field(default_factory=dict)
    # Rep r is preceded by an L2 flush (the cold timers' own, nsprof.timers.base.Flusher), outside every
    # range, when flushes[r % len(flushes)]; []: no rep is (ProfileSettings.flushes).
    flushes: list = field(default_factory=list)

    @property
    def points(self):
        from nsprof.schema import Points

        return Points(self.n_configs, self.n_shapes)

    def rep_numbers(self, config_id: int) -> range:
        """The rep numbers this job measures of `config_id` (a point id; its range names' r<rep>)."""
        start = int(self.first_rep.get(str(config_id), 0))
        return range(start, start + self.reps)

    def flushed(self, rep: int) -> bool:
        """Whether rep number `rep` follows an L2 flush."""
        return bool(self.flushes) and bool(self.flushes[rep % len(self.flushes)])

    def write(self, path: Path) -> Path:
        """Written whole or not at all (a worker started ahead takes the file as soon as it exists)."""
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(asdict(self), indent=1))
        partial.replace(path)
        return path

    @classmethod
    def read(cls, path: Path) -> Job:
        return cls(**json.loads(Path(path).read_text()))


class JobStopped(BaseException):
    """A served job's client asked to stop it (Status.stop_file): raised where the next config's window, or
    the wait for its compiles, would open, so the configs done stay whole and the worker serves on. A
    BaseException, so that no config's `except Exception` records it as that config's failure."""


class Status:
    def __init__(self, path: str) -> None:
        self._handle = open(path, "a", buffering=1, encoding="utf-8")
        self.stop_file: Path | None = None  # a served job's: once it exists, JobStopped

    def write(self, *parts) -> None:
        """A status line, and the `at` line saying when it was written (one write, one flush); JobStopped
        instead of a line that would open a window or a compile wait once the stop file exists."""
        if self.stop_file is not None and parts and parts[0] in ("start", "wait") and self.stop_file.exists():
            raise JobStopped
        now = time.monotonic()
        line = " ".join(str(p) for p in parts)
        self._handle.write(
            f"{line}\nat {now:.6f} {line[:120]}\n" if parts and parts[0] != "at" else line + "\n"
        )
        self._handle.flush()

    def mark(self, *event, at: float | None = None) -> None:
        """An `at` line alone: when `event` (`process`, `target`, `job`: a worker started ahead took its
        job, `built <cfg>`) happened (default: now)."""
        now = time.monotonic() if at is None else at
        self._handle.write(f"at {now:.6f} {' '.join(str(p) for p in event)}\n")
        self._handle.flush()

    def fail(self, config_id: int, reason: str, kind: str) -> None:
        """A `fail` line: the config failed for good in this worker, of `kind` (nsprof.schema.FAILURE_KINDS)."""
        self.write("fail", config_id, kind, json.dumps(str(reason)))

    def device(self, info: dict) -> None:
        self.write("device", json.dumps(info))

    def close(self) -> None:
        self._handle.close()


@dataclass
class RunStatus:
    """What one worker run's status file says."""

    pid: int | None = None
    started: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)  # config -> nsprof.schema.Failure
    ended: bool = False
    stopped: bool = False  # stopped early, cleanly, because nsprof asked (it was interrupted)
    device: dict | None = None  # {"uuid", "name", ...} of the device the worker measured on
    watch: dict | None = None  # how the worker watches for nsprof's death (nsprof.worker.watch_parent)
    abort: str | None = None  # why the worker could not start (target import, CUDA init)
    changed: str | None = None  # why the target loaded is not the one nsprof read (then abort says so too)
    served: dict | None = None  # {"job": n, "server": pid}: run by nsprof serve's worker (its n-th job)
    # a `wait` line came after the last start: the worker waits for a config's compile, between
    # configs (in an interleaved job the configs it started are not done yet, and not running)
    waiting: bool = False
    # (t, word, arg) of every `at` line, in file order: when each line was written, and the marks
    times: list[tuple[float, str, str]] = field(default_factory=list)
    # where the file holds several runs (parse_status), the last one as it wrote it: `current` is its
    run: RunStatus | None = None

    def time_of(self, word: str) -> float | None:
        """When the first `word` line or mark was written; None if never."""
        return next((t for t, w, _ in self.times if w == word), None)

    @property
    def current(self) -> int | None:
        """The config running now: the last started, unless it ended or the worker has moved on
        to wait for the next config's compile."""
        if self.run is not None:
            return self.run.current
        if self.waiting:
            return None
        if self.started and self.started[-1] not in self.done and self.started[-1] not in self.failed:
            return self.started[-1]
        return None


class Progress:
    """What a follower of a worker's status file tells its `notify(event, id, detail)` (nsprof.session,
    nsprof.serve_client): each config once, when the status first says it is done ("done", id, ""), each
    new `fail` once ("fail", id, its Failure). Where the worker runs once per pass (ncu's application
    replay, parse_status), a config is told done after the first run; a later run may still fail it."""

    def __init__(self, notify=None) -> None:
        self.notify = notify
        self.seen = RunStatus()
        self._told_done: set[int] = set()

    def tell(self, status: RunStatus) -> RunStatus:
        """Notify what `status` says beyond what was told; `status`."""
        if self.notify is not None:
            for cfg in status.done:
                if cfg not in self._told_done:
                    self._told_done.add(cfg)
                    self.notify("done", cfg, "")
            for cfg in status.failed:
                if cfg not in self.seen.failed:
                    self.notify("fail", cfg, status.failed[cfg])
        self.seen = status
        return status


class Bounds:
    """The bounds a follower of a worker's status file keeps (nsprof.session.supervise.follow): a
    config may run `timeout_s` from each of its start lines (an interleaved job has several);
    outside a config the worker may go `bound_s` without a new status line. The worker's `at`
    marks only time what it does: they are no progress."""

    def __init__(self, timeout_s: float, bound_s: float, now: float) -> None:
        self.timeout_s, self.bound_s = timeout_s, bound_s
        self._seen = RunStatus()
        self._lines = -1
        self._current_since = self._last_line_at = now

    def passed(self, text: str, status: RunStatus, now: float) -> str | None:
        """After reading `text` (parsed: `status`) at `now`: "timeout" when the current config ran
        past its window, "stalled" when no config is current and no line came for bound_s."""
        if status.current != self._seen.current or len(status.started) != len(self._seen.started):
            self._current_since = now
        lines = sum(1 for line in text.splitlines() if not line.startswith("at "))
        if lines != self._lines:
            self._lines, self._last_line_at = lines, now
        self._seen = status
        if status.current is not None and now - self._current_since > self.timeout_s:
            return "timeout"
        if status.current is None and now - self._last_line_at > self.bound_s:
            return "stalled"
        return None


CONFIG_WORDS = (
    "start",
    "built",
    "done",
    "fail",
    "wait",
)  # their argument is a config id (then, maybe, more)


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_status(text: str) -> RunStatus:
    """Read a worker's status file (the protocol is in this module's docstring). Each `pid` line after
    the first begins another run of the worker in the same file (ncu's application replay runs it once
    per pass): see _merged."""
    runs = [RunStatus()]
    lines = text.split("\n")
    for line in lines[:-1]:  # the last piece has no newline yet: still being written
        word, _, rest = line.partition(" ")
        if word == "pid" and rest.strip().isdigit() and runs[-1].pid is not None:
            runs.append(RunStatus())
        status = runs[-1]
        try:
            if word == "pid" and rest.strip().isdigit():
                status.pid = int(rest)
            elif word == "start":
                status.started.append(int(rest))
                status.waiting = False
            elif word == "wait":
                int(rest.split(" ", 1)[0])  # a config id, else not this protocol's line
                status.waiting = True
            elif word == "done":
                status.done.append(int(rest))
            elif word == "fail":
                cfg, _, reason = rest.partition(" ")
                kind, _, after = reason.partition(" ")
                kind, reason = (kind, after) if kind in FAILURE_KINDS else ("crash", reason)
                status.failed[int(cfg)] = Failure(str(_json_or_text(reason)), kind)
            elif word == "end":
                status.ended = True
            elif word == "stopped":
                status.stopped = True
            elif word in ("device", "watch", "served"):
                value = _json_or_text(rest)
                setattr(status, word, value if isinstance(value, dict) else None)
            elif word in ("abort", "changed"):
                setattr(status, word, str(_json_or_text(rest)))
            elif word == "at":
                t, _, event = rest.partition(" ")
                what, _, arg = event.partition(" ")
                status.times.append((float(t), what, arg.split(" ", 1)[0] if what in CONFIG_WORDS else arg))
        except ValueError:
            continue  # not a line this protocol writes
    return _merged(runs)


def _merged(runs: list[RunStatus]) -> RunStatus:
    """The runs of one status file as one: the last run's state (its pid, the config it is on, whether
    it ended, its times: nsprof.worker.phases counts the earlier runs as the profiler's start); a config
    done once every run so far finished it, and failed once any run failed it or died on it (the first
    reason). A crash, hang or failure in a later pass is then that config's, and the configs that pass
    did not reach are measured again."""
    last = runs[-1]
    if len(runs) == 1:
        return last
    last = replace(last, run=last)
    failed: dict = {}
    for number, run in enumerate(runs, 1):
        failed.update({c: why for c, why in run.failed.items() if c not in failed})
        if run is not last.run and not (run.ended or run.stopped) and run.current is not None:
            # the profiler went on to its next pass after this run died on a config
            why = f"the worker died on it in its run {number} of the profiler's replay (a run per pass)"
            failed.setdefault(run.current, Failure(why, "crash"))
    everywhere = set.intersection(*(set(run.done) for run in runs))
    last.done = [c for c in dict.fromkeys(runs[0].done) if c in everywhere and c not in failed]
    last.failed = failed
    return last


def ahead_file(job_file: Path) -> Path:
    """Where a worker started ahead of its job (nsprof.session.ahead) finds what it may do before the job
    comes: a Job naming the target, the status file, nsprof's death pipe and the lock channel, no config."""
    return job_file.with_name(job_file.name + ".ahead")


def worker_command(settings, job_file: Path) -> list[str]:
    """The command line that runs the worker on `job_file` with settings.python."""
    from nsprof.host.children import python_module

    return python_module(settings.python, "nsprof.worker", str(job_file))


# What a process reads only as it starts (CUDA, the loader, Python, torch's allocator): a served job cannot
# be given these, so a client uses only a server whose worker started with the same (nsprof.serve_client).
AT_START = ("CUDA_", "LD_", "PYTHON", "PYTORCH_", "TORCH_", "NVIDIA_", "NSYS_", "CUPTI_", "NCCL_")


def serve_worker_command(settings, serve_dir: Path) -> list[str]:
    """The command line of nsprof serve's long-lived worker (nsprof.worker.serving) with settings.python."""
    from nsprof.host.children import python_module

    return python_module(settings.python, "nsprof.worker", "--serve", str(serve_dir))
