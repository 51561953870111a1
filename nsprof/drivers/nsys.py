"""Nsight Systems driver: the command line, the .qdstrm import, the SQLite export."""

from __future__ import annotations

from pathlib import Path

from nsprof.drivers.base import ProfileSettings, worker_command
from nsprof.errors import ToolFailed
from nsprof.schema import NSPROF_DOMAIN


class NsysDriver:
    name = "nsys"
    suffix = ".nsys-rep"

    def __init__(self, executable: Path) -> None:
        self.executable = Path(executable)

    def build_command(self, settings: ProfileSettings, job_file: Path, report_base: Path) -> list[str]:
        # CUDA + NVTX trace only: with default CPU sampling one small run wrote a 2.2 GB
        # .qdstrm and took minutes (DESIGN.md); node-level graph trace gives per-kernel rows.
        return [
            str(self.executable), "profile",
            "--trace", "cuda,nvtx", "--sample", "none", "--cpuctxsw", "none",
            "--cuda-graph-trace", "node",
            "--force-overwrite", "true", "--output", str(report_base),
            *worker_command(settings, job_file),
        ]

    def finish(self, report_base: Path, log: Path) -> Path | None:
        """The SQLite export of this run's report, importing a left-over .qdstrm first."""
        report = report_base.with_suffix(self.suffix)
        qdstrm = report_base.with_suffix(".qdstrm")
        if not report.exists() and qdstrm.exists():
            import_qdstrm(self.executable, qdstrm, log)
        if not report.exists():
            return None
        from nsprof.reports.nsys import export_nsys_rep

        return export_nsys_rep(report)

    def read(self, report: Path, settings: ProfileSettings):
        from nsprof.reports.nsys import read_nsys_sqlite

        return read_nsys_sqlite(report, domain=NSPROF_DOMAIN, **settings.labels)


def import_qdstrm(nsys: Path, qdstrm: Path, log: Path) -> Path:
    """Run QdstrmImporter on a .qdstrm that nsys could not turn into a .nsys-rep itself."""
    import subprocess

    from nsprof.drivers.tools import find_qdstrm_importer

    importer = find_qdstrm_importer(nsys)
    if importer is None:
        raise ToolFailed(f"nsys left {qdstrm.name} and no .nsys-rep, and QdstrmImporter was not found near {nsys}")
    with open(log, "a") as handle:
        proc = subprocess.run([str(importer), "-i", str(qdstrm)], stdout=handle, stderr=subprocess.STDOUT)
    report = qdstrm.with_suffix(".nsys-rep")
    if proc.returncode != 0 or not report.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        missing = "".join(t for t in tail if ".so" in t)
        hint = f" (missing library: {missing.strip()})" if missing else ""
        raise ToolFailed(f"QdstrmImporter failed on {qdstrm.name}{hint}; log: {log}")
    return report
