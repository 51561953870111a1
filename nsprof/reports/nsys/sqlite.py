"""SQLite access for nsys exports: file checks, read-only connections, table and column
lookups, StringIds, fast integer-column reads, and SQLite's errors as one-line ReportErrors.

nsys serialises ids as ``globalPid = high bits | pid << 24`` (the fixture has 1 << 48 up
there) and ``globalTid = globalPid | tid``, so ``pid = (globalPid >> 24) & 0xFFFFFF`` and
``tid = globalTid & 0xFFFFFF`` (checked against the PROCESSES table of the fixture).
"""

from __future__ import annotations

import contextlib
import sqlite3
import struct
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import numpy as np

from nsprof.errors import ReportError
from nsprof.reports.checks import one_line, read_head
from nsprof.reports.signatures import NSYS_REP_MAGIC, SQLITE_MAGIC

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
META_TABLE = "META_DATA_EXPORT"

NULL = int(np.iinfo(np.int64).min)  # stands for SQL NULL in integer arrays
_NULL_SQL = "(-9223372036854775807 - 1)"  # the same value as an SQL integer expression
ID_BITS = 24  # globalPid/globalTid: pid and tid are 24-bit fields
ID_MASK = (1 << ID_BITS) - 1
# Rows per group_concat query: keeps each text value far below SQLite's 1 GB string limit.
_CHUNK_ROWS = 1 << 18


# --- file checks, connection, errors -------------------------------------------------------


def check_sqlite_file(path: Path) -> None:
    """One-line ReportErrors for the usual ways a file is not a usable SQLite database."""
    header = read_head(path, 100, empty_hint="; did the nsys export finish?")
    size = path.stat().st_size
    if not header.startswith(SQLITE_MAGIC):
        if header.startswith(NSYS_REP_MAGIC):
            raise ReportError(
                f"{path}: an .nsys-rep report, not its SQLite export; use read_nsys_rep"
                " or `nsys export --type sqlite`"
            )
        raise ReportError(f"{path}: not an SQLite file (no 'SQLite format 3' header)")
    if len(header) < 100:
        raise ReportError(f"{path}: truncated SQLite file ({size} bytes, header cut)")
    # The header records the database size in pages; that count is valid when the change
    # counter (offset 24) equals "version-valid-for" (offset 92). A shorter file lost its tail.
    (page_size,) = struct.unpack(">H", header[16:18])
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages = struct.unpack(">II", header[24:32])
    (valid_for,) = struct.unpack(">I", header[92:96])
    if change_counter == valid_for and pages and size < pages * page_size:
        raise ReportError(
            f"{path}: truncated SQLite file ({size} of {pages * page_size} bytes); copy or export it again"
        )


# How long a read waits for another process's write lock before it says so.
_BUSY_TIMEOUT_S = 5.0


def _is_lock_error(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (constants from 3.11 on)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def connect(path: Path) -> sqlite3.Connection:
    # Read-only through a URI: as_uri() percent-encodes spaces, quotes, '?', '#' and
    # non-ASCII characters, so any file name works, and the report is never written to.
    uri = path.resolve().as_uri() + ("?mode=ro&immutable=1" if _immutable(path) else "?mode=ro")
    conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
    # A corrupt file can hold invalid UTF-8 anywhere (even in table names); decoding with
    # replacement keeps that a readable value instead of a UnicodeDecodeError.
    conn.text_factory = _decode_text
    return conn


def _immutable(path: Path) -> bool:
    """Whether to open the report immutable: nothing beside it (-wal, -shm, -journal) opened, made or written,
    and no lock taken or seen. With mode=ro alone SQLite opens a WAL report's -shm read-write and, as root,
    hands -wal and -shm to the report's owner: another user's links there took root's files. So a report
    in WAL mode, or one another user could make so (host.owned.others_could_change), is read immutable (its
    WAL, if any, unread); this user's own export, which nsys writes with a rollback journal, is opened
    plainly, so that a writer's lock is seen and named."""
    from nsprof.host.owned import others_could_change

    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return True
    wal = header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"
    return wal or others_could_change(path)


def _decode_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def as_text(value: object) -> str | None:
    """A TEXT cell as str (NULL stays None): SQLite lets any column hold a blob or a number."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def table_names(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


@contextlib.contextmanager
def sqlite_errors_reported(path: Path) -> Iterator[None]:
    """SQLite's errors while reading `path` as one-line ReportErrors naming the file: a write
    lock held by another process, or a truncated or corrupt database."""
    try:
        yield
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # "file is not a database", "malformed", ...
        if isinstance(exc, sqlite3.OperationalError) and _is_lock_error(exc):
            raise ReportError(
                f"{path}: the database is locked by another process that is writing to it"
                f" ({one_line(exc, 100)} after {_BUSY_TIMEOUT_S:g} s; a rollback-journal database"
                " admits no reader meanwhile): wait for the writer to finish, or copy the file"
            ) from None
        # one_line: SQLite quotes whole multi-line table definitions in some messages. Python decodes
        # SQLite's own messages strictly; a damaged schema quoted in one fails that (exc.object: its bytes).
        why = bytes(exc.object).decode("utf-8", "replace") if isinstance(exc, UnicodeDecodeError) else exc
        raise ReportError(
            f"{path}: unreadable SQLite database ({one_line(why, 200)}); is the file truncated or corrupt?"
        ) from None


# --- bulk integer reads --------------------------------------------------------------------


def _parse_ints(text: str | None, label: str) -> np.ndarray:
    if text is None:  # group_concat over no rows
        return np.empty(0, np.int64)
    try:
        values = np.fromstring(text, dtype=np.int64, sep=",")
    except ValueError:
        values = None
    if values is None or len(values) != text.count(",") + 1:
        raise ReportError(f"{label} holds values that are not integers")
    return values


def _int_columns_sql(table: str, exprs: Sequence[str], where: str) -> str:
    aggregates = ", ".join(f"group_concat(IFNULL({expr}, {_NULL_SQL}))" for expr in exprs)
    # NOT INDEXED: a covering index could otherwise change the scan order between two reads
    # of one table whose columns must line up row by row.
    return (
        f'SELECT {aggregates} FROM "{table}" NOT INDEXED'
        f" WHERE rowid BETWEEN ? AND ?{' AND (' + where + ')' if where else ''}"
    )


def _rowid_chunks(conn: sqlite3.Connection, table: str) -> list[tuple[int, int]]:
    """Rowid ranges of _CHUNK_ROWS rows each (the last fewer), by the rows there are: rowids may have
    gaps of any size, so a range is found by counting rows along the rowid order, not by its span."""
    chunks = []
    low = conn.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
    while low is not None:
        high = conn.execute(
            f'SELECT rowid FROM "{table}" WHERE rowid >= ? ORDER BY rowid LIMIT 1 OFFSET ?',
            (low, _CHUNK_ROWS - 1),
        ).fetchone()
        if high is None:
            chunks.append((low, conn.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]))
            break
        chunks.append((low, high[0]))
        low = conn.execute(f'SELECT min(rowid) FROM "{table}" WHERE rowid > ?', (high[0],)).fetchone()[0]
    return chunks


def _read_chunk(
    path: Path, table: str, exprs: Sequence[str], where: str, rows: tuple[int, int]
) -> list[np.ndarray]:
    """Integer expressions over one rowid range of `table`, as int64 arrays; NULL -> NULL.

    Why not cursor.fetchall(): sqlite3 builds a tuple and a Python int per value, ~2.5 s for
    1M rows x 8 columns here. One group_concat text per column, parsed by numpy, is several
    times faster, and sqlite3 releases the GIL while SQLite aggregates, so chunks can be read
    in parallel threads, each on its own connection.
    """
    with closing(connect(path)) as conn:
        texts = conn.execute(_int_columns_sql(table, exprs, where), rows).fetchone()
    return [_parse_ints(text, f"{path}: {table}.{expr}") for text, expr in zip(texts, exprs)]


def _concat(chunks: list[list[np.ndarray]], width: int) -> list[np.ndarray]:
    if not chunks:
        return [np.empty(0, np.int64) for _ in range(width)]
    return [np.concatenate(column) for column in zip(*chunks)]


def read_int_columns(path: Path, table: str, exprs: Sequence[str], where: str = "") -> list[np.ndarray]:
    """Integer expressions over `table` (rows in rowid order), read chunk by chunk here."""
    with closing(connect(path)) as conn:
        chunks = _rowid_chunks(conn, table)
    return _concat([_read_chunk(path, table, exprs, where, rows) for rows in chunks], len(exprs))


def submit_int_columns(
    pool: ThreadPoolExecutor, path: Path, table: str, exprs: Sequence[str], where: str = ""
) -> Callable[[], list[np.ndarray]]:
    """Like read_int_columns, one pool task per chunk; call the result to wait for it."""
    with closing(connect(path)) as conn:
        chunks = _rowid_chunks(conn, table)
    futures = [pool.submit(_read_chunk, path, table, exprs, where, rows) for rows in chunks]
    return lambda: _concat([future.result() for future in futures], len(exprs))


def distinct_values(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True), in O(n) when the values span a small range."""
    if not len(values):
        return values[:0], np.empty(0, np.intp)
    low, high = int(values.min()), int(values.max())
    if high - low > 4 * len(values) + 4096:
        distinct, inverse = np.unique(values, return_inverse=True)
        return distinct, inverse.reshape(-1)
    offset = values - low
    present = np.zeros(high - low + 1, dtype=bool)
    present[offset] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present) + low, rank[offset]


def lookup_strings(ids: np.ndarray, strings: dict[int, str]) -> tuple[np.ndarray, np.ndarray]:
    """StringIds values for an id array (object array, None where unknown), and that mask."""
    distinct, inverse = distinct_values(ids)
    names = np.array([strings.get(int(i)) for i in distinct], dtype=object)
    values = names[inverse]
    missing = np.array([n is None for n in names], dtype=bool)[inverse]
    return values, missing


def read_strings(conn: sqlite3.Connection, strings_columns: set[str]) -> dict[int, str]:
    """StringIds as {id: value} (empty when the table lacks id or value)."""
    if not {"id", "value"} <= strings_columns:
        return {}
    rows = conn.execute(f"SELECT id, value FROM {STRINGS_TABLE} WHERE value IS NOT NULL")
    return {string_id: as_text(value) for string_id, value in rows}
