"""ncu CSV parsing, checked against an independent read of the real fixtures (csv module)."""

from __future__ import annotations

import csv
import re

import pytest
from conftest import FIXTURES

from nsprof.errors import ReportError
from nsprof.reports.ncu_csv import detect_decimal_mark, read_ncu_csv
from nsprof.reports.nvtx_cells import parse_csv_cells

RAW = FIXTURES / "fixture_node_raw.csv"
DETAILS = FIXTURES / "fixture_node_details.csv"
GRAPH_RAW = FIXTURES / "fixture_graph_raw.csv"
PP_COL = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
SE_COL = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"


def independent_raw(path):
    """Rows of a raw page by the csv module: (id, innermost range, kernel, ns, cycles, hz)."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, units = rows[0], rows[1]
    col = {name: i for i, name in enumerate(header)}
    assert units[col["gpu__time_duration.sum"]] == "us"
    assert units[col["gpc__cycles_elapsed.avg.per_second"]].lower() == "ghz"
    out = []
    for row in rows[2:]:
        # The last quoted entry of the push/pop cell is the innermost range of the last
        # domain listed; its second ':'-field is the range name (no ':' in these names).
        entries = re.findall(r'"([^"]+)"', row[col[PP_COL]].replace('""', '"'))
        se = re.findall(r'"([^"]+)"', row[col[SE_COL]].replace('""', '"'))
        out.append(
            {
                "id": int(row[col["ID"]]),
                "entries": [e.split(":")[:2] for e in entries],
                "start_end": [e.split(":")[2] for e in se],
                "kernel": row[col["Kernel Name"]],
                "ns": float(row[col["gpu__time_duration.sum"]]) * 1e3,
                "cycles": float(row[col["gpc__cycles_elapsed.max"]]),
                "hz": float(row[col["gpc__cycles_elapsed.avg.per_second"]]) * 1e9,
            }
        )
    return out


@pytest.mark.parametrize("engine", ["c", "pyarrow"])
def test_raw_page_values_match_an_independent_read(engine, monkeypatch):
    if engine == "pyarrow":
        pytest.importorskip("pyarrow")
    monkeypatch.setenv("NSPROF_CSV_ENGINE", engine)
    frame = read_ncu_csv(RAW)
    expected = independent_raw(RAW)
    assert len(frame) == len(expected) == 27
    assert frame["launch_id"].tolist() == [e["id"] for e in expected]
    assert frame["duration_ns"].tolist() == pytest.approx([e["ns"] for e in expected])
    assert frame["cycles"].tolist() == pytest.approx([e["cycles"] for e in expected])
    assert frame["clock_hz"].tolist() == pytest.approx([e["hz"] for e in expected])
    assert set(frame["source"]) == {"ncu"}
    assert set(frame["workload"]) == {"kernel"}


def test_raw_page_ranges_configs_modes_reps():
    frame = read_ncu_csv(RAW)
    expected = independent_raw(RAW)
    for row, exp in zip(frame.itertuples(), expected):
        nsprof_entries = [name for dom, name in exp["entries"] if dom == "nsprof"]
        if len(nsprof_entries) == 2:  # outer "nsprof" + cfg range
            cfg, mode, rep = re.match(r"cfg(\d)\.(\w+)\.r(\d)", nsprof_entries[1]).groups()
            assert row.range == nsprof_entries[1]
            assert (row.config_id, row.mode, row.rep) == (int(cfg), mode, int(rep))
            assert row.domain == "nsprof"
    # the default-domain push/pop range inside the outer nsprof range is the innermost
    torch_rows = frame[frame["range"] == "torch_push"]
    assert len(torch_rows) == 1 and torch_rows["domain"].iloc[0] == "<default domain>"
    assert torch_rows["kernel"].iloc[0] == "gemm_kernel"
    # the start/end range holds the two kernels of one mm_relu call
    start_end = frame[frame["range"] == "startend"]
    assert start_end["kernel"].tolist() == [
        "nvjet_sm90_hsh_64x24_64x16_2x4_h_bz_NNT",
        "vectorized_elementwise_kernel",
    ]
    # every configured range shows up 3 times per kernel it launches
    counts = frame.dropna(subset=["config_id"]).groupby(["config_id", "mode"]).size()
    assert counts.to_dict() == {
        (0, "direct"): 3,
        (0, "graph"): 3,
        (1, "direct"): 3,
        (1, "graph"): 3,
        (2, "direct"): 6,
        (2, "graph"): 6,
    }


def test_details_page_agrees_with_raw_page_to_its_rounding():
    raw = read_ncu_csv(RAW)
    details = read_ncu_csv(DETAILS)
    assert details["launch_id"].tolist() == raw["launch_id"].tolist()
    assert details["range"].tolist() == raw["range"].tolist()
    assert details["kernel"].tolist() == raw["kernel"].tolist()
    # details rounds to 3 significant digits ("5.66" us, "1.37" GHz); cycles are exact
    assert details["duration_ns"].tolist() == pytest.approx(raw["duration_ns"].tolist(), rel=2e-3)
    assert details["cycles"].tolist() == raw["cycles"].tolist()
    assert details["clock_hz"].tolist() == pytest.approx(raw["clock_hz"].tolist(), rel=5e-3)


def test_graph_profiling_rows_are_graph_workloads():
    frame = read_ncu_csv(GRAPH_RAW)
    graph = frame[frame["workload"] == "graph"]
    assert len(graph) == 9  # 3 configs x 3 graph reps, one workload per replay
    assert set(graph["kernel"]) == {"graph"}
    assert set(graph["mode"]) == {"graph"}
    assert (frame[frame["workload"] == "kernel"]["mode"].dropna() == "direct").all()


def to_german(path, out):
    """The same CSV in de_DE number format: swap the '.' and ',' marks in numeric cells."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    number = re.compile(r"^-?[\d,]*\.?\d+$")
    for row in rows[2:]:
        for i, cell in enumerate(row):
            if number.match(cell) and ("," in cell or "." in cell):
                row[i] = cell.replace(",", "\0").replace(".", ",").replace("\0", ".")
    with open(out, "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    return out


def test_latin1_bytes_do_not_break_parsing(tmp_path):
    text = RAW.read_bytes().replace(b'"python3.12"', b'"python3.12\xe9"')  # not valid UTF-8
    path = tmp_path / "latin1.csv"
    path.write_bytes(text)
    frame = read_ncu_csv(path)
    assert len(frame) == 27 and frame["duration_ns"].notna().all()


def test_german_thousands_separators(tmp_path):
    german = to_german(RAW, tmp_path / "de.csv")
    assert "5,664000" in german.read_text()
    frame = read_ncu_csv(german)
    expected = independent_raw(RAW)
    assert frame["duration_ns"].tolist() == pytest.approx([e["ns"] for e in expected])
    assert frame["clock_hz"].tolist() == pytest.approx([e["hz"] for e in expected])


def test_thousands_separators_in_metric_values(tmp_path):
    # Force values >= 1000 with separators, as ncu prints them in other reports.
    text = RAW.read_text().replace('"7785.000000"', '"7,785.000000"')
    path = tmp_path / "sep.csv"
    path.write_text(text)
    frame = read_ncu_csv(path)
    assert frame["cycles"].iloc[0] == 7785.0


@pytest.mark.parametrize(
    ("values", "mark"),
    [
        (["5,537.04"], "."),
        (["27.595.520"], ","),
        (["5,66", "1,37"], ","),
        (["1,980,000"], "."),
        (["5.66", "7,785"], "."),
        (["5.537,04"], ","),
    ],
)
def test_decimal_mark_detection(values, mark):
    assert detect_decimal_mark(values) == mark


def test_nvtx_cell_with_colon_in_registered_name():
    state = parse_csv_cells('7  "dom:a:b:none:none:RGB:0xff:REGISTERED:a:b" ', "")
    assert state.push_pop == {"dom": ["a:b"]}
    assert state.innermost() == ("a:b", "dom")


def test_domain_filter_picks_that_domains_innermost():
    frame = read_ncu_csv(RAW, domain="nsprof")
    row = frame[frame["launch_id"] == 24].iloc[0]  # torch_push inside nsprof's outer range
    assert row["range"] == "nsprof" and row["domain"] == "nsprof"
    assert frame[frame["launch_id"] == 25]["range"].isna().all()  # start/end in default domain


def test_leading_profiler_lines_are_skipped(tmp_path):
    path = tmp_path / "with_prof.csv"
    path.write_text("==PROF== Connected to process 1\nprogram output\n" + RAW.read_text())
    assert len(read_ncu_csv(path)) == 27


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"a,b,c\n1,2,3\n", "not an ncu CSV"),
        (b'"ID","Foo"\n"0","1"\n', "not an ncu raw or details page"),
        (b"\x00\x01\x02binary", "binary data"),
    ],
)
def test_bad_csv_inputs_raise_one_line(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(ReportError) as info:
        read_ncu_csv(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_csv_without_duration_metric(tmp_path):
    path = tmp_path / "nodur.csv"
    path.write_text(RAW.read_text().replace("gpu__time_duration", "gpu__time_other"))
    with pytest.raises(ReportError, match="no gpu__time_duration column"):
        read_ncu_csv(path)


def test_truncated_csv_keeps_complete_rows(tmp_path):
    text = RAW.read_text()
    lines = text.splitlines(keepends=True)
    path = tmp_path / "trunc.csv"
    path.write_text("".join(lines[:12]) + lines[12][: len(lines[12]) // 2])
    frame = read_ncu_csv(path)
    # A cut-off last row is either dropped or kept with the fields it has; 10 whole rows stay.
    assert len(frame) >= 10
    assert frame["duration_ns"].iloc[:10].notna().all()


# --- digit-group separators of every locale -------------------------------------

_TO_BASE_UNIT = {"us": ("ns", 1e3), "ghz": ("hz", 1e9), "cycle": ("cycle", 1.0)}


def _grouped(value: float, group: str, decimal: str, digits: int = 6) -> str:
    """`value` written with `group` between each three integer digits and `decimal` as the mark."""
    whole, _, fraction = f"{value:.{digits}f}".partition(".")
    groups = []
    while len(whole) > 3:
        groups.insert(0, whole[-3:])
        whole = whole[:-3]
    return group.join([whole, *groups]) + decimal + fraction


def to_locale(path, out, group: str, decimal: str):
    """The raw page in base units (ns, Hz: every duration >= 1,000) written with `group` and `decimal`.

    Returns the file and, by the csv module, the expected (ns, cycles, hz) per row.
    """
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, units = rows[0], rows[1]
    columns = {
        header.index(name): name
        for name in (
            "gpu__time_duration.sum",
            "gpc__cycles_elapsed.max",
            "gpc__cycles_elapsed.avg.per_second",
        )
    }
    expected = []
    for index in columns:
        unit, factor = _TO_BASE_UNIT[units[index].lower()]
        units[index] = unit
        for row in rows[2:]:
            row[index] = _grouped(float(row[index]) * factor, group, decimal)
    for row in rows[2:]:
        expected.append(tuple(float(row[i].replace(group, "").replace(decimal, ".")) for i in columns))
    with open(out, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    return out, expected


@pytest.mark.parametrize(
    ("group", "decimal"),
    [
        (" ", ","),
        ("\u00a0", ","),
        ("\u202f", ","),
        ("'", "."),
        ("\u2019", "."),
        (".", ","),
        (",", "."),
        (" ", "."),
    ],
    ids=["space", "nbsp", "narrow-nbsp", "apostrophe", "right-quote", "de", "en", "space-dot"],
)
def test_group_separators_of_every_locale(tmp_path, group, decimal):
    path, expected = to_locale(RAW, tmp_path / "locale.csv", group, decimal)
    assert all(ns >= 1000 for ns, _, _ in expected)  # every duration carries a separator
    frame = read_ncu_csv(path)
    assert frame["duration_ns"].tolist() == pytest.approx([e[0] for e in expected])
    assert frame["cycles"].tolist() == pytest.approx([e[1] for e in expected])
    assert frame["clock_hz"].tolist() == pytest.approx([e[2] for e in expected])
    assert frame.attrs["warnings"] == []


@pytest.mark.parametrize("group", [" ", "\u00a0", "\u202f"], ids=["space", "nbsp", "narrow-nbsp"])
def test_details_page_in_french_format(tmp_path, group):
    with open(DETAILS, newline="") as handle:
        rows = list(csv.reader(handle))
    value = rows[0].index("Metric Value")
    for row in rows[1:]:  # en_US "7,785" / "5.66" -> fr_FR "7 785" / "5,66"
        row[value] = row[value].replace(",", group).replace(".", ",")
    path = tmp_path / "fr.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    expected = read_ncu_csv(DETAILS)
    frame = read_ncu_csv(path)
    assert frame["duration_ns"].tolist() == pytest.approx(expected["duration_ns"].tolist())
    assert frame["cycles"].tolist() == expected["cycles"].tolist()
    assert frame["cycles"].min() >= 1000


def test_rows_without_duration_warn_in_one_line_and_leave_n(tmp_path):
    from nsprof.analysis.summary import summarize

    with open(RAW, newline="") as handle:
        rows = list(csv.reader(handle))
    duration = rows[0].index("gpu__time_duration.sum")
    pp = rows[0].index(PP_COL)
    cfg0_direct = [r for r in rows[2:] if "cfg0.direct.r" in r[pp]]
    cfg0_direct[0][duration], cfg0_direct[1][duration] = "n/a", ""
    cfg1_direct = [r for r in rows[2:] if "cfg1.direct.r" in r[pp]]
    cfg1_direct[0][duration] = "5;312"  # no locale writes this
    path = tmp_path / "gaps.csv"
    with open(path, "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    frame = read_ncu_csv(path)
    assert len(frame) == 27  # the rows stay
    assert int(frame["duration_ns"].isna().sum()) == 3
    warnings = [w for w in frame.attrs["warnings"] if "duration" in w]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "3 of 27" in warnings[0] and "'5;312'" in warnings[0]
    summary = summarize(frame).set_index(["group", "kernel"])
    assert summary.loc[("cfg0.direct", "gemm_kernel"), "count"] == 1
    assert summary.loc[("cfg1.direct", "gemm_kernel"), "count"] == 2
    others = float(cfg0_direct[2][duration]) * 1e3
    assert summary.loc[("cfg0.direct", "gemm_kernel"), "median_ns"] == pytest.approx(others)


def test_analyze_warns_on_stderr_for_rows_without_duration(tmp_path):
    from conftest import run_nsprof

    with open(RAW, newline="") as handle:
        rows = list(csv.reader(handle))
    rows[2][rows[0].index("gpu__time_duration.sum")] = "n/a"  # the first kernel: cfg0.direct.r0
    assert "cfg0.direct.r0" in rows[2][rows[0].index(PP_COL)]
    path = tmp_path / "na.csv"
    with open(path, "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    result = run_nsprof("analyze", path, in_process=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "no duration" in line]
    assert len(lines) == 1 and "1 of 27" in lines[0]
    cfg0 = next(line for line in result.stdout.splitlines() if "cfg0.direct" in line)
    assert cfg0.split()[3] == "2"  # n: the n/a row is not counted


# --- program output before the table --------------------------------------------


def _program_output(size: int) -> str:
    line = 'step 17: loss 0.4213, 1,024 tokens/s "ID" not a header\n'
    return line * (size // len(line) + 1)


@pytest.mark.parametrize("size", [100_000, 3_000_000])
def test_csv_after_program_output_is_read(tmp_path, size):
    from nsprof.reports import read_report, sniff_kind

    path = tmp_path / "run.csv"
    path.write_text(_program_output(size) + RAW.read_text())
    assert sniff_kind(path) == "ncu-csv"
    frame = read_report(path)
    expected = independent_raw(RAW)
    assert frame["launch_id"].tolist() == [e["id"] for e in expected]
    assert frame["duration_ns"].tolist() == pytest.approx([e["ns"] for e in expected])


def test_program_output_beyond_the_scan_bound_is_refused_in_one_line(tmp_path):
    from nsprof.reports import sniff_kind
    from nsprof.reports.signatures import HEADER_SCAN_BYTES

    path = tmp_path / "huge.csv"
    path.write_text(_program_output(HEADER_SCAN_BYTES + 10_000) + RAW.read_text())
    with pytest.raises(ReportError) as info:
        sniff_kind(path)
    assert "\n" not in str(info.value) and "not a report" in str(info.value)


# --- clock control in a CSV -----------------------------------------------------


def test_csv_labels_come_from_ncu_notes_above_the_table(tmp_path):
    # ncu's own output of a --clock-control none --cache-control none run, then its table.
    log = (FIXTURES / "ncu_clock_none.log").read_text()
    assert "Running with unmodified GPU clocks" in log
    path = tmp_path / "direct.csv"
    path.write_text(log + (FIXTURES / "fixture_clock_none_raw.csv").read_text())
    frame = read_ncu_csv(path)
    assert set(frame["clock_control"]) == {"none"} and set(frame["cache_control"]) == {"none"}
    assert len(frame) == 27


def test_exported_csv_records_no_clock_control():
    # `ncu --import ... --csv` writes no notes: nothing says how the clocks were set.
    frame = read_ncu_csv(FIXTURES / "fixture_clock_none_raw.csv")
    assert frame["clock_control"].isna().all() and frame["cache_control"].isna().all()
    from nsprof.render.notes import describe_report

    frame.attrs["kind"] = "ncu-csv"
    text = describe_report(frame)
    assert "clock control unknown" in text and "base" not in text


# --- huge integers where a name or an id belongs --------------------------------

HUGE = "9" * 5000  # past Python's 4,300-digit limit for int(str)


def _analyze_json(path):
    """`nsprof analyze --format json` of one file through the CLI: (exit status, summary rows)."""
    import json

    from click.testing import CliRunner

    from nsprof.cli import cli

    result = CliRunner().invoke(cli, ["analyze", "--format", "json", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else result.stderr


@pytest.mark.parametrize(
    ("name", "pooled_as"),
    [
        (HUGE, HUGE),  # a range named by a number is a name
        (f"cfg{HUGE}.direct.r0", f"cfg{HUGE}.direct.r0"),  # no config id fits int64: not nsprof's range
        (f"cfg0.direct.r{HUGE}", f"cfg0.direct.r{HUGE}"),
        (f"cfg0.s{HUGE}.direct.r0", f"cfg0.s{HUGE}.direct.r0"),
        ("cfg99999999999999999999.direct.r0", "cfg99999999999999999999.direct.r0"),  # 20 digits: past int64
    ],
    ids=["number", "config", "rep", "shape", "past-int64"],
)
def test_huge_integer_in_an_nvtx_range_name_is_read_as_text(tmp_path, name, pooled_as):
    path = tmp_path / "huge.csv"
    path.write_text(RAW.read_text().replace("cfg0.direct.r0", name))
    status, rows = _analyze_json(path)
    assert status == 0, rows
    by_range = {row["range"]: row for row in rows}
    assert by_range[pooled_as]["count"] == 1  # cfg0.direct.r0's one kernel, under its own name
    assert by_range["cfg0.direct"]["count"] == 2  # the other two reps of cfg0 still pool
    assert sum(row["count"] for row in rows) == 27


@pytest.mark.parametrize("tid", [HUGE, "7" * 25], ids=["5000-digits", "past-int64"])
def test_huge_thread_id_in_an_nvtx_cell_is_no_thread_id(tmp_path, tid):
    path = tmp_path / "tid.csv"
    text = RAW.read_text()
    assert text.count('"452  ""nsprof:nsprof') > 1
    path.write_text(text.replace('"452  ""nsprof:nsprof', f'"{tid}  ""nsprof:nsprof', 1))
    status, rows = _analyze_json(path)
    assert status == 0, rows
    unchanged = [{**row, "file": str(path)} for row in _analyze_json(RAW)[1]]
    assert rows == unchanged  # the thread id decides no range
    frame = read_ncu_csv(path)
    before = read_ncu_csv(RAW)["tid"]
    assert frame["tid"].isna().sum() == before.isna().sum() + 1 and set(frame["tid"].dropna()) == {452}
