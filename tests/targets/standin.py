"""Stand-in profilers for the session tests: drivers whose "report" is derived from the worker's
status file, run through real child processes (no GPU, no Nsight tools).

A report holds `kernels` kernel rows per (config, mode, rep) of every config the worker
finished. `lossy=True` behaves like nsys: the report holds nothing unless the worker exited
cleanly, since CUPTI buffers are flushed only then: by itself, not by a signal (read from the
stand-in profiler's exit file), and with `end` or `stopped` last in its status file. Without
it the report is like ncu's, written as the kernels run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nsprof.drivers.base import Driver
from nsprof.errors import ReportError
from nsprof.schema import make_frame
from nsprof.worker.protocol import parse_status, worker_command

FAKE_PROFILER = Path(__file__).parent / "fake_profiler.py"


class StatusReportDriver(Driver):
    name = "standin"
    suffix = ".standin.json"

    def __init__(self, kernels: int = 2, lossy: bool = False, profiler_flags: list[str] | None = None) -> None:
        self.kernels = kernels
        self.lossy = lossy
        self.profiler_flags = profiler_flags  # None: no profiler process, the worker runs bare

    def build_command(self, settings, job_file, report_base):
        command = worker_command(settings, job_file)
        if self.profiler_flags is None:
            return command
        exit_file = report_base.with_suffix(".exit")
        return [sys.executable, str(FAKE_PROFILER), *self.profiler_flags, "--exit-file", str(exit_file), "--",
                *command]

    def finish(self, report_base, log):
        status = parse_status(report_base.with_suffix(".status").read_text())
        exit_file = report_base.with_suffix(".exit")
        clean = status.ended or status.stopped
        if self.profiler_flags is not None:
            clean = clean and exit_file.exists() and int(exit_file.read_text() or -1) >= 0
        done = status.done if clean or not self.lossy else []
        report = report_base.with_suffix(self.suffix)
        report.write_text(json.dumps(done))
        return report

    def read(self, report, settings):
        done = json.loads(Path(report).read_text())
        if not done:
            raise ReportError(f"{Path(report).name}: no CUDA kernel table")
        return make_frame([{"source": "standin", "config_id": c, "mode": mode, "rep": rep,
                            "kernel": f"k{k}", "duration_ns": 1000.0 + c}
                           for c in done for mode in settings.modes for rep in range(settings.reps)
                           for k in range(self.kernels)])
