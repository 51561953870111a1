"""Which kind of report a file is (by content, not by name), and one entry point for all."""

from __future__ import annotations

from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.checks import read_head

SQLITE_MAGIC = b"SQLite format 3\0"
NCU_REP_MAGIC = b"NVR\0"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"
KINDS = ("ncu-csv", "ncu-rep", "nsys-sqlite", "nsys-rep")


def sniff_kind(path) -> str:
    """One of KINDS, or ReportError with one line saying what the file is not."""
    path = Path(path)
    head = read_head(path, 4096)
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(NCU_REP_MAGIC):
        return "ncu-rep"
    if head.startswith(NSYS_REP_MAGIC):
        return "nsys-rep"
    if path.suffix == ".qdstrm":
        raise ReportError(
            f"{path.name}: an unfinished nsys capture (.qdstrm); run nsys's QdstrmImporter "
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
    if path.suffix == ".xz":
        raise ReportError(f"{path.name}: compressed; decompress it first (xz -dk {path.name})")
    raise ReportError(
        f"{path.name}: not a report nsprof reads (ncu CSV, .ncu-rep, nsys .sqlite or .nsys-rep)"
    )


def _ncu_csv_header_within_bound(path: Path) -> bool:
    from nsprof.reports.ncu_csv import HEADER_SCAN_BYTES, find_header

    try:
        with open(path, "rb") as handle:
            data = handle.read(HEADER_SCAN_BYTES)
    except OSError:
        return False
    return find_header(data) is not None


def read_report(path, *, domain: str | None = None, **labels):
    """Read any supported report into the tidy table (see nsprof.schema).

    `domain` restricts NVTX attribution to one domain; `labels` (clock_control,
    cache_control) label ncu rows whose settings the file itself does not record.
    """
    kind = sniff_kind(path)
    if kind == "ncu-csv":
        from nsprof.reports.ncu_csv import read_ncu_csv

        frame = read_ncu_csv(path, domain=domain, **labels)
    elif kind == "ncu-rep":
        from nsprof.reports.ncu_rep import read_ncu_rep

        frame = read_ncu_rep(path, domain=domain, **labels)
    elif kind == "nsys-sqlite":
        from nsprof.reports.nsys import read_nsys_sqlite

        frame = read_nsys_sqlite(path, domain=domain, **labels)
    else:
        from nsprof.reports.nsys import read_nsys_rep

        frame = read_nsys_rep(path, domain=domain, **labels)
    frame.attrs["report"] = str(path)
    frame.attrs["kind"] = kind
    return frame
