"""nsys's format conversions: .qdstrm -> .nsys-rep (QdstrmImporter) and .nsys-rep -> SQLite
(`nsys export`), each in a child process with one-line errors.

nsys writes a raw .qdstrm while it records and imports it into a .nsys-rep at the end;
when that import fails (QdstrmImporter misses a shared library) the .qdstrm is left, and
import_qdstrm runs the importer itself. nsprof's readers read SQLite, which
export_nsys_rep makes.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from nsprof.errors import ReportError, ToolFailed
from nsprof.reports.checks import stat_report

# An export of a large report takes minutes; one that never returns must not hang nsprof.
EXPORT_TIMEOUT_S = 900.0


def export_nsys_rep(
    path: str | os.PathLike,
    *,
    out_dir: str | os.PathLike | None = None,
    timeout_s: float = EXPORT_TIMEOUT_S,
) -> Path:
    """Run `nsys export --type sqlite` on an .nsys-rep; return the new SQLite file's path.

    nsys writes into a fresh folder of nsprof's own, never beside the user's report (where
    `-f true` would overwrite, through symbolic links, whatever has that name): with out_dir,
    the export then moves to out_dir/<stem>.sqlite (replacing a file, never a link's target);
    without, it stays in the fresh temporary folder, which the caller removes. An nsys that
    runs past timeout_s is killed; one that exits 0 without writing is an error, never a
    reason to read an older file.
    """
    import shutil
    import signal
    import subprocess
    import tempfile

    from nsprof.host.tools import find_nsys

    shown = os.fspath(path)
    report = Path(path)
    if not stat.S_ISREG(stat_report(report).st_mode):
        raise ReportError(f"{shown}: not a regular file")
    nsys = find_nsys()
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".nsprof-export-" if out_dir else "nsprof-nsys-", dir=out_dir))
    out = folder / f"{report.stem}.sqlite"
    argv = [str(nsys.path), "export", "--type", "sqlite", "-f", "true", "-o", str(out), str(report)]
    try:
        try:
            # Own session: on a timeout the whole process group goes (nsys starts helpers).
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, errors="replace",
                                    start_new_session=True)
        except OSError as exc:
            raise ReportError(f"{shown}: cannot run {nsys.path}: {exc.strerror}") from None
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ReportError(
                f"{shown}: nsys export did not finish within {timeout_s:g} s; killed it"
            ) from None
        if proc.returncode != 0:
            lines = (stderr or stdout or "").strip().splitlines()
            reason = lines[-1].strip() if lines else f"exit status {proc.returncode}"
            raise ReportError(f"{shown}: nsys export failed: {reason}")
        if out.is_symlink() or not out.is_file():
            raise ReportError(f"{shown}: nsys export exited 0 but wrote no SQLite file ({nsys.path})")
        if out_dir is None:
            return out
        final = Path(out_dir) / out.name
        os.replace(out, final)
        folder.rmdir()
        return final
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def import_qdstrm(nsys: Path, qdstrm: Path, log: Path) -> Path:
    """Run QdstrmImporter on a .qdstrm that nsys could not turn into a .nsys-rep itself."""
    import subprocess

    from nsprof.host.tools import find_qdstrm_importer

    importer = find_qdstrm_importer(nsys)
    if importer is None:
        raise ToolFailed(f"nsys left {qdstrm.name} and no .nsys-rep, and QdstrmImporter was not found near {nsys}")
    try:
        proc = subprocess.run([str(importer), "-i", str(qdstrm)], capture_output=True, text=True,
                              errors="replace", stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ToolFailed(f"cannot run {importer}: {exc.strerror}") from None
    output = proc.stdout + proc.stderr
    with open(log, "a") as handle:
        handle.write(output)
    report = qdstrm.with_suffix(".nsys-rep")
    if proc.returncode != 0 or not report.exists():
        # The loader's complaint may be anywhere in the importer's output, or in nsys's own
        # output earlier in the log (nsys runs the importer itself first).
        library = missing_library(output) or missing_library(log.read_text(errors="replace"))
        if library:
            raise ToolFailed(f"QdstrmImporter cannot run: shared library {library} is missing; install the "
                             f"package that provides it or add its folder to LD_LIBRARY_PATH (log: {log})")
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        detail = f": {lines[-1][:200]}" if lines else f" (exit status {proc.returncode})"
        raise ToolFailed(f"QdstrmImporter failed on {qdstrm.name}{detail} (log: {log})")
    return report


_MISSING_LIBRARY = re.compile(r"error while loading shared libraries: ([^\s:]+)")


def missing_library(text: str) -> str | None:
    """'libdw.so.1' from the dynamic loader's "error while loading shared libraries" line."""
    match = _MISSING_LIBRARY.search(text)
    return match.group(1) if match else None
