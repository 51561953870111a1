"""Nsight Systems driver: the command line, the .qdstrm import, the SQLite export."""

from __future__ import annotations

from pathlib import Path

from nsprof.drivers.base import ToolDriver
from nsprof.reports.nsys.convert import import_qdstrm
from nsprof.schema import NSPROF_DOMAIN
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import worker_command


class NsysDriver(ToolDriver):
    name = "nsys"
    suffix = ".nsys-rep"
    clean_exit_note = "nsys keeps kernels only at a clean exit"

    @classmethod
    def find(cls, required: bool = True):
        from nsprof.host import tools

        return tools.find_nsys(required=required)

    @classmethod
    def tool_notes(cls, executable: Path) -> str:
        """Where its QdstrmImporter is, and the shared libraries it lacks (then nsys leaves .qdstrm files)."""
        import subprocess

        from nsprof.host.tools import find_qdstrm_importer, on_path

        importer = find_qdstrm_importer(executable)
        notes = f"QdstrmImporter: {importer or 'not found'}"
        if importer and on_path("ldd"):
            try:
                ldd = subprocess.run(
                    [on_path("ldd"), str(importer)],
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=60,
                ).stdout
            except (OSError, subprocess.TimeoutExpired):
                ldd = ""
            missing = [ln.split()[0] for ln in ldd.splitlines() if "not found" in ln]
            if missing:
                notes += f" — missing libraries: {', '.join(missing)} (nsys will leave .qdstrm files)"
        return notes

    @classmethod
    def conditions(cls, settings: ProfileSettings) -> str:
        return "CUPTI kernel trace at the card's own clocks, caches not flushed (warm L2)"

    def build_command(self, settings: ProfileSettings, job_file: Path, report_base: Path) -> list[str]:
        # CUDA + NVTX trace only: with default CPU sampling one small run wrote a 2.2 GB
        # .qdstrm and took 2.5 min on an H200; node-level graph trace gives per-kernel rows.
        return [
            str(self.executable),
            "profile",
            "--trace",
            "cuda,nvtx",
            "--sample",
            "none",
            "--cpuctxsw",
            "none",
            "--cuda-graph-trace",
            "node",
            "--force-overwrite",
            "true",
            "--output",
            str(report_base),
            *worker_command(settings, job_file),
        ]

    # nsprof serve, as verified on the H200 with nsys 2025.3.1 (docs/serve.md): `launch` takes the
    # trace options (and refuses --sample/--cpuctxsw), `start` takes those two (and refuses --trace);
    # the launched worker survives `stop`, and each start/stop pair writes a report of its own batch.
    serves = True

    def serve_command(self, settings: ProfileSettings, serve_dir: Path, session: str) -> list[str]:
        from nsprof.worker.protocol import serve_worker_command

        return [
            str(self.executable),
            "launch",
            f"--session-new={session}",
            "--trace=cuda,nvtx",
            "--cuda-graph-trace=node",
            *serve_worker_command(settings, serve_dir),
        ]

    def _step(self, words: list[str], log, timeout_s: float) -> None:
        import subprocess

        from nsprof.errors import ToolFailed

        command = [str(self.executable), *words]
        log.write(f"==NSPROF== {' '.join(command)}\n")
        log.flush()
        try:
            # A session of its own: a Ctrl-C in the server's terminal must not cut an `nsys stop` short.
            done = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            raise ToolFailed(
                f"nsys {words[0]} did not return within {timeout_s:g} s (log: {log.name})"
            ) from None
        except OSError as exc:
            raise ToolFailed(f"nsys {words[0]} could not run: {exc}") from None
        if done.returncode != 0:
            raise ToolFailed(f"nsys {words[0]} failed with status {done.returncode} (log: {log.name})")

    def serve_start(self, session: str, report_base: Path, log) -> None:
        self._step(
            [
                "start",
                f"--session={session}",
                "--sample=none",
                "--cpuctxsw=none",
                "-o",
                str(report_base),
                "--force-overwrite=true",
            ],
            log,
            120,
        )

    def serve_stop(self, session: str, report_base: Path, log) -> None:
        self._step(["stop", f"--session={session}"], log, 300)  # 3 s on the H200; it writes the report

    def serve_shutdown(self, session: str, log) -> None:
        self._step(["shutdown", f"--session={session}", "--kill", "sigkill"], log, 120)

    def report_files(self, report_base: Path) -> list[Path]:
        return [report_base.with_suffix(suffix) for suffix in (self.suffix, ".qdstrm", ".sqlite")]

    def finish(self, report_base: Path, log: Path) -> Path | None:
        """The SQLite export of this run's report, importing a left-over .qdstrm first."""
        report = report_base.with_suffix(self.suffix)
        qdstrm = report_base.with_suffix(".qdstrm")
        if not report.exists() and qdstrm.exists():
            import_qdstrm(self.executable, qdstrm, log)
        if not report.exists():
            return None
        from nsprof.reports.nsys.convert import export_nsys_rep

        return export_nsys_rep(report, out_dir=report.parent)  # the run's own work folder

    def read(self, report: Path, settings: ProfileSettings):
        from nsprof.reports.nsys import read_nsys_sqlite

        return read_nsys_sqlite(report, domain=NSPROF_DOMAIN, **self.labels(settings))
