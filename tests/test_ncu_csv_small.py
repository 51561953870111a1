"""A small ncu raw page is read cell by cell (the csv module, lists); a large or unusual one by
pandas' column path. Both must give the same tidy table, to the last bit and dtype."""

from __future__ import annotations

import csv

import pytest
from pandas.testing import assert_frame_equal

import nsprof.reports.ncu_csv as ncu_csv
from nsprof.errors import ReportError
from nsprof.reports.ncu_cells import PUSH_POP_PREFIX
from nsprof.schema import make_frame
from tests.conftest import FIXTURES

RAW = FIXTURES / "fixture_node_raw.csv"


def _variants(tmp_path):
    rows = list(csv.reader(RAW.open(newline="")))
    duration = rows[0].index("gpu__time_duration.sum")
    push_pop = next(i for i, c in enumerate(rows[0]) if c.startswith(PUSH_POP_PREFIX))
    gaps = [list(r) for r in rows]
    gaps[3][duration], gaps[4][duration], gaps[5][duration] = "n/a", "", "NaN"
    nvtx = [list(r) for r in rows]
    nvtx[6][push_pop] = nvtx[6][push_pop].replace("cfg0.direct.r0", "cfg" + "9" * 30 + ".direct.r0")
    nvtx[7][push_pop] = '452\t"nsprof:outer:none:none:none:none:none:outer"  "<default domain>:a:b:c:d:e:f:x"'
    nvtx[8][push_pop] = '452  "nsprof:a:none:none:none:none:none:a"  "other:b:none:none:none:none:none:b"'
    out = {}
    for name, table in (("gaps", gaps), ("nvtx", nvtx)):
        out[name] = tmp_path / f"{name}.csv"
        with out[name].open("w", newline="") as handle:
            csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(table)
    out["crlf"] = tmp_path / "crlf.csv"
    out["crlf"].write_bytes(RAW.read_bytes().replace(b"\n", b"\r\n"))
    out["preamble"] = tmp_path / "preamble.csv"
    out["preamble"].write_text((FIXTURES / "ncu_clock_none.log").read_text() + RAW.read_text())
    return out


@pytest.mark.parametrize("domain", [None, "nsprof", "<default domain>"])
def test_small_page_reads_as_the_column_path_reads_it(tmp_path, monkeypatch, domain):
    inputs = [
        FIXTURES / n for n in ("fixture_node_raw.csv", "fixture_graph_raw.csv", "fixture_clock_none_raw.csv")
    ]
    inputs += _variants(tmp_path).values()
    original = ncu_csv.raw_small
    small_used = []

    def spy(*args, **kwargs):
        small_used.append(original(*args, **kwargs))
        return small_used[-1]

    for path in inputs:
        monkeypatch.setattr(ncu_csv, "raw_small", spy)
        small = ncu_csv.read_ncu_csv(path, domain=domain)
        monkeypatch.setattr(ncu_csv, "raw_small", lambda *args, **kwargs: None)
        column = ncu_csv.read_ncu_csv(path, domain=domain)
        assert_frame_equal(small, column, check_exact=True)
        assert small.attrs == column.attrs
    assert all(used is not None for used in small_used)  # each of them took the small path


def test_unusual_pages_take_the_column_path(tmp_path):
    text = RAW.read_bytes()
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(text.replace(b'"python3.12"', b'"python3.12\xe9"'))  # not UTF-8
    columns = next(csv.reader([text[: text.find(b"\n")].decode()]))
    assert ncu_csv.raw_small(latin1.read_bytes(), columns, latin1, None, None) is None
    rows = list(csv.reader(RAW.open(newline="")))
    ragged = tmp_path / "ragged.csv"
    with ragged.open("w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows[:5] + [rows[5][:10]] + rows[6:])
    assert ncu_csv.raw_small(ragged.read_bytes(), columns, ragged, None, None) is None
    try:
        frame = ncu_csv.read_ncu_csv(ragged)
    except ReportError as exc:  # the column path decides
        pytest.fail(str(exc))
    assert len(frame) == 27


def test_a_config_id_of_18_digits_stays_exact(tmp_path):
    # Parsed from the range name; through float64 it would print as cfg123456789012345680.
    from nsprof.analysis.summary import summarize

    rows = list(csv.reader(RAW.open(newline="")))
    push_pop = next(i for i, c in enumerate(rows[0]) if c.startswith(PUSH_POP_PREFIX))
    for row in rows[2:]:
        row[push_pop] = row[push_pop].replace("cfg0.direct", "cfg123456789012345678.direct")
    path = tmp_path / "big_id.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    frame = ncu_csv.read_ncu_csv(path)
    assert 123456789012345678 in frame["config_id"].dropna().tolist()
    assert "cfg123456789012345678.direct" in summarize(frame)["range"].tolist()
    listed = make_frame([{"source": "ncu", "range": "cfg123456789012345678.direct.r0", "duration_ns": 1.0}])
    assert listed["config_id"].tolist() == [123456789012345678]
