"""Which kind of report a file is (by content, not by name), and one entry point for all."""

from __future__ import annotations

import os
from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.checks import compression_of, read_head
from nsprof.reports.inputs import local_copy, shown_name

SQLITE_MAGIC = b"SQLite format 3\0"
NCU_REP_MAGIC = b"NVR\0"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"
KINDS = ("ncu-csv", "ncu-rep", "nsys-sqlite", "nsys-rep")


def sniff_kind(path: str | os.PathLike, *, shown: str | None = None) -> str:
    """One of KINDS, or ReportError with one line saying what the file is not.

    shown: how messages name the file (default: the path as given).
    """
    shown = shown or os.fspath(path)
    path = Path(path)
    head = read_head(path, 4096)
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(NCU_REP_MAGIC):
        return "ncu-rep"
    if head.startswith(NSYS_REP_MAGIC):
        return "nsys-rep"
    compressed = compression_of(head)
    if compressed:
        name, command = compressed
        raise ReportError(f"{shown}: {name}-compressed; decompress it first ({command} {shown})")
    if path.suffix == ".qdstrm":
        raise ReportError(
            f"{shown}: an unfinished nsys capture (.qdstrm); run nsys's QdstrmImporter "
            "on it to make a .nsys-rep (nsprof doctor shows where it is)"
        )
    if b"\0" not in head and b'"ID","' in head or head.lstrip(b"\xef\xbb\xbf").startswith(b"==PROF=="):
        return "ncu-csv"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 text (PowerShell's `>` writes it)
        text = head[: len(head) // 2 * 2].decode("utf-16", errors="replace")
        if '"ID","' in text or text.lstrip("\ufeff").startswith("==PROF=="):
            return "ncu-csv"
    if b"\0" not in head and _ncu_csv_header_within_bound(path):
        return "ncu-csv"  # ncu writes the program's own output above the table
    raise ReportError(
        f"{shown}: not a report nsprof reads (ncu CSV, .ncu-rep, nsys .sqlite or .nsys-rep)"
    )


def _ncu_csv_header_within_bound(path: Path) -> bool:
    """Whether ncu's CSV header starts within the first HEADER_SCAN_BYTES of `path`.

    Only called after read_head accepted `path` as a regular file (read_report hands
    sniff_kind a temporary copy of a FIFO or pipe), so this read never blocks."""
    from nsprof.reports.ncu_csv import HEADER_SCAN_BYTES, find_header

    try:
        with open(path, "rb") as handle:
            data = handle.read(HEADER_SCAN_BYTES)
    except OSError:
        return False
    return find_header(data) is not None


def read_report(path: str | os.PathLike, *, domain: str | None = None, **labels):
    """Read any supported report into the tidy table (see nsprof.schema).

    `path` may be a regular file, a FIFO or other stream (read once into a temporary copy),
    or "-" for standard input. `domain` restricts NVTX attribution to one domain; `labels`
    (clock_control, cache_control) label ncu rows whose settings the file itself does not
    record. Warnings (frame.attrs["warnings"]) say what the report lacks and what it costs.
    """
    shown = shown_name(path)
    with local_copy(path) as local:
        try:
            kind = sniff_kind(local, shown=shown)
            frame = _read_kind(kind, local, domain, labels)
        except ReportError as exc:
            raise ReportError(_named_as_given(str(exc), local, shown)) from None
    frame.attrs["report"] = os.fspath(path)
    frame.attrs["kind"] = kind
    warnings = list(frame.attrs.get("warnings", []))
    if domain is not None:
        warnings += _domain_warnings(frame, domain)
    frame.attrs["warnings"] = warnings
    return frame


def _read_kind(kind: str, path: Path, domain: str | None, labels: dict):
    if kind == "ncu-csv":
        from nsprof.reports.ncu_csv import read_ncu_csv

        return read_ncu_csv(path, domain=domain, **labels)
    if kind == "ncu-rep":
        from nsprof.reports.ncu_rep import read_ncu_rep

        return read_ncu_rep(path, domain=domain, **labels)
    if kind == "nsys-sqlite":
        from nsprof.reports.nsys import read_nsys_sqlite

        return read_nsys_sqlite(path, domain=domain, **labels)
    from nsprof.reports.nsys import read_nsys_rep

    return read_nsys_rep(path, domain=domain, **labels)


def _named_as_given(message: str, local: Path, shown: str) -> str:
    """A parser's message naming the report as the user gave it: parsers see a temporary
    copy of a stream, and some name a file by its base name only."""
    message = message.replace(str(local), shown)
    for prefix in (str(local), local.name):
        if message.startswith(prefix + ":"):
            return shown + message[len(prefix):]
    return message


def _domain_warnings(frame, domain: str) -> list[str]:
    """One line when `domain` names no NVTX range of the report (a typo, or the wrong report)."""
    if frame["domain"].eq(domain).any():
        return []
    seen = set()
    for path in frame["nvtx_path"].dropna().unique():
        seen.update(part.split("@", 1)[0] for part in str(path).split(";") if "@" in part)
    known = ", ".join(sorted(seen)) or "none"
    return [f"no kernel ran inside an NVTX range of domain {domain!r} (domains here: {known}); "
            "every kernel is '(no range)'"]
