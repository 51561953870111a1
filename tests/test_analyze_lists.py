"""`nsprof analyze` printing tables reads a small plain ncu CSV as plain lists (a ListTable) and
summarises, chooses and prints it without pandas; every other report and output goes through
the DataFrame. Both paths must print the same bytes, and hold the same numbers to the last bit."""

from __future__ import annotations

import csv
import math
import struct

import pandas as pd
import pytest
from click.testing import CliRunner

import nsprof.reports.ncu_csv as ncu_csv
from nsprof.analysis.listing import order, select
from nsprof.analysis.summary import SUMMARY_COLUMNS, summarize
from nsprof.cli import cli
from nsprof.reports import read_report
from nsprof.reports.ncu_cells import PUSH_POP_PREFIX
from nsprof.schema import COLUMNS, ListTable, column_list, make_frame, tidy_rows
from tests.conftest import FIXTURES

RAW = FIXTURES / "fixture_node_raw.csv"


def _variants(tmp_path) -> list:
    """The fixtures' ncu CSVs, and variants of the raw page: gaps, negative durations, odd NVTX cells, two kernels of one short name, a graph row, ncu's notes above it."""
    rows = list(csv.reader(RAW.open(newline="")))
    head = rows[0]
    duration = head.index("gpu__time_duration.sum")
    push_pop = next(i for i, c in enumerate(head) if c.startswith(PUSH_POP_PREFIX))
    kernel = head.index("Kernel Name")
    edited = {}
    edited["gaps"] = [list(r) for r in rows]
    edited["gaps"][3][duration], edited["gaps"][4][duration], edited["gaps"][5][duration] = "n/a", "", "NaN"
    edited["impossible"] = [list(r) for r in rows]
    edited["impossible"][3][duration], edited["impossible"][6][duration] = "-5", "-0.25"
    edited["nvtx"] = [list(r) for r in rows]
    edited["nvtx"][6][push_pop] = edited["nvtx"][6][push_pop].replace(
        "cfg0.direct.r0", "cfg" + "9" * 30 + ".direct.r0"
    )
    edited["nvtx"][7][push_pop] = (
        '452  "nsprof:a:none:none:none:none:none:a"  "other:b:none:none:none:none:none:b"'
    )
    edited["nvtx"][8][push_pop] = ""
    edited["names"] = [list(r) for r in rows]
    edited["names"][4][kernel] = "void ns::gemm_kernel<float, 128>(float*)"
    edited["names"][5][kernel] = "void ns::gemm_kernel<half, 64>(half*)"
    edited["names"][6][kernel] = "graph"
    paths = [RAW, FIXTURES / "fixture_graph_raw.csv", FIXTURES / "fixture_clock_none_raw.csv"]
    for name, table in edited.items():
        paths.append(tmp_path / f"{name}.csv")
        with paths[-1].open("w", newline="") as handle:
            csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(table)
    paths.append(tmp_path / "preamble.csv")
    paths[-1].write_text((FIXTURES / "ncu_clock_none.log").read_text() + RAW.read_text())
    return paths


def _bits(value):
    """A cell as something == compares to the last bit: floats by their bytes, NA and None alike."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float):
        return struct.pack("<d", value) if not math.isnan(value) else "nan"
    return value


def _same_table(lists: ListTable, frame: pd.DataFrame, columns) -> None:
    assert len(lists) == len(frame)
    for column in columns:
        assert [_bits(v) for v in lists[column]] == [_bits(v) for v in frame[column].tolist()], column


def test_lists_read_as_the_frame_reads(tmp_path):
    for path in _variants(tmp_path):
        lists = read_report(path, as_rows=True)
        frame = read_report(path)
        assert isinstance(lists, ListTable), path.name  # every variant is small and plain
        assert isinstance(frame, pd.DataFrame)
        _same_table(lists, frame, COLUMNS)
        assert lists.attrs == frame.attrs, path.name


def test_a_report_the_lists_cannot_hold_exactly_is_a_frame():
    # the details page, other kinds: the frame, whatever as_rows asks
    for path in (FIXTURES / "fixture_node_details.csv", FIXTURES / "fixture.sqlite"):
        assert isinstance(read_report(path, as_rows=True), pd.DataFrame), path.name
    # text in a number column, an int past int64, a non-text label: no ListTable
    assert tidy_rows({"duration_ns": ["12"]}) is None
    assert tidy_rows({"launch_id": [2**63]}) is None
    assert tidy_rows({"kernel": [3]}) is None
    table = tidy_rows(
        {"range": ["cfg3.s1.graph.r2", None], "duration_ns": [1.5, None], "launch_id": [7, None]}
    )
    _same_table(
        table,
        make_frame({"range": ["cfg3.s1.graph.r2", None], "duration_ns": [1.5, None], "launch_id": [7, None]}),
        COLUMNS,
    )


@pytest.mark.parametrize(
    "choice",
    [
        {},
        {"kernel": "gemm"},
        {"range_": "cfg1", "warmup": False},
        {"by": "median", "top": 3},
        {"by": "total"},
        {"by": "count", "top": 1},
        {"by": "name"},
        {"kernel": "nothing matches this"},
    ],
)
def test_summary_select_order_of_lists_equal_the_frames(tmp_path, choice):
    by, top = choice.get("by", "range"), choice.get("top")
    picks = {k: v for k, v in choice.items() if k in ("kernel", "range_", "warmup")}
    for path in _variants(tmp_path):
        lists = order(select(summarize(read_report(path, as_rows=True)), **picks), by, top)
        frame = order(select(summarize(read_report(path)), **picks), by, top)
        assert isinstance(lists, ListTable)
        _same_table(lists, frame, SUMMARY_COLUMNS)


def _analyze(argv, monkeypatch, lists: bool):
    """stdout, stderr and exit status of `nsprof analyze argv`, with the lists path on or off
    (off: read_ncu_csv never makes a ListTable); and how many reports came as lists."""
    made = []

    def counted(rows, real=ncu_csv.tidy_rows):
        table = real(rows) if lists else None
        made.append(table is not None)
        return table

    with monkeypatch.context() as patch:
        patch.setattr(ncu_csv, "tidy_rows", counted)
        result = CliRunner().invoke(cli, ["analyze", *argv])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return (result.stdout, result.stderr, result.exit_code), sum(made)


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--format", "markdown"],
        ["--names", "demangled"],
        ["--names", "demangled", "--wide"],
        ["--wide", "--no-warmup"],
        ["--sort", "total", "--top", "3", "--timeunit", "ns"],
        ["--sort", "name", "--kernel", "gemm", "--range", "cfg1"],
        ["--sort", "count", "--timeunit", "ms"],
    ],
)
def test_analyze_prints_the_same_by_lists_and_by_frames(tmp_path, monkeypatch, options):
    variants = _variants(tmp_path)
    others = [FIXTURES / "fixture_node_details.csv", FIXTURES / "fixture.sqlite", tmp_path / "missing.csv"]
    argv = [*map(str, variants + others), *options]
    by_lists, made = _analyze(argv, monkeypatch, lists=True)
    by_frames, none = _analyze(argv, monkeypatch, lists=False)
    assert made == len(variants) and none == 0  # each path was the one taken
    assert by_lists == by_frames
    assert by_lists[2] == 2 and "missing.csv" in by_lists[1]  # the missing file named, the rest printed
    assert by_lists[0].count("rows, ") == len(variants) + 2


def test_outputs_other_than_tables_read_frames(tmp_path, monkeypatch):
    for options in (
        ["--format", "csv"],
        ["--format", "json"],
        ["--json"],
        ["--csv", str(tmp_path / "t.csv")],
    ):
        (out, err, status), made = _analyze([str(RAW), *options], monkeypatch, lists=True)
        assert made == 0 and status == 0, options


def test_column_list_reads_both_tables():
    frame = make_frame({"kernel": ["a", None]})
    table = tidy_rows({"kernel": ["a", None]})
    assert column_list(frame, "kernel") == ["a", pd.NA]
    assert column_list(table, "kernel") == ["a", None]
    assert table.take([1, 0])["kernel"] == [None, "a"]
    with pytest.raises(ValueError):
        table["kernel"] = ["only one"] * 3
