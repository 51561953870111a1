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
    start <cfg> | done <cfg> | fail <cfg> <json reason>
                               (<cfg> is a point id: the config id, or for a job with shapes the
                               (shape, config) pair's id, nsprof.schema.Points)
                               (an interleaved job writes start before each visit of a config, and
                               done once, for every config, after the last round)
    stopped                    nsprof asked it to stop (SIGTERM): it stopped early and cleanly
    end                        every config ran
parse_status reads exactly these; Status writes them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

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

    @property
    def points(self):
        from nsprof.schema import Points

        return Points(self.n_configs, self.n_shapes)

    def rep_numbers(self, config_id: int) -> range:
        """The rep numbers this job measures of `config_id` (a point id; its range names' r<rep>)."""
        start = int(self.first_rep.get(str(config_id), 0))
        return range(start, start + self.reps)

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
        self._handle.write(" ".join(str(p) for p in parts) + "\n")
        self._handle.flush()

    def device(self, info: dict) -> None:
        self.write("device", json.dumps(info))


@dataclass
class RunStatus:
    """What one worker run's status file says."""

    pid: int | None = None
    started: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    ended: bool = False
    stopped: bool = False  # stopped early, cleanly, because nsprof asked (it was interrupted)
    device: dict | None = None  # {"uuid", "name", ...} of the device the worker measured on
    watch: dict | None = None  # how the worker watches for nsprof's death (nsprof.worker.watch_parent)
    abort: str | None = None  # why the worker could not start (target import, CUDA init)

    @property
    def current(self) -> int | None:
        if self.started and self.started[-1] not in self.done and self.started[-1] not in self.failed:
            return self.started[-1]
        return None


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
            elif word == "done":
                status.done.append(int(rest))
            elif word == "fail":
                cfg, _, reason = rest.partition(" ")
                status.failed[int(cfg)] = _json_or_text(reason)
            elif word == "end":
                status.ended = True
            elif word == "stopped":
                status.stopped = True
            elif word in ("device", "watch"):
                value = _json_or_text(rest)
                setattr(status, word, value if isinstance(value, dict) else None)
            elif word == "abort":
                status.abort = str(_json_or_text(rest))
        except ValueError:
            continue  # not a line this protocol writes
    return status


def worker_command(settings, job_file: Path) -> list[str]:
    """The command line that runs the worker on `job_file` with settings.python."""
    return [settings.python, "-m", "nsprof.worker", str(job_file)]
