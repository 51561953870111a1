"""The Driver interface: what the session asks of a profiler, and the log reading all share.

A driver turns a worker job into a command line (the profiler wrapping nsprof's worker),
collects the report the run left, reads it into the tidy table, and says in one line why a
run failed. The session (nsprof.session) supervises; it never asks which profiler it runs.
"""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from pathlib import Path

from nsprof.schema import Failure
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import START_MARKER

# Log lines that name why a worker died, most specific first.
REASON_MARKERS = (
    "illegal memory access",
    "an illegal",
    "out of memory",
    "CUDA error",
    "Error",
    "error",
    "Killed",
    "Aborted",
    "Segmentation fault",
)
# How the tools and the kernel say that the disk is full.
DISK_FULL = ("No space left on device", "Disk quota exceeded", "ENOSPC")


def log_lines(log: Path) -> list[str]:
    """The log's non-blank lines, stripped; none when there is no log."""
    if not log.exists():
        return []
    return [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]


def lines_since_start(log: Path) -> list[str]:
    """The log's non-blank lines after its last config-start marker (all of it without one)."""
    if not log.exists():
        return []
    lines = log.read_text(errors="replace").splitlines()
    if any(START_MARKER in ln for ln in lines):  # what follows the marker's own line
        lines = lines[max(i for i, ln in enumerate(lines) if START_MARKER in ln) + 1 :]
    return [ln.strip() for ln in lines if ln.strip()]


# Signals that come from outside the config (a user, `timeout`, a scheduler, a closed terminal, the
# OOM killer): a worker killed by one of these lost its config (kind lost), which is measured again.
OUTSIDE_SIGNALS = ("SIGKILL", "SIGTERM", "SIGHUP", "SIGINT")


def worker_failure(log: Path, returncode: int | None, ignore_prefix: str | None = None) -> Failure:
    """Why a worker died during a config, in one line, from its log after the last config-start marker:
    a crash, or lost where a signal from outside (OUTSIDE_SIGNALS) killed it with nothing in the log.
    Lines starting with `ignore_prefix` (a profiler's own chatter) are not reasons."""
    lines = lines_since_start(log)
    for marker in REASON_MARKERS:
        for line in reversed(lines[-200:]):
            if marker in line and not (ignore_prefix and line.startswith(ignore_prefix)):
                return Failure(line[:300], "crash")
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return Failure(f"worker killed by signal {name}", "lost" if name in OUTSIDE_SIGNALS else "crash")
    # nsprof's own notes in the log (==NSPROF== phases, lock sweeps) say nothing of why it died
    own = [line for line in lines if not line.startswith("==NSPROF==")]
    return Failure(f"worker exited with status {returncode}" + (f": {own[-1][:200]}" if own else ""), "crash")


def disk_full(log: Path) -> str | None:
    """A one-line message when the profiler's log says the disk filled up, else None."""
    line = next((ln for ln in log_lines(log) if any(marker in ln for marker in DISK_FULL)), None)
    if line is None:
        return None
    return (
        f"the disk holding {log.parent} is full ({line[:200]}); free space there or pass --work-dir "
        "on another disk"
    )


class Driver(ABC):
    """One profiler (or none) under the session. Subclass, then add one line to the registry
    (nsprof.drivers.registry.register)."""

    name: str = ""
    suffix: str = ""  # the report's file suffix
    locks_gpu: bool = True  # the session holds the GPU lock while it runs
    writes_report: bool = True  # False: the worker runs bare and its status file is all there is
    # The conditions a driver cannot change: rows are labelled with these unless labels() says more.
    default_labels = {"clock_control": "none", "cache_control": "none"}
    # Whether the driver honours ProfileSettings.clock_control/cache_control (ncu does): only
    # such a truth takes a condition in validate (`ncu@free-warm`).
    controls_conditions: bool = False
    clean_exit_note: str = ""  # what a worker killed at exit costs this profiler's report, in words
    chatter_prefix: str | None = None  # the profiler's own log lines start so: never a crash's reason
    # nsprof serve (nsprof.serve): whether this profiler can keep one worker and collect one report per
    # job (the serve_* methods below), and if not, why not, in one line
    serves: bool = False
    serve_refusal: str = "this backend cannot serve"

    @classmethod
    def create(cls) -> Driver:
        """The driver ready to run: its tool found (or a ToolNotFound in one line)."""
        return cls()

    @classmethod
    def find(cls, required: bool = True):
        """The profiler's nsprof.host.tools.Tool (None: not found, or no tool to find)."""
        return None

    @classmethod
    def tool_notes(cls, executable: Path) -> str:
        """What `nsprof doctor` adds about the tool found at `executable` ("" for nothing)."""
        return ""

    @classmethod
    def labels(cls, settings: ProfileSettings) -> dict[str, str]:
        """The conditions every row this driver measures under `settings` is labelled with
        (a class method: known without the tool)."""
        return dict(cls.default_labels)

    @classmethod
    def conditions(cls, settings: ProfileSettings) -> str:
        """How this driver measures under `settings`, in words, for a table's caption."""
        return ""

    def tool_version(self) -> str:
        """The profiler's version, for the results store's key ("" when there is no tool)."""
        return ""

    @abstractmethod
    def build_command(self, settings: ProfileSettings, job_file: Path, report_base: Path) -> list[str]:
        """The argv that runs the worker on `job_file` under this profiler, writing `report_base`.*"""

    def report_files(self, report_base: Path) -> list[Path]:
        """Every file finish() may take as this run's report (or turn into it): a session never takes a
        report base under which one lies (nsprof.session.folders.claim_base), so that none an earlier
        run left is read as this one's, or lost."""
        return [report_base.with_suffix(self.suffix)] if self.suffix else []

    @abstractmethod
    def finish(self, report_base: Path, log: Path) -> Path | None:
        """The report this run left (converted if need be), or None when it left none."""

    @abstractmethod
    def read(self, report: Path, settings: ProfileSettings):
        """The report as the tidy table (nsprof.schema), labelled with labels(settings)."""

    # nsprof serve: a long-lived worker under the profiler, one collection (report) per job.
    def serve_command(self, settings: ProfileSettings, serve_dir: Path, session: str) -> list[str]:
        """The argv that starts nsprof serve's worker (serve_worker_command) under this profiler,
        as profiler session `session`, collecting nothing until serve_start."""
        raise NotImplementedError(self.serve_refusal)

    def serve_start(self, session: str, report_base: Path, log) -> None:
        """Start the collection that writes `report_base`.* (ToolFailed in one line if it fails)."""
        raise NotImplementedError(self.serve_refusal)

    def serve_stop(self, session: str, report_base: Path, log) -> None:
        """End the collection and write its report; the worker lives on."""
        raise NotImplementedError(self.serve_refusal)

    def serve_shutdown(self, session: str, log) -> None:
        """End the profiler session and its worker."""
        raise NotImplementedError(self.serve_refusal)

    def serve_identity(self) -> dict:
        """What a client's driver must share with the server's to use it (besides the backend)."""
        return {"driver": type(self).__name__, "tool": str(getattr(self, "executable", ""))}

    def crash_reason(self, log: Path, returncode: int | None) -> Failure:
        """Why the worker died during a config, in one line, with its kind (worker_failure's)."""
        return worker_failure(log, returncode, self.chatter_prefix)

    def diagnose(self, log: Path, returncode: int | None) -> str:
        """One line saying why the profiler wrote no report (or started nothing). Unlike a
        worker's crash, the profiler's own errors can come anywhere in the log."""
        return disk_full(log) or self.crash_reason(log, returncode)


class ToolDriver(Driver):
    """A driver that runs a profiler program, found by find() (ncu, nsys)."""

    def __init__(self, executable: Path) -> None:
        self.executable = Path(executable)

    @classmethod
    def create(cls) -> ToolDriver:
        return cls(cls.find().path)

    def tool_version(self) -> str:
        from nsprof.host import tools

        return tools.tool_version(self.executable)
