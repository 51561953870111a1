"""Nsight Compute driver: the command line, and reading its report back."""

from __future__ import annotations

from pathlib import Path

from nsprof.schema import NSPROF_DOMAIN
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import worker_command

METRICS = ("gpu__time_duration.sum", "gpc__cycles_elapsed.max", "gpc__cycles_elapsed.avg.per_second")


class NcuDriver:
    name = "ncu"
    suffix = ".ncu-rep"

    def __init__(self, executable: Path) -> None:
        self.executable = Path(executable)

    def build_command(self, settings: ProfileSettings, job_file: Path, report_base: Path) -> list[str]:
        # Only kernels inside nsprof's outer range are profiled: warm-up, compilation and
        # graph capture happen outside it and cost nothing.
        return [
            str(self.executable),
            "--nvtx", "--nvtx-include", f"{NSPROF_DOMAIN}@{NSPROF_DOMAIN}/",
            "--metrics", ",".join(METRICS),
            "--clock-control", settings.clock_control,
            "--cache-control", settings.cache_control,
            "--graph-profiling", settings.graph_profiling,
            "--force-overwrite", "--export", str(report_base),
            *worker_command(settings, job_file),
        ]

    def finish(self, report_base: Path, log: Path) -> Path | None:
        report = report_base.with_suffix(self.suffix)
        return report if report.exists() and report.stat().st_size > 0 else None

    def read(self, report: Path, settings: ProfileSettings):
        from nsprof.reports.ncu_rep import read_ncu_rep

        return read_ncu_rep(report, domain=NSPROF_DOMAIN, **settings.labels)
