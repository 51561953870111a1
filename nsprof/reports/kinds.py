"""The registry of report kinds: each entry pairs a sniff (how its files begin) with a reader.

sniff_kind goes down REGISTRY in order; the first entry whose sniff accepts the file's
first bytes names its kind. Some kinds nsprof recognises but does not read (a compressed
report, an unfinished nsys capture): their entry holds the one-line message that says what
to do instead. Readers are named as "module:function" and imported on first use, so that
importing the registry (and `nsprof.reports`) stays light.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.checks import read_head
from nsprof.reports.signatures import (
    HEADER_SCAN_BYTES,
    NCU_CSV_HEADER,
    NCU_PROF_PREFIX,
    NCU_REP_MAGIC,
    NSYS_REP_MAGIC,
    QDSTRM_SUFFIX,
    SQLITE_MAGIC,
    UTF8_BOM,
    UTF16_BOMS,
    compression_of,
    find_header,
)

SNIFF_BYTES = 4096  # how much of a file the sniffs see


@dataclass(frozen=True)
class ReportKind:
    """One kind of file: how to recognise it, and how to read it (or why nsprof does not)."""

    name: str
    sniff: Callable[[bytes, Path], bool]  # (first SNIFF_BYTES bytes, path) -> is it this kind
    reader: str | None = None  # "module:function" taking (path, *, domain, **labels)
    refusal: Callable[[bytes, str], str] | None = None  # (head, shown name) -> the message

    def read(self, path: Path, **kwargs):
        """The tidy table of `path` (see nsprof.schema), by this kind's reader."""
        import importlib

        module, _, function = self.reader.partition(":")
        return getattr(importlib.import_module(module), function)(path, **kwargs)


def _is_ncu_csv(head: bytes, path: Path) -> bool:
    if b"\0" not in head and NCU_CSV_HEADER in head or head.lstrip(UTF8_BOM).startswith(NCU_PROF_PREFIX):
        return True
    if head.startswith(UTF16_BOMS):  # UTF-16 text (PowerShell's `>` writes it)
        text = head[: len(head) // 2 * 2].decode("utf-16", errors="replace")
        if NCU_CSV_HEADER.decode() in text or text.lstrip("\ufeff").startswith(NCU_PROF_PREFIX.decode()):
            return True
    # ncu writes the program's own output above the table
    return b"\0" not in head and _ncu_csv_header_within_bound(path)


def _ncu_csv_header_within_bound(path: Path) -> bool:
    """Whether ncu's CSV header starts within the first HEADER_SCAN_BYTES of `path`.

    Only called after read_head accepted `path` as a regular file (read_report hands
    sniff_kind a temporary copy of a FIFO or pipe), so this read never blocks."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(HEADER_SCAN_BYTES)
    except OSError:
        return False
    return find_header(data) is not None


def _compressed(head: bytes, shown: str) -> str:
    name, command = compression_of(head)
    return f"{shown}: {name}-compressed; decompress it first ({command} {shown})"


def _unfinished_capture(head: bytes, shown: str) -> str:
    return (
        f"{shown}: an unfinished nsys capture (.qdstrm); run nsys's QdstrmImporter "
        "on it to make a .nsys-rep (nsprof doctor shows where it is)"
    )


# In sniffing order: magic bytes first, then refusals, then ncu CSV (text, tested last).
REGISTRY: tuple[ReportKind, ...] = (
    ReportKind(
        "nsys-sqlite",
        lambda head, path: head.startswith(SQLITE_MAGIC),
        reader="nsprof.reports.nsys.reader:read_nsys_sqlite",
    ),
    ReportKind(
        "ncu-rep",
        lambda head, path: head.startswith(NCU_REP_MAGIC),
        reader="nsprof.reports.ncu_rep:read_ncu_rep",
    ),
    ReportKind(
        "nsys-rep",
        lambda head, path: head.startswith(NSYS_REP_MAGIC),
        reader="nsprof.reports.nsys.reader:read_nsys_rep",
    ),
    ReportKind("compressed", lambda head, path: compression_of(head) is not None, refusal=_compressed),
    ReportKind("qdstrm", lambda head, path: path.suffix == QDSTRM_SUFFIX, refusal=_unfinished_capture),
    ReportKind("ncu-csv", _is_ncu_csv, reader="nsprof.reports.ncu_csv:read_ncu_csv"),
)
BY_NAME = {kind.name: kind for kind in REGISTRY}


def sniff_kind(path: str | os.PathLike, *, shown: str | None = None) -> str:
    """One of KINDS, or ReportError with one line saying what the file is not.

    shown: how messages name the file (default: the path as given).
    """
    shown = shown or os.fspath(path)
    path = Path(path)
    head = read_head(path, SNIFF_BYTES)
    for kind in REGISTRY:
        if kind.sniff(head, path):
            if kind.refusal is not None:
                raise ReportError(kind.refusal(head, shown))
            return kind.name
    raise ReportError(f"{shown}: not a report nsprof reads (ncu CSV, .ncu-rep, nsys .sqlite or .nsys-rep)")
