"""Nsight Systems reports -> the tidy table (nsprof.schema): one row per CUDA kernel.

nsys writes a binary ``.nsys-rep``; ``nsys export --type sqlite`` turns it into an SQLite
database, which is what this module reads (``read_nsys_rep`` runs the export first).

Tables used (schema 3.20.3, nsys 2025.3; columns drift between releases, so every optional
column is looked up with ``PRAGMA table_info`` and read as NA when absent):

- ``CUPTI_ACTIVITY_KIND_KERNEL``: GPU start/end (ns), ``shortName``/``demangledName`` ->
  ``StringIds``, ``correlationId``, ``graphNodeId`` (set when the kernel ran as a node of a
  replayed CUDA graph traced with ``--cuda-graph-trace=node``), ``globalPid``.
- ``CUPTI_ACTIVITY_KIND_RUNTIME``: the CPU-side API call (``cuLaunchKernel``,
  ``cudaGraphLaunch``, ...) with the same ``correlationId``: its ``start`` is the launch time
  and ``globalTid`` the launching thread. All kernel nodes of one graph launch share it.
  The table also holds every other API call (memcpy, sync, ...); only launch calls are read.
- ``NVTX_EVENTS``: eventType 59 = push/pop range (per thread and domain, properly nested),
  60 = start/end range (any thread of the process, may overlap), 75 = domain create (its
  ``text`` names ``domainId`` within the creating process; 0 is the default domain).
  ``text`` is NULL for registered strings (the Python ``nvtx`` package registers them);
  then ``textId`` points into ``StringIds``. An ``end`` of NULL: the range never closed.
- ``META_DATA_EXPORT``: export schema and nsys versions, kept in ``frame.attrs``.

nsys serialises ids as ``globalPid = high bits | pid << 24`` (the fixture has 1 << 48 up
there) and ``globalTid = globalPid | tid``, so ``pid = (globalPid >> 24) & 0xFFFFFF`` and
``tid = globalTid & 0xFFFFFF`` (checked against the PROCESSES table of the fixture).

A kernel's NVTX range is the innermost range (latest start) whose CPU span
``[start, end]`` holds the start of the API call that launched it.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nsprof.errors import ReportError
from nsprof.reports.checks import blank_impossible, one_line, read_head, stat_report
from nsprof.schema import COLUMN_DTYPES, COLUMNS, DEFAULT_DOMAIN, parse_range_name

if TYPE_CHECKING:
    import pandas as pd

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
META_TABLE = "META_DATA_EXPORT"

NVTX_PUSH_POP = 59  # ENUM_NSYS_EVENT_TYPE NvtxPushPopRange
NVTX_START_END = 60  # NvtxStartEndRange
NVTX_DOMAIN_CREATE = 75  # NvtxDomainCreate

_SQLITE_MAGIC = b"SQLite format 3\x00"
_NULL = int(np.iinfo(np.int64).min)  # stands for SQL NULL in integer arrays
_NULL_SQL = "(-9223372036854775807 - 1)"  # the same value as an SQL integer expression
_NEVER_ENDS = int(np.iinfo(np.int64).max)  # end of a range that was never closed
_ID_BITS = 24  # globalPid/globalTid: pid and tid are 24-bit fields
_ID_MASK = (1 << _ID_BITS) - 1
# Rows per group_concat query: keeps each text value far below SQLite's 1 GB string limit.
_CHUNK_ROWS = 1 << 18


# --- file checks and connection ------------------------------------------------------------


def _check_sqlite_file(path: Path) -> None:
    """One-line ReportErrors for the usual ways a file is not a usable SQLite database."""
    header = read_head(path, 100, empty_hint="; did the nsys export finish?")
    size = path.stat().st_size
    if not header.startswith(_SQLITE_MAGIC):
        if header.startswith(b"NVIDIA Tegra Profiler Report"):
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
            f"{path}: truncated SQLite file ({size} of {pages * page_size} bytes);"
            " copy or export it again"
        )


# How long a read waits for another process's write lock before it says so.
_BUSY_TIMEOUT_S = 5.0


def _is_lock_error(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (constants from 3.11 on)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _connect(path: Path) -> sqlite3.Connection:
    # Read-only through a URI: as_uri() percent-encodes spaces, quotes, '?', '#' and
    # non-ASCII characters, so any file name works, and the report is never written to.
    uri = path.resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
    # A corrupt file can hold invalid UTF-8 anywhere (even in table names); decoding with
    # replacement keeps that a readable value instead of a UnicodeDecodeError.
    conn.text_factory = _decode_text
    return conn


def _decode_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _as_text(value: object) -> str | None:
    """A TEXT cell as str (NULL stays None): SQLite lets any column hold a blob or a number."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


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
    first = conn.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
    last = conn.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
    if first is None:
        return []
    return [(low, low + _CHUNK_ROWS - 1) for low in range(first, last + 1, _CHUNK_ROWS)]


def _read_chunk(
    path: Path, table: str, exprs: Sequence[str], where: str, rows: tuple[int, int]
) -> list[np.ndarray]:
    """Integer expressions over one rowid range of `table`, as int64 arrays; NULL -> _NULL.

    Why not cursor.fetchall(): sqlite3 builds a tuple and a Python int per value, ~2.5 s for
    1M rows x 8 columns here. One group_concat text per column, parsed by numpy, is several
    times faster, and sqlite3 releases the GIL while SQLite aggregates, so chunks can be read
    in parallel threads, each on its own connection.
    """
    with closing(_connect(path)) as conn:
        texts = conn.execute(_int_columns_sql(table, exprs, where), rows).fetchone()
    return [_parse_ints(text, f"{path}: {table}.{expr}") for text, expr in zip(texts, exprs)]


def _concat(chunks: list[list[np.ndarray]], width: int) -> list[np.ndarray]:
    if not chunks:
        return [np.empty(0, np.int64) for _ in range(width)]
    return [np.concatenate(column) for column in zip(*chunks)]


def _read_int_columns(
    path: Path, table: str, exprs: Sequence[str], where: str = ""
) -> list[np.ndarray]:
    """Integer expressions over `table` (rows in rowid order), read chunk by chunk here."""
    with closing(_connect(path)) as conn:
        chunks = _rowid_chunks(conn, table)
    return _concat([_read_chunk(path, table, exprs, where, rows) for rows in chunks], len(exprs))


def _submit_int_columns(
    pool: ThreadPoolExecutor, path: Path, table: str, exprs: Sequence[str], where: str = ""
) -> Callable[[], list[np.ndarray]]:
    """Like _read_int_columns, one pool task per chunk; call the result to wait for it."""
    with closing(_connect(path)) as conn:
        chunks = _rowid_chunks(conn, table)
    futures = [pool.submit(_read_chunk, path, table, exprs, where, rows) for rows in chunks]
    return lambda: _concat([future.result() for future in futures], len(exprs))


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _lookup_strings(ids: np.ndarray, strings: dict[int, str]) -> tuple[np.ndarray, np.ndarray]:
    """StringIds values for an id array (object array, None where unknown), and that mask."""
    distinct, inverse = _distinct(ids)
    names = np.array([strings.get(int(i)) for i in distinct], dtype=object)
    values = names[inverse]
    missing = np.array([n is None for n in names], dtype=bool)[inverse]
    return values, missing


# --- NVTX ranges ---------------------------------------------------------------------------


@dataclass
class NvtxRanges:
    """NVTX ranges as parallel arrays (one entry per range)."""

    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64; _NEVER_ENDS when the range was never closed
    push_pop: np.ndarray  # bool: push/pop (True) or start/end (False)
    thread: np.ndarray  # int64 globalTid of the push / start call; _NULL when unknown
    domain: np.ndarray  # intp index into domain_names
    name: np.ndarray  # object: range name (str; "" when it has none)
    name_code: np.ndarray  # intp: name == distinct_names[name_code]
    distinct_names: list[str]
    domain_names: list[str]

    def __len__(self) -> int:
        return len(self.start_ns)


def _read_nvtx_ranges(path: Path, strings: dict[int, str]) -> NvtxRanges | None:
    with closing(_connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if NVTX_TABLE not in tables:
            return None
        columns = _table_columns(conn, NVTX_TABLE)
        if not {"start", "eventType"} <= columns:
            return None

        def column(name: str) -> str:
            return name if name in columns else "NULL"

        # Unregistered strings are few (registered ones have text NULL): plain fetch.
        texts = (
            {
                rowid: _as_text(text)
                for rowid, text in conn.execute(
                    f"SELECT rowid, text FROM {NVTX_TABLE} WHERE eventType IN (?, ?)"
                    " AND text IS NOT NULL",
                    (NVTX_PUSH_POP, NVTX_START_END),
                )
            }
            if "text" in columns
            else {}
        )
        domain_rows = conn.execute(
            f"SELECT {column('domainId')}, {column('text')}, {column('textId')},"
            f" {column('globalTid')} FROM {NVTX_TABLE} WHERE eventType = ?",
            (NVTX_DOMAIN_CREATE,),
        ).fetchall()
    rowid, start, end, kind, thread, domain_id, text_id = _read_int_columns(
        path,
        NVTX_TABLE,
        [
            "rowid",
            "start",
            f"IFNULL({column('end')}, {_NEVER_ENDS})",
            "eventType",
            column("globalTid"),
            f"IFNULL({column('domainId')}, 0)",
            column("textId"),
        ],
        where=f"eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END})",
    )

    # Domain names: id 0 is the default domain; others are named by their create event in
    # the same process (ids are handles of one process; several processes may reuse them).
    by_process: dict[tuple[int | None, int], str] = {}
    by_id: dict[int, str] = {}
    for dom_id, text, dom_text_id, creator in domain_rows:
        name = _as_text(text) if text is not None else strings.get(dom_text_id)
        if isinstance(dom_id, int) and name is not None:
            process_of = creator >> _ID_BITS if isinstance(creator, int) else None
            by_process[(process_of, dom_id)] = name
            by_id.setdefault(dom_id, name)
    process = np.where(thread != _NULL, thread >> _ID_BITS, _NULL)
    if len(process) and process.min() == process.max():  # one process: the usual case
        ids, domain_code = _distinct(domain_id)
        pairs = [(int(process[0]), int(i)) for i in ids]
    else:
        unique_pairs, domain_code = np.unique(
            np.stack([process, domain_id], axis=1), axis=0, return_inverse=True
        )
        domain_code = domain_code.reshape(-1)
        pairs = [(int(p), int(i)) for p, i in unique_pairs]
    domain_names = [
        DEFAULT_DOMAIN
        if dom_id == 0
        else by_process.get((proc, dom_id)) or by_id.get(dom_id) or f"<domain {dom_id}>"
        for proc, dom_id in pairs
    ]

    # Range names: the explicit text, else the registered string behind textId. Kept as
    # codes into a list of distinct names too, so that each name is parsed only once.
    name_code = np.zeros(len(rowid), dtype=np.intp)
    distinct_names = [""]  # code 0: a range without a name
    registered = text_id != _NULL
    if registered.any():
        ids, inverse = _distinct(text_id[registered])
        name_code[registered] = inverse + len(distinct_names)
        distinct_names += [strings.get(int(i), "") for i in ids]
    if texts:
        position = np.searchsorted(rowid, np.fromiter(texts, np.int64, len(texts)))
        codes: dict[str, int] = {}
        for text in texts.values():
            codes.setdefault(text, len(distinct_names) + len(codes))
        name_code[position] = [codes[text] for text in texts.values()]
        distinct_names += list(codes)
    return NvtxRanges(
        start_ns=start,
        end_ns=end,
        push_pop=kind == NVTX_PUSH_POP,
        thread=thread,
        domain=domain_code,
        name=np.array(distinct_names, dtype=object)[name_code],
        name_code=name_code,
        distinct_names=distinct_names,
        domain_names=domain_names,
    )


# --- attribution ---------------------------------------------------------------------------


def _prefix_max_levels(end_ns: np.ndarray) -> list[np.ndarray]:
    """levels[l][j] = max(end_ns[max(0, j - 2**l + 1) .. j]): a sparse table for descents."""
    levels = [end_ns]
    step = 1
    while step < len(end_ns):
        previous = levels[-1]
        current = previous.copy()
        np.maximum(previous[step:], previous[:-step], out=current[step:])
        levels.append(current)
        step *= 2
    return levels


def _last_reaching(levels: list[np.ndarray], position: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """For each query: the largest j <= position with end_ns[j] >= t_ns, else -1.

    Binary lifting over the sparse table: one vectorised numpy step per level, so the cost
    does not depend on how many earlier ranges ended before t_ns.
    """
    end_ns = levels[0]
    result = np.full(len(position), -1, dtype=np.int64)
    valid = np.flatnonzero(position >= 0)
    if not len(end_ns) or not len(valid):
        return result
    pos = position[valid]
    t = t_ns[valid]
    # Fast path: the latest range itself reaches t (the usual case).
    direct = end_ns[pos] >= t
    result[valid[direct]] = pos[direct]
    rest = ~direct & (levels[-1][pos] >= t)  # else no range up to pos reaches t
    valid, pos, t = valid[rest], pos[rest], t[rest]
    for level in range(len(levels) - 1, -1, -1):
        # Skip the window (pos - 2**level, pos] when none of its ranges reaches t. A window
        # reaching below 0 holds the prefix maximum, which does reach t: never skipped.
        skip = levels[level][pos] < t
        pos = pos - (skip.astype(np.int64) << level)
    result[valid] = pos
    return result


def _groups(keys: np.ndarray) -> dict[int, np.ndarray]:
    """Positions of each distinct key (one sort, skipped when all keys are equal)."""
    if not len(keys):
        return {}
    if keys.min() == keys.max():
        return {int(keys[0]): np.arange(len(keys))}
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    return {int(sorted_keys[c]): part for c, part in zip(np.append(0, cuts), np.split(order, cuts))}


def attribute_nvtx(
    launch_ns: np.ndarray,
    launch_thread: np.ndarray,
    ranges: NvtxRanges,
    domain: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The innermost NVTX range holding each launch, and the path of all ranges holding it.

    launch_ns / launch_thread: CPU start of the launching API call and its globalTid
    (_NULL where unknown). Push/pop ranges count only on the same thread (they nest per
    thread and domain); start/end ranges count from any thread of the same process.
    Innermost = latest start; `domain` restricts that choice to one domain's ranges (the
    path still lists every range).

    Returns (index into `ranges` or -1, nvtx_path: object array, None where no range).
    """
    n = len(launch_ns)
    best = np.full(n, -1, dtype=np.int64)
    path = np.full(n, None, dtype=object)
    if not len(ranges) or not n:
        return best, path
    best_start = np.full(n, _NULL, dtype=np.int64)
    wanted = {code for code, name in enumerate(ranges.domain_names) if domain in (None, name)}
    known = launch_thread != _NULL
    launch_keys = {
        True: _groups(np.where(known, launch_thread, _NULL)),
        False: _groups(np.where(known, launch_thread >> _ID_BITS, _NULL)),
    }
    range_process = np.where(ranges.thread != _NULL, ranges.thread >> _ID_BITS, _NULL)
    # The ranges holding a launch are fixed by a few "slots": per push/pop domain the
    # innermost range (its ancestors follow), per start/end domain the 1st, 2nd, ...
    # holding range. Paths are then built per range, or per distinct slot combination.
    slots: dict[tuple[bool, int, int], np.ndarray] = {}
    parent = np.full(len(ranges), -1, dtype=np.int64)

    for push_pop, range_key in ((True, ranges.thread), (False, range_process)):
        chosen = np.flatnonzero((ranges.push_pop == push_pop) & (range_key != _NULL))
        if not len(chosen):
            continue
        # Group by (thread or process, domain); within a group sort by (start, -end), so
        # that of two ranges with one start the outer one comes first.
        chosen = chosen[
            np.lexsort(
                (
                    -ranges.end_ns[chosen],
                    ranges.start_ns[chosen],
                    ranges.domain[chosen],
                    range_key[chosen],
                )
            )
        ]
        key, dom = range_key[chosen], ranges.domain[chosen]
        cuts = np.flatnonzero((key[1:] != key[:-1]) | (dom[1:] != dom[:-1])) + 1
        for members in np.split(chosen, cuts):
            launches = launch_keys[push_pop].get(int(range_key[members[0]]))
            if launches is None:
                continue
            group_domain = int(ranges.domain[members[0]])
            start, end = ranges.start_ns[members], ranges.end_ns[members]
            levels = _prefix_max_levels(end)
            t = launch_ns[launches]
            latest = np.searchsorted(start, t, side="right") - 1
            if push_pop:
                # Parent = the latest earlier range that outlasts this one (they nest).
                local_parent = _last_reaching(
                    levels, np.arange(-1, len(members) - 1, dtype=np.int64), end
                )
                parent[members] = np.where(local_parent >= 0, members[local_parent], -1)
                # Walk up from the latest-started range until one still holds t: one numpy
                # step per nesting level.
                inner = latest
                pending = np.flatnonzero(inner >= 0)
                pending = pending[end[inner[pending]] < t[pending]]
                while len(pending):
                    inner[pending] = local_parent[inner[pending]]
                    pending = pending[inner[pending] >= 0]
                    pending = pending[end[inner[pending]] < t[pending]]
                layers = [inner]
            else:
                # Start/end ranges may overlap: the k-th holding range is the latest-started
                # one before the (k-1)-th that still reaches t.
                layers = []
                current = _last_reaching(levels, latest, t)
                while (current >= 0).any():
                    layers.append(current)
                    current = _last_reaching(levels, np.where(current >= 0, current - 1, -1), t)
            for depth, layer in enumerate(layers):
                held = layer >= 0
                slot_key = (push_pop, group_domain, depth)
                if slot_key not in slots:  # shared by the groups of every thread/process
                    slots[slot_key] = np.full(n, -1, dtype=np.int64)
                slots[slot_key][launches[held]] = members[layer[held]]
            if group_domain not in wanted or not layers:
                continue
            held = layers[0] >= 0
            candidate, where = members[layers[0][held]], launches[held]
            better = ranges.start_ns[candidate] > best_start[where]
            best[where[better]] = candidate[better]
            best_start[where[better]] = ranges.start_ns[candidate[better]]

    _fill_paths(path, slots, parent, ranges)
    return best, path


def _range_paths(parent: np.ndarray, ranges: NvtxRanges) -> np.ndarray:
    """The path string of every range: domain@outer/.../name, following push/pop parents."""
    chain = ranges.name.copy()
    # depth[i] = number of ancestors; chains are built shallow to deep, one step per level.
    depth = np.zeros(len(ranges), dtype=np.int64)
    up = parent.copy()
    while (up >= 0).any():
        has = up >= 0
        depth[has] += 1
        up[has] = parent[up[has]]
    for level in range(1, int(depth.max()) + 1):
        at = np.flatnonzero(depth == level)
        chain[at] = chain[parent[at]] + "/" + ranges.name[at]
    prefixes = np.array([f"{name}@" for name in ranges.domain_names], dtype=object)
    return prefixes[ranges.domain] + chain


def _fill_paths(
    path: np.ndarray,
    slots: dict[tuple[bool, int, int], np.ndarray],
    parent: np.ndarray,
    ranges: NvtxRanges,
) -> None:
    if not slots:
        return
    keys = list(slots)
    matrix = np.stack([slots[key] for key in keys])  # slots x launches
    filled = (matrix >= 0).sum(axis=0)
    per_range = _range_paths(parent, ranges)

    # One slot: the precomputed path of that range.
    for row in range(len(keys)):
        single = np.flatnonzero((filled == 1) & (matrix[row] >= 0))
        path[single] = per_range[matrix[row, single]]

    # Several slots: merge all holding ranges, outer first, one group per domain.
    multi = np.flatnonzero(filled >= 2)
    if not len(multi):
        return
    combos, inverse = np.unique(matrix[:, multi], axis=1, return_inverse=True)
    strings = []
    for column in range(combos.shape[1]):
        members: list[int] = []
        for row, (push_pop, _dom, _depth) in enumerate(keys):
            index = int(combos[row, column])
            while index >= 0:
                members.append(index)
                index = int(parent[index]) if push_pop else -1
        members.sort(key=lambda i: (ranges.start_ns[i], -ranges.end_ns[i]))
        groups: dict[str, list[str]] = {}
        for index in members:
            dom = ranges.domain_names[ranges.domain[index]]
            groups.setdefault(dom, []).append(str(ranges.name[index]))
        strings.append(";".join(f"{dom}@{'/'.join(names)}" for dom, names in groups.items()))
    path[multi] = np.array(strings, dtype=object)[inverse.reshape(-1)]


def _attribute(
    launch_ns: np.ndarray, launch_thread: np.ndarray, ranges: NvtxRanges | None, domain: str | None
) -> tuple[np.ndarray, np.ndarray]:
    if ranges is None:
        return np.full(len(launch_ns), -1, dtype=np.int64), np.empty(len(launch_ns), object)
    return attribute_nvtx(launch_ns, launch_thread, ranges, domain)


# --- kernels -> launches -------------------------------------------------------------------


def _match_launches(
    kernel_corr: np.ndarray,
    kernel_process: np.ndarray | None,
    runtime_corr: np.ndarray,
    runtime_process: np.ndarray,
) -> np.ndarray:
    """Row of each kernel's runtime call (same process and correlationId, first row), or -1."""
    result = np.full(len(kernel_corr), -1, dtype=np.int64)
    valid = kernel_corr != _NULL
    if not len(runtime_corr) or not valid.any():
        return result
    k_corr, r_corr = kernel_corr[valid], runtime_corr
    if kernel_process is None:  # no globalPid column: correlation ids alone
        k_key, r_key = k_corr, r_corr
    else:
        k_proc = kernel_process[valid]
        both = np.concatenate([k_proc, runtime_process])
        if both.min() == both.max():  # one process: the usual case
            k_key, r_key = k_corr, r_corr
        else:
            codes = _distinct(both)[1].astype(np.int64)
            corr = _distinct(np.concatenate([k_corr, r_corr]))[1].astype(np.int64)
            span = int(corr.max()) + 1
            k_key = codes[: len(k_corr)] * span + corr[: len(k_corr)]
            r_key = codes[len(k_corr) :] * span + corr[len(k_corr) :]
    low = min(int(k_key.min()), int(r_key.min()))
    high = max(int(k_key.max()), int(r_key.max()))
    rows = np.arange(len(r_key), dtype=np.int64)
    if high - low <= 4 * (len(k_key) + len(r_key)) + 4096:
        # Dense ids: a lookup table, no sort. Reversed writes leave the first row per key.
        table = np.full(high - low + 1, -1, dtype=np.int64)
        table[r_key[::-1] - low] = rows[::-1]
        result[valid] = table[k_key - low]
    else:
        order = np.argsort(r_key, kind="stable")
        sorted_key = r_key[order]
        at = np.minimum(np.searchsorted(sorted_key, k_key), len(sorted_key) - 1)
        result[valid] = np.where(sorted_key[at] == k_key, order[at], -1)
    return result


# --- the frame -----------------------------------------------------------------------------


def _int_array(values: np.ndarray):
    import pandas as pd

    return pd.arrays.IntegerArray(values, values == _NULL)


def _string_array(values: np.ndarray, missing: np.ndarray | None = None):
    """Object array of str -> pandas "string" array (NA where `missing`), in place."""
    import pandas as pd

    if missing is not None:
        values[missing] = pd.NA
    try:
        # Explicit storage: pandas 3's default StringDtype() may name pyarrow storage.
        return pd.arrays.StringArray(values, dtype=pd.StringDtype("python"))
    except TypeError:  # pandas 2: no dtype argument, and python storage
        return pd.arrays.StringArray(values)


def _constant_strings(value: str, n: int):
    values = np.empty(n, dtype=object)
    values.fill(value)  # one shared str; np.full would make n copies through a '<U' array
    return _string_array(values)


def _build_frame(columns: dict, n: int) -> pd.DataFrame:
    """The tidy frame, exactly schema.COLUMNS and COLUMN_DTYPES, from typed column arrays.

    Not schema.make_frame: it parses range names row by row (~3 s for 1M rows); here they
    are parsed once per distinct name with the same parse_range_name, and the arrays go
    into the frame without copies.
    """
    import pandas as pd

    for name, dtype in COLUMN_DTYPES.items():
        if name not in columns:  # a column nsys cannot know (e.g. "error")
            empty = np.nan if dtype == "float64" else pd.NA
            columns[name] = pd.Series(empty, index=pd.RangeIndex(n), dtype=dtype).array
    frame = pd.DataFrame({name: columns[name] for name in COLUMNS}, copy=False)
    wanted = {name: pd.api.types.pandas_dtype(dtype) for name, dtype in COLUMN_DTYPES.items()}
    if any(dtype != wanted[name] for name, dtype in frame.dtypes.items()):
        frame = frame.astype(COLUMN_DTYPES)  # a safety net; the arrays are typed already
    return frame


# --- public API ----------------------------------------------------------------------------


def read_nsys_sqlite(
    path: str | os.PathLike,
    *,
    domain: str | None = None,
    clock_control: str | None = None,
    cache_control: str | None = None,
) -> pd.DataFrame:
    """One row per CUDA kernel of an nsys SQLite export (in GPU start order).

    domain: attribute kernels only to ranges of this NVTX domain ("<default domain>" for
    the default one); nvtx_path still lists every range holding the launch.
    clock_control / cache_control: labels for the conditions of the run; nsys neither
    locks clocks nor flushes caches, so both default to "none".
    """
    path = Path(path)
    _check_sqlite_file(path)
    try:
        return _read(path, domain, clock_control or "none", cache_control or "none")
    except sqlite3.OperationalError as exc:
        if _is_lock_error(exc):
            raise ReportError(
                f"{path}: the database is locked by another process that is writing to it"
                f" ({one_line(exc, 100)} after {_BUSY_TIMEOUT_S:g} s; a rollback-journal database"
                " admits no reader meanwhile): wait for the writer to finish, or copy the file"
            ) from None
        raise ReportError(
            f"{path}: unreadable SQLite database ({one_line(exc, 200)}); is the file truncated"
            " or corrupt?"
        ) from None
    except sqlite3.Error as exc:  # "file is not a database", "malformed", ...
        # one_line: SQLite quotes whole multi-line table definitions in some messages.
        raise ReportError(
            f"{path}: unreadable SQLite database ({one_line(exc, 200)}); is the file truncated"
            " or corrupt?"
        ) from None
    except UnicodeDecodeError as exc:
        # Python decodes SQLite's own error messages strictly; a damaged schema quoted in one
        # of them fails that decoding. exc.object is the message's bytes.
        message = bytes(exc.object).decode("utf-8", "replace")
        raise ReportError(
            f"{path}: unreadable SQLite database ({one_line(message, 200)}); is the file"
            " truncated or corrupt?"
        ) from None


def _gaps(
    tables: set[str],
    strings_columns: set[str],
    runtime_columns: set[str],
    has_runtime: bool,
    nvtx_columns: set[str],
) -> list[str]:
    """One line per table the export lacks (or lacks the columns of), and what that costs."""
    gaps = []

    def lacks(table: str, columns: set[str], needed: set[str]) -> str:
        if table not in tables:
            return f"no {table} table"
        return f"{table} lacks column(s) {', '.join(sorted(needed - columns))}"

    if not {"start", "eventType"} <= nvtx_columns:
        gaps.append(
            f"{lacks(NVTX_TABLE, nvtx_columns, {'start', 'eventType'})} (nsys run without -t nvtx?):"
            " no kernel can be given an NVTX range; every kernel is '(no range)'"
        )
    if not has_runtime:
        gaps.append(
            f"{lacks(RUNTIME_TABLE, runtime_columns, {'correlationId', 'globalTid', 'start'})}"
            " (nsys run without -t cuda?): kernels cannot be tied to the calls that launched"
            " them, so every kernel is '(no range)' and its thread is unknown"
        )
    if not {"id", "value"} <= strings_columns:
        gaps.append(
            f"{lacks(STRINGS_TABLE, strings_columns, {'id', 'value'})}: kernel names are unknown"
            " (shown as '?') and NVTX ranges named by registered strings have no name"
        )
    return gaps


def _read(path: Path, domain: str | None, clock_control: str, cache_control: str):
    with closing(_connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if KERNEL_TABLE not in tables:
            raise ReportError(
                f"{path}: no CUDA kernel table ({KERNEL_TABLE}); was nsys run with"
                " `-t cuda` and did the program launch kernels?"
            )
        kernel_columns = _table_columns(conn, KERNEL_TABLE)
        if not {"start", "end"} <= kernel_columns:
            raise ReportError(f"{path}: {KERNEL_TABLE} has no start/end columns")
        if conn.execute(f"SELECT 1 FROM {KERNEL_TABLE} LIMIT 1").fetchone() is None:
            raise ReportError(
                f"{path}: the CUDA kernel table has no rows; did a kernel run while nsys"
                " traced CUDA?"
            )
        meta: dict[str, str | None] = {}
        if META_TABLE in tables and {"name", "value"} <= _table_columns(conn, META_TABLE):
            meta = {name: _as_text(value) for name, value in conn.execute(f"SELECT name, value FROM {META_TABLE}")}
        strings: dict[int, str] = {}
        strings_columns = _table_columns(conn, STRINGS_TABLE) if STRINGS_TABLE in tables else set()
        if {"id", "value"} <= strings_columns:
            rows = conn.execute(f"SELECT id, value FROM {STRINGS_TABLE} WHERE value IS NOT NULL")
            strings = {string_id: _as_text(value) for string_id, value in rows}
        runtime_columns = _table_columns(conn, RUNTIME_TABLE) if RUNTIME_TABLE in tables else set()
        nvtx_columns = _table_columns(conn, NVTX_TABLE) if NVTX_TABLE in tables else set()

    def kernel_column(name: str) -> str:
        return name if name in kernel_columns else "NULL"

    # shortName is the base name; older exports may only have demangledName.
    # Rows are keyed by the full name (template arguments tell apart e.g. the dozen torch
    # kernels that share the short name vectorized_elementwise_kernel); the short name is
    # for display. Older exports may lack either column.
    short = "shortName" in kernel_columns
    full_column = next(
        (c for c in ("demangledName", "mangledName", "shortName") if c in kernel_columns), "NULL"
    )
    name_column = "shortName" if short else full_column
    has_pid = "globalPid" in kernel_columns
    has_runtime = {"correlationId", "globalTid", "start"} <= runtime_columns
    gaps = _gaps(tables, strings_columns, runtime_columns, has_runtime, nvtx_columns)
    # Only launch calls (cudaLaunchKernel*, cuLaunchKernel*, cudaGraphLaunch, ...) can own a
    # kernel; the runtime table also holds every memcpy, sync, event... Kernels that find no
    # launch row are matched against the whole table afterwards.
    launch_filter = (
        f"nameId IN (SELECT id FROM {STRINGS_TABLE} WHERE value GLOB '*Launch*')"
        if "nameId" in runtime_columns and {"id", "value"} <= strings_columns
        else ""
    )
    runtime_exprs = ["correlationId", "globalTid", "start"]
    # deviceId and a CUPTI streamId (uint32) travel as one value: one text column less.
    placement = f"({kernel_column('deviceId')} << 32) | {kernel_column('streamId')}"

    # Independent reads in parallel threads (sqlite3 drops the GIL while SQLite works); the
    # small NVTX and runtime reads go first so that attributing launches to ranges overlaps
    # the big kernel-table reads.
    empty = np.empty(0, np.int64)
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        nvtx = pool.submit(_read_nvtx_ranges, path, strings)
        runtime = (
            _submit_int_columns(pool, path, RUNTIME_TABLE, runtime_exprs, launch_filter)
            if has_runtime
            else lambda: [empty, empty, empty]
        )
        kernels = _submit_int_columns(
            pool,
            path,
            KERNEL_TABLE,
            [
                "start",
                "end",
                kernel_column("correlationId"),
                name_column,
                full_column,
                placement,
                kernel_column("globalPid"),
                kernel_column("graphNodeId"),
            ],
        )
        ranges = nvtx.result()
        rt_corr, rt_thread, rt_start = runtime()
        rt_inner, rt_path = _attribute(rt_start, rt_thread, ranges, domain)
        start_ns, end_ns, corr, name_id, full_id, packed, global_pid, graph_node = kernels()
    # deviceId and streamId came packed in one value (NA both when either is NULL).
    device = np.where(packed != _NULL, packed >> 32, _NULL)
    stream = np.where(packed != _NULL, packed & 0xFFFFFFFF, _NULL)

    # Rows in GPU start order (stable: table order among equal starts).
    if len(start_ns) > 1 and (start_ns[1:] < start_ns[:-1]).any():
        order = np.argsort(start_ns, kind="stable")
        start_ns, end_ns, corr, name_id, full_id = (
            a[order] for a in (start_ns, end_ns, corr, name_id, full_id)
        )
        device, stream, global_pid, graph_node = (
            a[order] for a in (device, stream, global_pid, graph_node)
        )
    n = len(start_ns)

    known_pid = global_pid != _NULL
    kernel_process = np.where(known_pid, global_pid >> _ID_BITS, _NULL) if has_pid else None
    runtime_row = _match_launches(corr, kernel_process, rt_corr, rt_thread >> _ID_BITS)
    launched = runtime_row >= 0
    launch_thread = np.full(n, _NULL, dtype=np.int64)
    launch_thread[launched] = rt_thread[runtime_row[launched]]
    inner = np.full(n, -1, dtype=np.int64)
    inner[launched] = rt_inner[runtime_row[launched]]
    nvtx_path = np.empty(n, dtype=object)
    nvtx_path[launched] = rt_path[runtime_row[launched]]
    unmatched = np.flatnonzero(~launched & (corr != _NULL))
    if has_runtime and launch_filter and len(unmatched):
        # A kernel launched by a call without "Launch" in its name: use the whole table.
        all_corr, all_thread, all_start = _read_int_columns(path, RUNTIME_TABLE, runtime_exprs)
        rows = _match_launches(
            corr[unmatched],
            None if kernel_process is None else kernel_process[unmatched],
            all_corr,
            all_thread >> _ID_BITS,
        )
        found = rows >= 0
        unmatched, rows = unmatched[found], rows[found]
        launch_thread[unmatched] = all_thread[rows]
        inner[unmatched], nvtx_path[unmatched] = _attribute(
            all_start[rows], all_thread[rows], ranges, domain
        )
    thread_known = launch_thread != _NULL
    pid = np.where(known_pid, (global_pid >> _ID_BITS) & _ID_MASK, _NULL)
    from_thread = ~known_pid & thread_known  # no globalPid: the launching thread's process
    pid[from_thread] = (launch_thread[from_thread] >> _ID_BITS) & _ID_MASK
    tid = np.where(thread_known, launch_thread & _ID_MASK, _NULL)

    kernel_names, name_missing = _lookup_strings(name_id, strings)
    full_names, full_missing = _lookup_strings(full_id, strings)
    if not short and not name_missing.all():
        from nsprof.reports.names import short_kernel_name

        distinct, inverse = np.unique(kernel_names[~name_missing], return_inverse=True)
        shortened = np.array([short_kernel_name(s) for s in distinct], dtype=object)
        kernel_names[~name_missing] = shortened[inverse.reshape(-1)]

    held = inner >= 0
    range_name = np.empty(n, dtype=object)
    range_domain = np.empty(n, dtype=object)
    config_id = np.full(n, _NULL, dtype=np.int64)
    rep = np.full(n, _NULL, dtype=np.int64)
    named_mode = np.full(n, None, dtype=object)
    if held.any():
        index = inner[held]
        range_name[held] = ranges.name[index]
        range_domain[held] = np.array(ranges.domain_names, dtype=object)[ranges.domain[index]]
        # config_id and rep from nsprof's range names (schema.parse_range_name), per name.
        parsed = [parse_range_name(name) for name in ranges.distinct_names]
        code = ranges.name_code[index]
        config_id[held] = np.array([p[0] if p else _NULL for p in parsed], np.int64)[code]
        rep[held] = np.array([p[2] if p else _NULL for p in parsed], np.int64)[code]
        named_mode[held] = np.array([p[1] if p else None for p in parsed], dtype=object)[code]

    # A kernel without start or end (NULL in a damaged export) has no duration.
    duration_ns = (end_ns - start_ns).astype(np.float64)
    duration_ns[(start_ns == _NULL) | (end_ns == _NULL)] = np.nan
    # mode: what nsprof's range says was measured (as the ncu parsers do); elsewhere how the
    # kernel ran: a graph node id means it ran as a node of a replayed graph. (A "direct" call
    # may replay a graph inside, e.g. torch.compile's reduce-overhead: the range wins.)
    mode = np.array(["direct", "graph"], dtype=object)[(graph_node != _NULL).view(np.int8)]
    has_name = named_mode != None  # noqa: E711 - elementwise on an object array
    mode[has_name] = named_mode[has_name]
    frame = _build_frame(
        {
            "source": _constant_strings("nsys", n),
            "range": _string_array(range_name, ~held),
            "domain": _string_array(range_domain, ~held),
            "config_id": _int_array(config_id),
            "mode": _string_array(mode),
            "rep": _int_array(rep),
            "kernel": _string_array(kernel_names, name_missing),
            "kernel_full": _string_array(full_names, full_missing),
            "duration_ns": duration_ns,
            "cycles": np.full(n, np.nan),
            "clock_hz": np.full(n, np.nan),
            "graph_node": _int_array(graph_node),
            "workload": _constant_strings("kernel", n),
            "clock_control": _constant_strings(clock_control, n),
            "cache_control": _constant_strings(cache_control, n),
            "start_ns": _int_array(start_ns),
            "launch_id": _int_array(corr),
            "pid": _int_array(pid),
            "tid": _int_array(tid),
            "device": _int_array(device),
            "stream": _int_array(stream),
            "nvtx_path": _string_array(nvtx_path, nvtx_path == None),  # noqa: E711
        },
        n,
    )
    frame.attrs["warnings"] = gaps + blank_impossible(frame, ("duration_ns",))
    frame.attrs["nsys_schema_version"] = meta.get("EXPORT_SCHEMA_VERSION")
    frame.attrs["nsys_version"] = meta.get("EXPORT_PRODUCT_VERSION")
    return frame


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


def read_nsys_rep(
    path: str | os.PathLike, *, out_dir: str | os.PathLike | None = None, **kwargs
) -> pd.DataFrame:
    """Export an .nsys-rep to SQLite (export_nsys_rep), then read_nsys_sqlite(**kwargs).

    Without out_dir the export goes to a temporary folder, removed after the read.
    """
    import shutil

    export = export_nsys_rep(path, out_dir=out_dir)
    try:
        return read_nsys_sqlite(export, **kwargs)
    except ReportError as exc:  # name the user's report, not a temporary file
        raise ReportError(str(exc).replace(str(export), f"{os.fspath(path)} (its SQLite export)")) from None
    finally:
        if out_dir is None:
            shutil.rmtree(export.parent, ignore_errors=True)
