"""Nsight Compute driver: the command line, reading its report back, and its error lines."""

from __future__ import annotations

from pathlib import Path

from nsprof.drivers.base import ToolDriver, disk_full, lines_since_start, log_lines, worker_failure
from nsprof.schema import NSPROF_DOMAIN, Failure
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import worker_command

METRICS = ("gpu__time_duration.sum", "gpc__cycles_elapsed.max", "gpc__cycles_elapsed.avg.per_second")
# ProfileSettings.l2_hit_rate: the duration and the L2 hit rate alone, replaying the whole program once per
# pass (3 passes on the H200). ncu's kernel replay saves every buffer the kernel can reach before its first
# pass (1.2 GB in scripts/probe_ncu_l2_replay.py's program, the flush buffer among them), which refills L2
# after the worker's own flush; a program run again saves nothing, so its kernels meet L2 as the worker
# left it. (METRICS take one pass: nothing is saved.)
L2_METRICS = ("gpu__time_duration.sum", "lts__t_sector_hit_rate.pct")

PERMISSION_FIX = (
    "profiling counters are not permitted for this user (ERR_NVGPUCTRPERM): run as root, "
    "or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
    "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
)


class NcuDriver(ToolDriver):
    name = "ncu"
    suffix = ".ncu-rep"
    chatter_prefix = "==PROF=="
    controls_conditions = True
    # Verified on the H200 with ncu 2025.3.1 (docs/serve.md): attach mode cannot serve jobs.
    serve_refusal = (
        "ncu cannot serve: ncu 2025.3.1's --mode attach refuses --nvtx (which nsprof's ranges need), "
        "an attach did not end after --launch-count, and a second attach failed (docs/serve.md); "
        "use --backend nsys"
    )

    @classmethod
    def find(cls, required: bool = True):
        from nsprof.host import tools

        return tools.find_ncu(required=required)

    @classmethod
    def labels(cls, settings: ProfileSettings) -> dict[str, str]:
        return {"clock_control": settings.clock_control, "cache_control": settings.cache_control}

    @classmethod
    def conditions(cls, settings: ProfileSettings) -> str:
        clocks = "clocks locked to base" if settings.clock_control == "base" else "clocks free"
        return f"{clocks}, caches {'flushed' if settings.cache_control == 'all' else 'not flushed'}"

    def build_command(self, settings: ProfileSettings, job_file: Path, report_base: Path) -> list[str]:
        # Only kernels inside nsprof's outer range are profiled: warm-up, compilation and
        # graph capture happen outside it and cost nothing.
        return [
            str(self.executable),
            "--nvtx",
            "--nvtx-include",
            f"{NSPROF_DOMAIN}@{NSPROF_DOMAIN}/",
            "--metrics",
            ",".join(L2_METRICS if settings.l2_hit_rate else METRICS),
            "--clock-control",
            settings.clock_control,
            "--cache-control",
            settings.cache_control,
            "--graph-profiling",
            settings.graph_profiling,
            *(["--replay-mode", "application"] if settings.l2_hit_rate else []),
            "--force-overwrite",
            "--export",
            str(report_base),
            *worker_command(settings, job_file),
        ]

    def finish(self, report_base: Path, log: Path) -> Path | None:
        report = report_base.with_suffix(self.suffix)
        return report if report.exists() and report.stat().st_size > 0 else None

    def read(self, report: Path, settings: ProfileSettings):
        from nsprof.reports.ncu_rep import read_ncu_rep

        return read_ncu_rep(report, domain=NSPROF_DOMAIN, **self.labels(settings))

    def crash_reason(self, log: Path, returncode: int | None) -> Failure:
        if any("ERR_NVGPUCTRPERM" in line for line in lines_since_start(log)):
            return Failure(PERMISSION_FIX, "tool")
        return worker_failure(log, returncode, self.chatter_prefix)

    def diagnose(self, log: Path, returncode: int | None) -> str:
        lines = log_lines(log)
        if any("ERR_NVGPUCTRPERM" in line for line in lines):
            return PERMISSION_FIX
        full = disk_full(log)
        if full:
            return full
        errors = [line for line in lines if line.startswith("==ERROR==")]
        if errors:
            return errors[-1][:300]
        return self.crash_reason(log, returncode)
