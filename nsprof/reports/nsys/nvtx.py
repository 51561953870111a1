"""NVTX ranges of an nsys export, and which ranges hold each kernel launch.

``NVTX_EVENTS``: eventType 59 = push/pop range (per thread and domain, properly nested),
60 = start/end range (any thread of the process, may overlap), 75 = domain create (its
``text`` names ``domainId`` within the creating process; 0 is the default domain).
``text`` is NULL for registered strings (the Python ``nvtx`` package registers them);
then ``textId`` points into ``StringIds``. An ``end`` of NULL: the range never closed.

A kernel's NVTX range is the innermost range (latest start) whose CPU span
``[start, end]`` holds the start of the API call that launched it.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nsprof.reports.nsys.sqlite import (
    ID_BITS,
    NULL,
    NVTX_TABLE,
    as_text,
    connect,
    distinct_values,
    read_int_columns,
    table_columns,
    table_names,
)
from nsprof.schema import DEFAULT_DOMAIN

NVTX_PUSH_POP = 59  # ENUM_NSYS_EVENT_TYPE NvtxPushPopRange
NVTX_START_END = 60  # NvtxStartEndRange
NVTX_DOMAIN_CREATE = 75  # NvtxDomainCreate
NEVER_ENDS = int(np.iinfo(np.int64).max)  # end of a range that was never closed


# --- NVTX ranges ---------------------------------------------------------------------------


@dataclass
class NvtxRanges:
    """NVTX ranges as parallel arrays (one entry per range)."""

    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64; NEVER_ENDS when the range was never closed
    push_pop: np.ndarray  # bool: push/pop (True) or start/end (False)
    thread: np.ndarray  # int64 globalTid of the push / start call; NULL when unknown
    domain: np.ndarray  # intp index into domain_names
    name: np.ndarray  # object: range name (str; "" when it has none)
    name_code: np.ndarray  # intp: name == distinct_names[name_code]
    distinct_names: list[str]
    domain_names: list[str]

    def __len__(self) -> int:
        return len(self.start_ns)


def read_nvtx_ranges(path: Path, strings: dict[int, str]) -> NvtxRanges | None:
    """The push/pop and start/end ranges of NVTX_EVENTS, or None when the export has none
    (no table, or no start/eventType column). `strings`: StringIds."""
    with closing(connect(path)) as conn:
        if NVTX_TABLE not in table_names(conn):
            return None
        columns = table_columns(conn, NVTX_TABLE)
        if not {"start", "eventType"} <= columns:
            return None

        def column(name: str) -> str:
            return name if name in columns else "NULL"

        # Unregistered strings are few (registered ones have text NULL): plain fetch.
        texts = (
            {
                rowid: as_text(text)
                for rowid, text in conn.execute(
                    f"SELECT rowid, text FROM {NVTX_TABLE} WHERE eventType IN (?, ?) AND text IS NOT NULL",
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
    rowid, start, end, kind, thread, domain_id, text_id = read_int_columns(
        path,
        NVTX_TABLE,
        [
            "rowid",
            "start",
            f"IFNULL({column('end')}, {NEVER_ENDS})",
            "eventType",
            column("globalTid"),
            f"IFNULL({column('domainId')}, 0)",
            column("textId"),
        ],
        where=f"eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END})",
    )
    domain_code, domain_names = _domains(thread, domain_id, domain_rows, strings)
    name_code, distinct_names = _range_names(rowid, text_id, texts, strings)
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


def _domains(
    thread: np.ndarray, domain_id: np.ndarray, domain_rows: list[tuple], strings: dict[int, str]
) -> tuple[np.ndarray, list[str]]:
    """Each range's domain as a code into a list of domain names.

    Id 0 is the default domain; others are named by their create event in the same
    process (ids are handles of one process; several processes may reuse them).
    """
    by_process: dict[tuple[int | None, int], str] = {}
    by_id: dict[int, str] = {}
    for dom_id, text, dom_text_id, creator in domain_rows:
        name = as_text(text) if text is not None else strings.get(dom_text_id)
        if isinstance(dom_id, int) and name is not None:
            process_of = creator >> ID_BITS if isinstance(creator, int) else None
            by_process[(process_of, dom_id)] = name
            by_id.setdefault(dom_id, name)
    process = np.where(thread != NULL, thread >> ID_BITS, NULL)
    if len(process) and process.min() == process.max():  # one process: the usual case
        ids, domain_code = distinct_values(domain_id)
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
    return domain_code, domain_names


def _range_names(
    rowid: np.ndarray, text_id: np.ndarray, texts: dict[int, str], strings: dict[int, str]
) -> tuple[np.ndarray, list[str]]:
    """Each range's name as a code into a list of distinct names (so that each name is
    parsed only once): the explicit text, else the registered string behind textId."""
    name_code = np.zeros(len(rowid), dtype=np.intp)
    distinct_names = [""]  # code 0: a range without a name
    registered = text_id != NULL
    if registered.any():
        ids, inverse = distinct_values(text_id[registered])
        name_code[registered] = inverse + len(distinct_names)
        distinct_names += [strings.get(int(i), "") for i in ids]
    if texts:
        position = np.searchsorted(rowid, np.fromiter(texts, np.int64, len(texts)))
        codes: dict[str, int] = {}
        for text in texts.values():
            codes.setdefault(text, len(distinct_names) + len(codes))
        name_code[position] = [codes[text] for text in texts.values()]
        distinct_names += list(codes)
    return name_code, distinct_names


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


def _keep_latest(best, best_start, start_ns, members, launches, layer) -> None:
    """Each of `launches` held by a range of `members` (`layer`: its index there, -1 for none) takes
    that range when it starts later than the range it has (innermost = latest start)."""
    held = layer >= 0
    candidate, where = members[layer[held]], launches[held]
    better = start_ns[candidate] > best_start[where]
    best[where[better]] = candidate[better]
    best_start[where[better]] = start_ns[candidate[better]]


def attribute_nvtx(
    launch_ns: np.ndarray,
    launch_thread: np.ndarray,
    ranges: NvtxRanges | None,
    domain: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The innermost NVTX range holding each launch, and the path of all ranges holding it.

    launch_ns / launch_thread: CPU start of the launching API call and its globalTid
    (NULL where unknown). Push/pop ranges count only on the same thread (they nest per
    thread and domain); start/end ranges count from any thread of the same process.
    Innermost = latest start; `domain` restricts that choice to one domain's ranges (the
    path still lists every range).

    Returns (index into `ranges` or -1, nvtx_path: object array, None where no range).
    """
    n = len(launch_ns)
    best = np.full(n, -1, dtype=np.int64)
    path = np.full(n, None, dtype=object)
    if ranges is None or not len(ranges) or not n:  # None: the export has no NVTX table
        return best, path
    best_start = np.full(n, NULL, dtype=np.int64)
    wanted = {code for code, name in enumerate(ranges.domain_names) if domain in (None, name)}
    known = launch_thread != NULL
    launch_keys = {
        True: _groups(np.where(known, launch_thread, NULL)),
        False: _groups(np.where(known, launch_thread >> ID_BITS, NULL)),
    }
    range_process = np.where(ranges.thread != NULL, ranges.thread >> ID_BITS, NULL)
    # The ranges holding a launch are fixed by a few "slots": per push/pop domain the
    # innermost range (its ancestors follow), per start/end domain the 1st, 2nd, ...
    # holding range. Paths are then built per range, or per distinct slot combination.
    slots: dict[tuple[bool, int, int], np.ndarray] = {}
    parent = np.full(len(ranges), -1, dtype=np.int64)

    for push_pop, range_key in ((True, ranges.thread), (False, range_process)):
        for members in _range_groups(ranges, range_key, push_pop):
            launches = launch_keys[push_pop].get(int(range_key[members[0]]))
            if launches is None:
                continue
            group_domain = int(ranges.domain[members[0]])
            start, end = ranges.start_ns[members], ranges.end_ns[members]
            levels = _prefix_max_levels(end)
            t = launch_ns[launches]
            latest = np.searchsorted(start, t, side="right") - 1
            if push_pop:
                layers = [_nested_layer(levels, latest, end, t, members, parent)]
            else:
                layers = _overlapping_layers(levels, latest, t)
            _record_slots(slots, layers, (push_pop, group_domain), launches, members, n)
            if group_domain in wanted and layers:
                _keep_latest(best, best_start, ranges.start_ns, members, launches, layers[0])

    _fill_paths(path, slots, parent, ranges)
    return best, path


def _range_groups(ranges: NvtxRanges, range_key: np.ndarray, push_pop: bool) -> list[np.ndarray]:
    """The ranges of one kind, split by (thread or process, domain), each sorted by start."""
    chosen = np.flatnonzero((ranges.push_pop == push_pop) & (range_key != NULL))
    if not len(chosen):
        return []
    # Within a group sort by (start, -end), so that of two ranges with one start the outer
    # one comes first.
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
    return np.split(chosen, cuts)


def _nested_layer(
    levels: list[np.ndarray],
    latest: np.ndarray,
    end: np.ndarray,
    t: np.ndarray,
    members: np.ndarray,
    parent: np.ndarray,
) -> np.ndarray:
    """Push/pop ranges of one group: the innermost one holding each t (-1: none).

    Also fills `parent` for the group's members.
    """
    # Parent = the latest earlier range that outlasts this one (they nest).
    local_parent = _last_reaching(levels, np.arange(-1, len(members) - 1, dtype=np.int64), end)
    parent[members] = np.where(local_parent >= 0, members[local_parent], -1)
    # Walk up from the latest-started range until one still holds t: one numpy step per
    # nesting level.
    inner = latest
    pending = np.flatnonzero(inner >= 0)
    pending = pending[end[inner[pending]] < t[pending]]
    while len(pending):
        inner[pending] = local_parent[inner[pending]]
        pending = pending[inner[pending] >= 0]
        pending = pending[end[inner[pending]] < t[pending]]
    return inner


def _overlapping_layers(levels: list[np.ndarray], latest: np.ndarray, t: np.ndarray) -> list[np.ndarray]:
    """Start/end ranges of one group: the 1st, 2nd, ... range holding each t (-1: none)."""
    # They may overlap: the k-th holding range is the latest-started one before the
    # (k-1)-th that still reaches t.
    layers = []
    current = _last_reaching(levels, latest, t)
    while (current >= 0).any():
        layers.append(current)
        current = _last_reaching(levels, np.where(current >= 0, current - 1, -1), t)
    return layers


def _record_slots(
    slots: dict,
    layers: list[np.ndarray],
    group: tuple[bool, int],
    launches: np.ndarray,
    members: np.ndarray,
    n: int,
) -> None:
    """Store each layer's holding range per launch under its slot (kind, domain, depth)."""
    for depth, layer in enumerate(layers):
        held = layer >= 0
        slot_key = (*group, depth)
        if slot_key not in slots:  # shared by the groups of every thread/process
            slots[slot_key] = np.full(n, -1, dtype=np.int64)
        slots[slot_key][launches[held]] = members[layer[held]]


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
