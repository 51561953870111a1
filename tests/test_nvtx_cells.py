"""Column-wise NVTX cell parsing gives exactly the per-cell answers (parse_csv_cells)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsprof.reports.nvtx_cells import parse_csv_cells, parse_csv_columns, thread_id


def per_cell(push_pop: list[str], start_end: list[str], domain):
    out = {"range": [], "domain": [], "nvtx_path": [], "tid": []}
    for pp, se in zip(push_pop, start_end):
        state = parse_csv_cells(pp, se)
        name, dom = state.innermost(domain)
        out["range"].append(name)
        out["domain"].append(dom)
        out["nvtx_path"].append(state.path())
        out["tid"].append(thread_id(pp))
    return out


def entry(domain: str, name: str, msg: str | None = None) -> str:
    return f'"{domain}:{name}:none:none:RGB:0xff:REGISTERED:{name if msg is None else msg}"'


CELLS = [
    f"452  {entry('nsprof', 'nsprof')}  {entry('nsprof', 'cfg0.direct.r0')} ",
    f"452  {entry('nsprof', 'nsprof')}  {entry('nsprof', 'cfg12.graph.r4')} ",
    f"452  {entry('', 'anon')} ",  # empty domain: the default domain
    f"7  {entry('<default domain>', 'torch_push')}  {entry('nsprof', 'nsprof')} ",  # two domains
    f"7  {entry('dom', 'a:b')} ",  # ':' in a registered name
    '7  "dom:a""q:none:none:RGB:0xff:REGISTERED:a""q" ',  # an escaped quote in a name
    f"7  {entry('dom', 'x', 'other:msg:with:colons')} ",
    "".join(f"  {entry('d', f'r{i}')}" for i in range(10)).join(["9", " "]),  # deeper than 8
    "452",
    "",
    "  ",
    "\u00a0452 ",
    "junk",
    f"x {entry('d', 'r')}",
    '"unbalanced',
]
START_END = ["", " ", ' "0:<default domain>:startend:none:none:none:none:none:none" ']


@pytest.mark.parametrize("with_pyarrow", [True, False])
@pytest.mark.parametrize("domain", [None, "nsprof", "<default domain>", "dom", "absent"])
def test_columns_match_cells(domain, with_pyarrow, monkeypatch):
    import nsprof.reports.nvtx_cells as cells_module

    if with_pyarrow:
        pytest.importorskip("pyarrow")
    else:  # pandas' own str.extract and python strings
        monkeypatch.setattr(cells_module, "_has_pyarrow", lambda: False)
    pairs = [(pp, se) for pp in CELLS for se in START_END] * 3  # repeats: the per-distinct cache
    push_pop, start_end = [p for p, _ in pairs], [s for _, s in pairs]
    got = parse_csv_columns(pd.Series(push_pop), pd.Series(start_end), domain)
    expected = per_cell(push_pop, start_end, domain)
    for key, values in expected.items():
        assert list(got[key]) == values, key


def test_missing_columns():
    got = parse_csv_columns(None, None, rows=3)
    assert got == {key: [None] * 3 for key in ("range", "domain", "nvtx_path", "tid")}
    only_se = parse_csv_columns(None, pd.Series(START_END))
    assert list(only_se["range"]) == [None, None, "startend"]


_piece = st.sampled_from(["nsprof", "cfg0.direct.r0", "", "a:b", 'q"', " ", "<default domain>", "é", "0"])


@st.composite
def cells(draw):
    entries = draw(st.lists(st.tuples(_piece, _piece, st.one_of(st.none(), _piece)), max_size=4))
    head = draw(st.sampled_from(["452", "", "1 ", "x"]))
    return head + "".join(f"  {entry(d, n, m)}" for d, n, m in entries) + draw(st.sampled_from(["", " "]))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(cells(), st.sampled_from(START_END)), min_size=1, max_size=12),
    st.sampled_from([None, "nsprof", "<default domain>"]),
)
def test_columns_match_cells_on_generated_cells(pairs, domain):
    push_pop, start_end = [p for p, _ in pairs], [s for _, s in pairs]
    got = parse_csv_columns(pd.Series(push_pop), pd.Series(start_end), domain)
    expected = per_cell(push_pop, start_end, domain)
    for key, values in expected.items():
        assert list(got[key]) == values, key
