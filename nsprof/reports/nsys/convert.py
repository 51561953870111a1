"""nsys's format conversions: .qdstrm -> .nsys-rep (QdstrmImporter) and .nsys-rep -> SQLite
(`nsys export`), each in a child process with one-line errors.

nsys writes a raw .qdstrm while it records and imports it into a .nsys-rep at the end;
when that import fails (QdstrmImporter misses a shared library) the .qdstrm is left, and
import_qdstrm runs the importer itself. nsprof's readers read SQLite, which
export_nsys_rep makes.

Both conversions are bounded by the size of the file they convert (conversion_bound_s: a
hung one must not keep nsprof, and the GPU lock, for ever): one that runs past its bound is
killed with its whole process group, and the one-line error names the tool, the bound and
the file, which is kept (nothing measured is lost).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from nsprof.errors import ReportError, ToolFailed
from nsprof.host.children import MAX_WAIT_S
from nsprof.reports.checks import stat_report
from nsprof.reports.inputs import env_number

# How long a conversion may take: CONVERT_BASE_S, plus CONVERT_S_PER_MB per MB (10**6 bytes)
# of the file it converts (both tools convert tens of MB a second; nsys's start alone takes
# seconds). $NSPROF_CONVERT_TIMEOUT_S, where set, is the bound instead, whatever the size.
CONVERT_BASE_S = 60.0
CONVERT_S_PER_MB = 2.0
CONVERT_TIMEOUT_ENV = "NSPROF_CONVERT_TIMEOUT_S"


def conversion_bound_s(path: str | os.PathLike) -> float:
    """How long QdstrmImporter or `nsys export` may take to convert `path` (see CONVERT_BASE_S)."""
    fixed = env_number(CONVERT_TIMEOUT_ENV, 0.0, MAX_WAIT_S)
    if fixed:
        return fixed
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    return min(CONVERT_BASE_S + CONVERT_S_PER_MB * size / 1e6, MAX_WAIT_S)


def _bound_words(bound_s: float, path: Path) -> str:
    """Why the bound is what it is, for the timeout's message."""
    if os.environ.get(CONVERT_TIMEOUT_ENV):
        return f"${CONVERT_TIMEOUT_ENV}"
    try:
        size = f"{os.stat(path).st_size / 1e6:.1f} MB"
    except OSError:
        size = "its size"
    return f"the bound for {size}; ${CONVERT_TIMEOUT_ENV} sets another"


def _run_bounded(argv: list[str], bound_s: float):
    """Run `argv` in a process session of its own (it may start helpers): the CompletedProcess,
    or None when it ran past bound_s. Timed out, interrupted or failing, its whole process group
    is killed (no Ctrl-C of nsprof's reaches a session of its own), and it gets SIGKILL when
    nsprof dies (host.children.dies_with_nsprof). OSError when it cannot be started."""
    import subprocess

    from nsprof.host.children import dies_with_nsprof, kill_group

    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=dies_with_nsprof(),
    )
    try:
        stdout, stderr = proc.communicate(timeout=bound_s)
    except BaseException as exc:
        # Not communicate() again: a Ctrl-C inside the first may have left Popen's wait lock held.
        kill_group(proc)
        proc.stdout.close()
        proc.stderr.close()
        if isinstance(exc, subprocess.TimeoutExpired):
            return None
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def export_nsys_rep(
    path: str | os.PathLike,
    *,
    out_dir: str | os.PathLike | None = None,
    timeout_s: float | None = None,
) -> Path:
    """Run `nsys export --type sqlite` on an .nsys-rep; return the new SQLite file's path.

    nsys writes into a fresh folder of nsprof's own, never beside the user's report (where
    `-f true` would overwrite, through symbolic links, whatever has that name): with out_dir,
    the export then moves to out_dir/<stem>.sqlite (replacing a file, never a link's target);
    without, it stays in the fresh temporary folder, which the caller removes. An nsys that
    runs past timeout_s is killed; one that exits 0 without writing is an error, never a
    reason to read an older file. timeout_s: conversion_bound_s(path) unless given.
    """
    import shutil
    import tempfile

    from nsprof.host.tools import find_nsys

    shown = os.fspath(path)
    report = Path(path)
    if not stat.S_ISREG(stat_report(report).st_mode):
        raise ReportError(f"{shown}: not a regular file")
    nsys = find_nsys()
    bound_s = conversion_bound_s(report) if timeout_s is None else timeout_s
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".nsprof-export-" if out_dir else "nsprof-nsys-", dir=out_dir))
    out = folder / f"{report.stem}.sqlite"
    argv = [str(nsys.path), "export", "--type", "sqlite", "-f", "true", "-o", str(out), str(report)]
    try:
        try:
            proc = _run_bounded(argv, bound_s)
        except OSError as exc:
            raise ReportError(f"{shown}: cannot run {nsys.path}: {exc.strerror}") from None
        if proc is None:
            why = _bound_words(bound_s, report) if timeout_s is None else "the caller's bound"
            raise ReportError(
                f"{shown}: nsys export did not finish within {bound_s:g} s ({why}); killed it. "
                f"The report is kept, nothing measured is lost: `nsprof analyze {shown}` exports it again"
            )
        stdout, stderr = proc.stdout, proc.stderr
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
    """Run QdstrmImporter on a .qdstrm that nsys could not turn into a .nsys-rep itself, for at
    most conversion_bound_s(qdstrm)."""
    from nsprof.host.tools import find_qdstrm_importer

    importer = find_qdstrm_importer(nsys)
    if importer is None:
        raise ToolFailed(
            f"nsys left {qdstrm.name} and no .nsys-rep, and QdstrmImporter was not found near {nsys}"
        )
    report = qdstrm.with_suffix(".nsys-rep")
    bound_s = conversion_bound_s(qdstrm)
    try:
        proc = _run_bounded([str(importer), "-i", str(qdstrm)], bound_s)
    except OSError as exc:
        raise ToolFailed(f"cannot run {importer}: {exc.strerror}") from None
    if proc is None:
        report.unlink(missing_ok=True)  # half written: never to be read as the run's report
        with open(log, "a") as handle:
            handle.write(f"==NSPROF== killed {importer}: still running after {bound_s:g} s\n")
        raise ToolFailed(
            f"QdstrmImporter did not finish within {bound_s:g} s ({_bound_words(bound_s, qdstrm)}); "
            f"killed it. {qdstrm} is kept, nothing measured is lost: `{importer} -i {qdstrm}` "
            f"makes its .nsys-rep for `nsprof analyze` (log: {log})"
        )
    output = proc.stdout + proc.stderr
    with open(log, "a") as handle:
        handle.write(output)
    if proc.returncode != 0 or not report.exists():
        # The loader's complaint may be anywhere in the importer's output, or in nsys's own
        # output earlier in the log (nsys runs the importer itself first).
        library = missing_library(output) or missing_library(log.read_text(errors="replace"))
        if library:
            raise ToolFailed(
                f"QdstrmImporter cannot run: shared library {library} is missing; install the "
                f"package that provides it or add its folder to LD_LIBRARY_PATH (log: {log})"
            )
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        detail = f": {lines[-1][:200]}" if lines else f" (exit status {proc.returncode})"
        raise ToolFailed(f"QdstrmImporter failed on {qdstrm.name}{detail} (log: {log})")
    return report


_MISSING_LIBRARY = re.compile(r"error while loading shared libraries: ([^\s:]+)")


def missing_library(text: str) -> str | None:
    """'libdw.so.1' from the dynamic loader's "error while loading shared libraries" line."""
    match = _MISSING_LIBRARY.search(text)
    return match.group(1) if match else None
