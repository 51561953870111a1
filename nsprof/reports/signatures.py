"""How each kind of file begins: magic bytes and text signatures, declared once.

The registry of report kinds (kinds.py) sniffs files with these; the readers check them
again on the files they are handed directly.
"""

from __future__ import annotations

import re

SQLITE_MAGIC = b"SQLite format 3\0"  # an nsys SQLite export
NCU_REP_MAGIC = b"NVR\0"  # an Nsight Compute .ncu-rep
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"  # an Nsight Systems .nsys-rep
QDSTRM_SUFFIX = ".qdstrm"  # nsys's raw capture, before its import into a .nsys-rep

# ncu CSV: the table's header row starts with the "ID" column; ncu's own lines start
# with ==PROF==. Either may follow a UTF-8 byte order mark; PowerShell's `>` writes UTF-16.
NCU_CSV_HEADER = b'"ID","'
NCU_PROF_PREFIX = b"==PROF=="
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

# The table's header row: ncu may print ==PROF== lines and the program's own output first.
_HEADER_RE = re.compile(
    b"^(?:" + re.escape(UTF8_BOM) + b")?" + re.escape(NCU_CSV_HEADER) + b'[^\r\n]*"Kernel Name"', re.M
)
_ANY_HEADER_RE = re.compile(b"^(?:" + re.escape(UTF8_BOM) + b")?" + re.escape(NCU_CSV_HEADER), re.M)
# How far into a file the header row is looked for when telling what kind of file it is
# (the parser itself reads the whole file).
HEADER_SCAN_BYTES = 8 * 2**20


def find_header(data: bytes) -> int | None:
    """Offset of the ncu CSV header row in `data` (the first "ID" row naming "Kernel Name",
    else the first "ID" row), or None."""
    match = _HEADER_RE.search(data) or _ANY_HEADER_RE.search(data)
    return match.start() if match else None


# Compressed files, recognised by their first bytes (never by name): name, how to unpack.
COMPRESSED_MAGIC = (
    (b"\x1f\x8b", "gzip", "gzip -dk"),
    (b"\xfd7zXZ\x00", "xz", "xz -dk"),
    (b"BZh", "bzip2", "bzip2 -dk"),
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"),
    (b"PK\x03\x04", "zip", "unzip"),
)


def compression_of(head: bytes) -> tuple[str, str] | None:
    """(format, unpack command) when `head` starts a compressed file, else None."""
    for magic, name, command in COMPRESSED_MAGIC:
        if head.startswith(magic) and (name != "bzip2" or head[3:4].isdigit()):
            return name, command
    return None
