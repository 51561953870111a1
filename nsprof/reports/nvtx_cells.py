"""NVTX state as ncu prints it, and the choice of one "innermost" range.

ncu records no times for NVTX ranges, only each domain's push/pop stack and the open
start/end ranges. When several domains have a stack, the innermost range is taken from the
deepest stack (ties: the default domain, whose ranges are usually the user's own, innermost
annotations); push/pop ranges win over start/end ranges. Passing `domain` restricts the
choice to that domain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nsprof.schema import DEFAULT_DOMAIN

# One entry of ncu's CSV NVTX cell: domain:range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg.
# Msg repeats the range name for registered/ASCII messages; the back-reference lets range
# names contain ':' in that case; so does an unregistered name, whose two message fields are "none".
_ENTRY_SAME_MSG = re.compile(r"^(?P<domain>[^:]*):(?P<range>.*):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:(?P=range)$")
_ENTRY_NO_MSG = re.compile(r"^(?P<domain>[^:]*):(?P<range>.*):[^:]*:[^:]*:[^:]*:[^:]*:none:none$")
_ENTRY_ANY = re.compile(r"^(?P<domain>[^:]*):(?P<range>.*?):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:.*$")
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')


@dataclass
class NvtxState:
    push_pop: dict[str, list[str]] = field(default_factory=dict)  # domain -> outer..inner
    start_end: dict[str, list[str]] = field(default_factory=dict)  # domain -> open ranges

    def innermost(self, domain: str | None = None) -> tuple[str | None, str | None]:
        """(range, domain) of the innermost range, or (None, None)."""
        stacks = {d: s for d, s in self.push_pop.items() if s and (domain is None or d == domain)}
        if stacks:
            best = max(stacks, key=lambda d: (len(stacks[d]), d == DEFAULT_DOMAIN))
            return stacks[best][-1], best
        opened = {d: s for d, s in self.start_end.items() if s and (domain is None or d == domain)}
        if opened:
            best = max(opened, key=lambda d: (len(opened[d]), d == DEFAULT_DOMAIN))
            return opened[best][-1], best
        return None, None

    def path(self) -> str | None:
        parts = [f"{d}@{'/'.join(s)}" for d, s in self.push_pop.items() if s]
        parts += [f"{d}@{','.join(s)}" for d, s in self.start_end.items() if s]
        return ";".join(parts) or None


def _split_entry(entry: str) -> tuple[str, str] | None:
    match = _ENTRY_SAME_MSG.match(entry) or _ENTRY_NO_MSG.match(entry) or _ENTRY_ANY.match(entry)
    if not match:
        return None
    return match["domain"] or DEFAULT_DOMAIN, match["range"]


def parse_csv_cells(push_pop_cell: str | None, start_end_cell: str | None) -> NvtxState:
    """Parse the two NVTX columns of `ncu --csv` (raw or details page).

    Push/pop:  `452  "nsprof:outer:none:...:outer"  "nsprof:cfg0.direct.r0:...:cfg0.direct.r0" `
    (thread id, then one quoted entry per open range, grouped by domain, outer first).
    Start/end: ` "0:<default domain>:startend:none:none:none:none:none:none" ` (id first).
    """
    state = NvtxState()
    for raw in _QUOTED.findall(push_pop_cell or ""):
        parsed = _split_entry(raw.replace('""', '"'))
        if parsed:
            state.push_pop.setdefault(parsed[0], []).append(parsed[1])
    for raw in _QUOTED.findall(start_end_cell or ""):
        entry = raw.replace('""', '"')
        _, _, rest = entry.partition(":")  # drop the range id
        parsed = _split_entry(rest)
        if parsed:
            state.start_end.setdefault(parsed[0], []).append(parsed[1])
    return state


def thread_id(push_pop_cell: str | None) -> int | None:
    return _tid((push_pop_cell or "").strip().split(" ", 1)[0])


def _tid(text: str) -> int | None:
    # A thread id longer than int64's digits (the tidy column) is damage, not an id.
    return int(text) if text.isascii() and text.isdigit() and len(text.lstrip("0")) <= 18 else None


# The shape nearly every push/pop cell has: a thread id, then k entries of exactly eight
# ':'-fields, no quote or ':' inside a field. Such a cell is parsed by whole-column regular
# expressions; any other cell (start/end ranges open, several domains, ':' or '"' in a
# name, a filter's domain missing) goes through parse_csv_cells, one distinct cell at a time.
_FIELD = r'[^":]*'
_MAX_PLAIN_DEPTH = 8
# ASCII whitespace, spelled out: RE2's \s is this class, Python's also matches other characters.
_SPACE = r"[\t\n\f\r ]"
_EMPTY_CELL = rf"{_SPACE}*([0-9]+{_SPACE}*)?"  # no range open: a thread id at most


def _plain_cell_pattern(depth: int) -> str:
    """Thread id `tid`, then entry j's domain `d<j>` and range `r<j>` (RE2 and re alike)."""
    entries = "".join(
        rf'{_SPACE}+"(?P<d{j}>{_FIELD}):(?P<r{j}>{_FIELD})(?::{_FIELD}){{6}}"' for j in range(depth)
    )
    return rf"^{_SPACE}*(?P<tid>[0-9]+){entries}{_SPACE}*$"


_EMPTY_CELL_RE = re.compile(_EMPTY_CELL)
_PLAIN_CELL_RES = {k: re.compile(_plain_cell_pattern(k)) for k in range(1, _MAX_PLAIN_DEPTH + 1)}


def cell_attribution(push_pop_cell: str, start_end_cell: str, domain: str | None = None) -> tuple:
    """(range, domain, nvtx_path, tid) of one row's pair of cells: parse_csv_columns' answer for
    one pair, by the same patterns (for a report of few rows, where whole-column work costs more
    than it saves)."""
    if '"' not in start_end_cell:
        depth = push_pop_cell.count('"') // 2
        if depth == 0 and _EMPTY_CELL_RE.fullmatch(push_pop_cell):
            return None, None, None, _tid(push_pop_cell.strip())
        match = _PLAIN_CELL_RES[depth].fullmatch(push_pop_cell) if 1 <= depth <= _MAX_PLAIN_DEPTH else None
        if match:
            domains = {match[f"d{j}"] or DEFAULT_DOMAIN for j in range(depth)}
            if len(domains) == 1:
                (own,) = domains
                names = [match[f"r{j}"] for j in range(depth)]
                path = f"{own}@{'/'.join(names)}"
                if domain is not None and own != domain:
                    return None, None, path, _tid(match["tid"])
                return names[-1], own, path, _tid(match["tid"])
    state = parse_csv_cells(push_pop_cell, start_end_cell)
    return (*state.innermost(domain), state.path(), thread_id(push_pop_cell))


def parse_csv_columns(push_pop, start_end, domain: str | None = None, *, rows: int = 0) -> dict[str, list]:
    """NVTX attribution for whole ncu CSV columns: {"range", "domain", "nvtx_path", "tid"}.

    The same answers as parse_csv_cells(...).innermost(domain), .path() and thread_id() cell
    by cell, computed once per distinct cell, with the common cell shape parsed column-wise.
    `push_pop` and `start_end` are equal-length pandas Series of strings, or None for a
    column the file lacks (`rows` then gives the length when both are None).
    """
    import numpy as np
    import pandas as pd

    if push_pop is None and start_end is None:
        return {key: [None] * rows for key in ("range", "domain", "nvtx_path", "tid")}
    n = len(push_pop) if push_pop is not None else len(start_end)
    pp = (push_pop if push_pop is not None else pd.Series([""] * n)).fillna("").astype(str)
    se = (start_end if start_end is not None else pd.Series([""] * n)).fillna("").astype(str)
    codes, pp_uniques, se_uniques, pair_pp, pair_se = _distinct_pairs(pp, se)
    dtype = "string[pyarrow]" if _has_pyarrow() else "string[python]"
    uniques = pd.Series(np.asarray(pp_uniques, dtype=object)[pair_pp], dtype=dtype)
    # An open start/end range (a quote in its cell) makes a pair the slow path's.
    se_open = (
        pd.Series(np.asarray(se_uniques, dtype=object)).str.contains('"', regex=False).to_numpy(dtype=bool)
    )
    count = len(uniques)
    out = {key: np.full(count, None, dtype=object) for key in ("range", "domain", "nvtx_path", "tid")}
    done = np.zeros(count, dtype=bool)

    candidate = ~se_open[pair_se]
    depth = uniques.str.count('"').to_numpy(dtype="int64") // 2
    empty = candidate & (depth == 0)
    empty[empty] = uniques[empty].str.fullmatch(_EMPTY_CELL).to_numpy(dtype=bool)
    # No range open: a thread id at most.
    heads = uniques[empty].str.strip()
    out["tid"][empty] = [_tid(h) for h in heads.tolist()]
    done |= empty
    for k in sorted(set(depth[candidate & ~done].tolist())):
        if not 1 <= k <= _MAX_PLAIN_DEPTH:
            continue
        index = np.flatnonzero(candidate & ~done & (depth == k))
        done[_plain_cells(uniques, index, k, domain, out)] = True
    for position in np.flatnonzero(~done):
        pp_cell, se_cell = pp_uniques[pair_pp[position]], se_uniques[pair_se[position]]
        state = parse_csv_cells(pp_cell, se_cell)
        out["range"][position], out["domain"][position] = state.innermost(domain)
        out["nvtx_path"][position] = state.path()
        out["tid"][position] = thread_id(pp_cell)
    return {key: values[codes] for key, values in out.items()}


def _distinct_pairs(pp, se):
    """One code per row for its distinct (push/pop, start/end) pair: (codes, push/pop
    uniques, start/end uniques, and each pair's index into the two)."""
    import numpy as np
    import pandas as pd

    pp_codes, pp_uniques = pd.factorize(pp, use_na_sentinel=False)
    se_codes, se_uniques = pd.factorize(se, use_na_sentinel=False)
    codes, pairs = pd.factorize(pp_codes.astype("int64") * len(se_uniques) + se_codes, use_na_sentinel=False)
    pair_pp, pair_se = np.divmod(pairs.astype("int64"), len(se_uniques))
    return codes, pp_uniques, se_uniques, pair_pp, pair_se


def _plain_cells(uniques, index, k: int, domain: str | None, out: dict):
    """Fill `out` for the cells at `index` that hold k plain ranges of one domain; returns
    the positions it filled (the rest go to the slow path)."""
    import numpy as np

    parts = _extract(uniques.iloc[index], _plain_cell_pattern(k))
    matched = parts["tid"].notna().to_numpy(dtype=bool)
    parts = parts[matched]
    index = index[matched]
    doms = [parts[f"d{j}"].fillna("").replace("", DEFAULT_DOMAIN) for j in range(k)]
    same = np.ones(len(parts), dtype=bool)
    for j in range(1, k):
        same &= (doms[j] == doms[0]).to_numpy(dtype=bool)
    # Several domains: the slow path picks among their stacks.
    index, parts, doms = index[same], parts[same], [d[same] for d in doms]
    if not len(index):
        return index
    names = [parts[f"r{j}"] for j in range(k)]
    joined = names[0].str.cat(names[1:], sep="/") if k > 1 else names[0]
    out["nvtx_path"][index] = (doms[0] + "@" + joined).to_numpy(dtype=object)
    innermost = names[-1].to_numpy(dtype=object)
    innermost_domain = doms[0].to_numpy(dtype=object)
    if domain is not None:
        keep = innermost_domain == domain
        innermost = np.where(keep, innermost, None)
        innermost_domain = np.where(keep, innermost_domain, None)
    out["range"][index] = innermost
    out["domain"][index] = innermost_domain
    out["tid"][index] = [_tid(t) for t in parts["tid"].tolist()]
    return index


def _extract(strings, pattern: str):
    """Series.str.extract of a pattern whose groups are all named, by pyarrow's RE2 kernel when
    pyarrow is there (pandas runs Python's re value by value); None where it does not match."""
    import pandas as pd

    if not _has_pyarrow():
        return strings.str.extract(pattern)
    import pyarrow as pa
    import pyarrow.compute as pc

    result = pc.extract_regex(pa.array(strings.astype(object), type=pa.string()), pattern)
    # A value that does not match is null in the struct only, not in its fields.
    unmatched = ~result.is_valid().to_numpy(zero_copy_only=False)
    columns = {}
    for group in result.type:
        values = result.field(group.name).to_numpy(zero_copy_only=False).astype(object)
        values[unmatched] = None
        columns[group.name] = pd.Series(values, index=strings.index, dtype=object)
    return pd.DataFrame(columns)


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None
