"""The worker's protocol, both sides: the job nsprof writes, the status lines the worker writes
back, their reader, and the command line that starts a worker.

The program the profilers launch is `python -m nsprof.worker JOB.json` (nsprof.worker.program).
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
                               beside its own time.monotonic() (run_phases).
parse_status reads exactly these; Status writes them.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
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
    # Compile each point in this worker, just before its window (its start line), writing `wait <id>`
    # lines meanwhile: a served job's (nsprof serve: its warm worker's imports are paid), and the
    # standalone rest of a served session's. Bounded by compile_timeout_s per point.
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
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def read(cls, path: Path) -> Job:
        return cls(**json.loads(Path(path).read_text()))


class Status:
    def __init__(self, path: str) -> None:
        self._handle = open(path, "a", buffering=1, encoding="utf-8")

    def write(self, *parts) -> None:
        """A status line, and the `at` line saying when it was written (one write, one flush)."""
        now = time.monotonic()
        line = " ".join(str(p) for p in parts)
        self._handle.write(
            f"{line}\nat {now:.6f} {line[:120]}\n" if parts and parts[0] != "at" else line + "\n"
        )
        self._handle.flush()

    def mark(self, *event, at: float | None = None) -> None:
        """An `at` line alone: when `event` (`process`, `target`, `built <cfg>`) happened (default: now)."""
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

    def time_of(self, word: str, arg: str | None = None, last: bool = False) -> float | None:
        """When the first (or last) `word` [`arg`] line or mark was written; None if never."""
        found = [t for t, w, a in self.times if w == word and (arg is None or a == arg)]
        return (found[-1] if last else found[0]) if found else None

    @property
    def current(self) -> int | None:
        """The config running now: the last started, unless it ended or the worker has moved on
        to wait for the next config's compile."""
        if self.waiting:
            return None
        if self.started and self.started[-1] not in self.done and self.started[-1] not in self.failed:
            return self.started[-1]
        return None


class Progress:
    """What a follower of a worker's status file tells its `notify(event, id, detail)` (nsprof.session,
    nsprof.serve_client): each config's first `done` line once ("done", id, ""), each new `fail` once
    ("fail", id, its Failure). A config is done once however many runs say so: ncu's application replay
    runs the worker once per pass, each run appending to the one status file."""

    def __init__(self, notify=None) -> None:
        self.notify = notify
        self.seen = RunStatus()

    def tell(self, status: RunStatus) -> RunStatus:
        """Notify what `status` says beyond the last one told; `status`."""
        if self.notify is not None:
            told = set(self.seen.done)
            for cfg in dict.fromkeys(status.done[len(self.seen.done) :]):
                if cfg not in told:
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


_CONFIG_WORDS = (
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
    """Read a worker's status file (the protocol is in this module's docstring)."""
    status = RunStatus()
    lines = text.split("\n")
    for line in lines[:-1]:  # the last piece has no newline yet: still being written
        word, _, rest = line.partition(" ")
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
                status.times.append((float(t), what, arg.split(" ", 1)[0] if what in _CONFIG_WORDS else arg))
        except ValueError:
            continue  # not a line this protocol writes
    return status


# The phases of one worker run, in order (run_phases; nsprof.session.timing adds nsprof's own after it).
WORKER_RUN_PHASES = (
    "tool_start",
    "worker_start",
    "target_import",
    "cuda_init",
    "compile_wait",
    "build",
    "measure",
    "between",
    "worker_exit",
    "tool_exit",
)


def run_phases(
    status: RunStatus, launched: float, worker_gone: float | None, exited: float
) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    """Where one worker run's time went: ({phase: s}, {config_id: {"build": s, "measure": s}}).

    From nsprof's own times (`launched`: just before the profiler's exec; `worker_gone`: when it
    first saw the worker gone, None if never; `exited`: when it saw the profiler exit) and the
    worker's `at` lines, all on CLOCK_MONOTONIC. Phases, each ending at its boundary:
        tool_start     the profiler's exec until the worker process began (`process`)
        worker_start   until its first status line (`pid`): Python's start, nsprof's worker imports
        target_import  until the target was imported (`target`)
        cuda_init      until the device line: the device's imports and its CUDA context
        configs        until the worker's last line, split into build (each config's start line
                       to its build's return), measure (from then to the config's next line:
                       warm-up, graph capture, the reps' ranges; every visit of an interleaved job)
                       and between (the rest: status lines, dropping a config's inputs)
        worker_exit    until nsprof saw the worker gone (Python's exit; nsys flushes its CUPTI buffers)
        tool_exit      until nsprof saw the profiler exit (the report written)
    A boundary not seen (a worker that aborted or crashed) gives its time to the next phase seen;
    boundaries are clamped to be in order, so the phases sum to exited - launched. nsprof sees
    the worker gone and the profiler exit by polling: those two are late by up to its poll interval.
    """
    phases: dict[str, float] = {}
    previous = launched
    for name, at in _boundaries(status, worker_gone, exited):
        if at is None:
            continue
        at = min(max(at, previous), max(exited, previous))
        phases[name] = phases.get(name, 0.0) + at - previous
        previous = at
    configs = _config_times(status.times)
    _split_config_window(phases, configs)
    return {name: phases[name] for name in WORKER_RUN_PHASES if name in phases}, configs


def _boundaries(
    status: RunStatus, worker_gone: float | None, exited: float
) -> list[tuple[str, float | None]]:
    """run_phases' (phase, time of its end boundary or None where not seen), in order."""
    worker_last = status.times[-1][0] if status.times else None
    # The config stretch opens at the first config line of any kind: a start, or a wait for the
    # compile step (or a config that failed to compile) before any start line.
    opened = [t for t, word, _ in status.times if word in ("start", "wait", "fail")]
    first_start = min(opened) if opened else None
    starting = [
        ("tool_start", status.time_of("process")),
        ("worker_start", status.time_of("pid")),
        ("target_import", status.time_of("target")),
        ("cuda_init", status.time_of("device")),
    ]
    if first_start is None:
        # No config began (the target did not import, CUDA did not start): the worker's last line
        # ends the phase it was in.
        seen = [i for i, (_, at) in enumerate(starting) if at is not None]
        missing = seen[-1] + 1 if seen else None
        if missing is not None and missing < len(starting) and worker_last is not None:
            starting[missing] = (starting[missing][0], worker_last)
        running = []
    else:
        running = [("between", first_start), ("configs", worker_last)]
    return [*starting, *running, ("worker_exit", worker_gone), ("tool_exit", exited)]


def _split_config_window(phases: dict[str, float], configs: dict[int, dict[str, float]]) -> None:
    """Replace the "configs" phase by the configs' build, measure and compile_wait times, the
    rest of the window going to "between"."""
    window = phases.pop("configs", 0.0)
    if "between" in phases or window:
        build = sum(c.get("build", 0.0) for c in configs.values())
        measure = sum(c.get("measure", 0.0) for c in configs.values())
        wait = sum(c.get("compile_wait", 0.0) for c in configs.values())
        # Worker times inside the config window: they fit it unless a boundary was clamped.
        scale = min(1.0, window / (build + measure + wait)) if build + measure + wait > window else 1.0
        phases["build"], phases["measure"] = build * scale, measure * scale
        if wait:
            phases["compile_wait"] = wait * scale
        phases["between"] = phases.get("between", 0.0) + window - (build + measure + wait) * scale


def _config_times(times: list[tuple[float, str, str]]) -> dict[int, dict[str, float]]:
    """Per config, from the worker's `at` lines: build (first start line to its `built` mark, or to
    its fail line), measure (from `built`, and from each later start line, to the next line) and,
    where the compile step ran beside the session, compile_wait (its first `wait` line to its start
    or fail line: the worker waiting for the compiler)."""
    configs: dict[int, dict[str, float]] = {}
    building: dict[int, float] = {}
    waiting: dict[int, float] = {}
    started: set[int] = set()
    for index, (t, word, arg) in enumerate(times):
        if word not in _CONFIG_WORDS or not arg.isdigit():
            continue
        config_id = int(arg)
        after = times[index + 1][0] if index + 1 < len(times) else t
        if word == "wait":
            waiting.setdefault(config_id, t)
            continue
        entry = configs.setdefault(config_id, {"build": 0.0, "measure": 0.0})
        if config_id in waiting and word in ("start", "fail"):
            entry["compile_wait"] = max(0.0, t - waiting.pop(config_id))
        if word == "start" and config_id not in started:
            started.add(config_id)
            building[config_id] = t
        elif word == "start":
            entry["measure"] += max(0.0, after - t)  # a later visit (an interleaved job)
        elif word == "built":
            entry["build"] += max(0.0, t - building.pop(config_id, t))
            entry["measure"] += max(0.0, after - t)
        elif word == "fail" and config_id in building:
            entry["build"] += max(0.0, t - building.pop(config_id))
    return configs


def worker_command(settings, job_file: Path) -> list[str]:
    """The command line that runs the worker on `job_file` with settings.python."""
    return [settings.python, "-m", "nsprof.worker", str(job_file)]


# What a process reads only as it starts (CUDA, the loader, Python, torch's allocator): a served job cannot
# be given these, so a client uses only a server whose worker started with the same (nsprof.serve_client).
AT_START = ("CUDA_", "LD_", "PYTHON", "PYTORCH_", "TORCH_", "NVIDIA_", "NSYS_", "CUPTI_", "NCCL_")


def serve_worker_command(settings, serve_dir: Path) -> list[str]:
    """The command line of nsprof serve's long-lived worker (nsprof.worker.serving) with settings.python."""
    return [settings.python, "-m", "nsprof.worker", "--serve", str(serve_dir)]
