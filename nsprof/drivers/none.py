"""No profiler: the worker runs bare. For the fast timers' worker, dry runs and session tests."""

from __future__ import annotations

from pathlib import Path

from nsprof.drivers.base import Driver
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import worker_command


class PlainDriver(Driver):
    name = "none"
    suffix = ""
    writes_report = False

    def build_command(self, settings: ProfileSettings, job_file: Path, report_base: Path) -> list[str]:
        return worker_command(settings, job_file)

    def finish(self, report_base: Path, log: Path) -> Path | None:
        return None

    def read(self, report: Path, settings: ProfileSettings):
        raise NotImplementedError("the plain driver writes no report")
