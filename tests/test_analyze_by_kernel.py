"""`analyze --by kernel`: the whole-report per-kernel summary of `nsys stats --report
cuda_gpu_kern_sum`, one row per kernel and launch configuration (grid, block, registers, static
and dynamic shared memory). Expected values come from an independent read of the fixtures:
sqlite3 on the nsys export, the csv module on ncu's CSV exports."""

from __future__ import annotations

import csv
import json
import sqlite3
import statistics
from pathlib import Path

import pytest
from conftest import run_nsprof

FIXTURES = Path(__file__).parent / "fixtures"
SQLITE = FIXTURES / "fixture.sqlite"
RAW = FIXTURES / "fixture_node_raw.csv"
DETAILS = FIXTURES / "fixture_node_details.csv"
LAUNCH = ("grid", "block", "registers", "static_smem", "dynamic_smem")
SCALE_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6}
SIZE = {"byte": 1, "Kbyte": 1000, "Mbyte": 1_000_000}


def _stats(durations: list[float], whole: float) -> dict:
    return {
        "count": len(durations),
        "total_ns": sum(durations),
        "mean_ns": statistics.fmean(durations),
        "median_ns": statistics.median(durations),
        "min_ns": min(durations),
        "max_ns": max(durations),
        "std_ns": statistics.stdev(durations) if len(durations) > 1 else None,
        "time_pct": 100 * sum(durations) / whole,
    }


def _nsys_expected() -> dict[tuple, dict]:
    """(kernel_full, grid, block, registers, static, dynamic) -> statistics, straight from SQLite."""
    conn = sqlite3.connect(SQLITE)
    rows = conn.execute(
        "SELECT d.value, s.value, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread,"
        " staticSharedMemory, dynamicSharedMemory, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL k"
        " JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName"
    ).fetchall()
    conn.close()
    whole = sum(row[-1] for row in rows)
    groups: dict[tuple, list[float]] = {}
    short: dict[tuple, str] = {}
    for full, name, gx, gy, gz, bx, by, bz, regs, static, dynamic, ns in rows:
        key = (full, f"({gx}, {gy}, {gz})", f"({bx}, {by}, {bz})", regs, static, dynamic)
        groups.setdefault(key, []).append(float(ns))
        short[key] = name
    return {key: {"kernel": short[key], **_stats(values, whole)} for key, values in groups.items()}


def _ncu_raw_expected() -> dict[tuple, dict]:
    with RAW.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    units, rows = rows[0], rows[1:]
    scale = SCALE_NS[units["gpu__time_duration.sum"]]

    def size(row, metric):
        return round(float(row[metric]) * SIZE[units[metric].split("/")[0]])

    groups: dict[tuple, list[float]] = {}
    for row in rows:
        key = (
            row["Kernel Name"],
            row["Grid Size"],
            row["Block Size"],
            int(row["launch__registers_per_thread"]),
            size(row, "launch__shared_mem_per_block_static"),
            size(row, "launch__shared_mem_per_block_dynamic"),
        )
        groups.setdefault(key, []).append(float(row["gpu__time_duration.sum"]) * scale)
    whole = sum(sum(values) for values in groups.values())
    return {key: _stats(values, whole) for key, values in groups.items()}


def _analyze(*args: str) -> tuple[int, str, str]:
    result = run_nsprof("analyze", *args, in_process=True)
    return result.returncode, result.stdout, result.stderr


def _json_rows(*args: str) -> list[dict]:
    code, out, err = _analyze(*args, "--by", "kernel", "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _key(row: dict) -> tuple:
    return (row["kernel_full"], *(row[c] for c in LAUNCH))


def _assert_rows_match(rows: list[dict], expected: dict[tuple, dict]) -> None:
    assert len(rows) == len(expected)
    for row in rows:
        want = expected[_key(row)]
        for column, value in want.items():
            if column == "kernel" or value is None:
                assert row[column] == value, (column, _key(row))
            else:
                assert row[column] == pytest.approx(value, rel=1e-9), (column, _key(row))


def test_nsys_per_kernel_and_launch_config_matches_sqlite():
    expected = _nsys_expected()
    rows = _json_rows(str(SQLITE))
    _assert_rows_match(rows, expected)
    # launched with 2 grids, gemm_kernel is two rows; 5 launch configs of one elementwise kernel
    assert sum(row["kernel"] == "gemm_kernel" for row in rows) == 2
    assert sum(row["kernel"] == "distribution_elementwise_grid_stride_kernel" for row in rows) == 4
    # default order: total time, largest first (nsys stats' order)
    totals = [row["total_ns"] for row in rows]
    assert totals == sorted(totals, reverse=True)
    assert sum(row["time_pct"] for row in rows) == pytest.approx(100.0)


def test_ncu_raw_csv_per_kernel_matches_csv_module():
    rows = _json_rows(str(RAW))
    _assert_rows_match(rows, _ncu_raw_expected())
    gemm = {row["grid"]: row for row in rows if row["kernel"] == "gemm_kernel"}
    assert gemm["(32, 1, 1)"]["dynamic_smem"] == 49152 and gemm["(16, 1, 1)"]["dynamic_smem"] == 40960


def test_ncu_details_csv_has_grid_and_block_only():
    """The details page holds grid and block on every row, but no launch__ metrics here."""
    rows = _json_rows(str(DETAILS))
    raw = _ncu_raw_expected()
    by_shape = {(k[0], k[1], k[2]): v["count"] for k, v in raw.items()}
    assert {(r["kernel_full"], r["grid"], r["block"]): r["count"] for r in rows} == by_shape
    assert all(r["registers"] is None and r["dynamic_smem"] is None for r in rows)
    code, out, _ = _analyze(str(DETAILS), "--by", "kernel")
    header = out.splitlines()[1]
    assert code == 0 and "Grid" in header and "Block" in header and "Regs" not in header


def test_ncu_rep_launch_configs_equal_its_raw_export(ncu_rep_dir):
    from nsprof.reports.ncu_rep import ncu_report_folder

    try:
        ncu_report_folder()
    except Exception as exc:  # no ncu_report here: the CSV tests cover the numbers
        pytest.skip(str(exc))
    rows = _json_rows(str(ncu_rep_dir / "fixture_node.ncu-rep"))
    raw = _ncu_raw_expected()  # ncu_report and the CSV export demangle alike only up to spelling
    got = sorted((*(r[c] for c in LAUNCH), r["count"], round(r["total_ns"], 3)) for r in rows)
    assert got == sorted((*k[1:], v["count"], round(v["total_ns"], 3)) for k, v in raw.items())


def _table_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    return [line.split() for line in lines[3:] if line.strip()]


def test_sort_reverse_top_kernel_and_timeunit():
    expected = _nsys_expected()
    by_median = sorted(expected.items(), key=lambda kv: kv[1]["median_ns"])
    rows = _json_rows(str(SQLITE), "--sort", "median", "--reverse", "--top", "3")
    assert [r["median_ns"] for r in rows] == [v["median_ns"] for _, v in by_median[:3]]
    rows = _json_rows(str(SQLITE), "--sort", "count", "--top", "1")
    assert rows[0]["count"] == max(v["count"] for v in expected.values()) == 12
    rows = _json_rows(str(SQLITE), "--kernel", "^gemm", "--sort", "name")
    assert [r["grid"] for r in rows] == ["(16, 1, 1)", "(32, 1, 1)"]
    code, out, _ = _analyze(str(SQLITE), "--by", "kernel", "--kernel", "^gemm", "--timeunit", "ns")
    assert code == 0 and "Total Time (ns)" in out.splitlines()[1]
    gemm32 = expected[next(k for k in expected if k[0] == "gemm_kernel" and k[1] == "(32, 1, 1)")]
    first = _table_rows(out)[0]
    assert first[2] == f"{gemm32['total_ns']:,.0f}" and first[3] == str(gemm32["count"])
    assert first[-1] == "gemm_kernel" and "49152" in first


def test_markdown_csv_and_demangled_names():
    code, out, _ = _analyze(
        str(RAW), "--by", "kernel", "--format", "markdown", "--names", "demangled", "--wide"
    )
    assert code == 0
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert table[0].startswith("| source | Time (%) | Total Time (µs) | Instances | Avg (µs) | Med (µs)")
    assert len(table) == 2 + len(_ncu_raw_expected())
    assert any("void at::vectorized_elementwise_kernel<8" in line for line in table)
    code, out, _ = _analyze(str(RAW), "--by", "kernel", "--format", "csv")
    assert code == 0
    parsed = list(csv.DictReader(out.splitlines()))
    expected = _ncu_raw_expected()
    assert len(parsed) == len(expected)
    for row in parsed:
        key = (row["kernel_full"], row["grid"], row["block"], int(row["registers"]))
        key += (int(row["static_smem"]), int(row["dynamic_smem"]))
        assert float(row["total_ns"]) == pytest.approx(expected[key]["total_ns"])


def test_range_filter_pools_only_those_ranges_share_of_whole_report():
    expected = _ncu_raw_expected()
    whole = sum(v["total_ns"] for v in expected.values())
    with RAW.open(newline="") as handle:
        rows = list(csv.DictReader(handle))[1:]
    push_pop = next(c for c in rows[0] if "Push/Pop" in c)
    direct = [float(r["gpu__time_duration.sum"]) * 1e3 for r in rows if ".direct." in r[push_pop]]
    got = _json_rows(str(RAW), "--range", r"\.direct\.")
    assert sum(r["count"] for r in got) == len(direct)
    assert sum(r["total_ns"] for r in got) == pytest.approx(sum(direct))
    assert sum(r["time_pct"] for r in got) == pytest.approx(100 * sum(direct) / whole)


def test_by_kernel_with_compare_is_one_clear_line():
    code, _, err = _analyze(str(RAW), str(SQLITE), "--by", "kernel", "--compare")
    assert code != 0 and "--by kernel" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_default_stays_per_range():
    code, out, _ = _analyze(str(RAW))
    assert code == 0 and "range" in out.splitlines()[1] and "Grid" not in out


def test_nsys_rep_launch_configs_come_from_its_export(tmp_path):
    """An .nsys-rep is read through `nsys export` (a stand-in here that "exports" the fixture's
    SQLite): the launch configurations are read from the export before it is removed."""
    nsys = tmp_path / "bin" / "nsys"
    nsys.parent.mkdir()
    nsys.write_text(
        "#!/bin/sh\n"
        'prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        f'cp "{SQLITE}" "$out"\n'
    )
    nsys.chmod(0o755)
    report = tmp_path / "run.nsys-rep"
    report.write_bytes((FIXTURES / "fixture.nsys-rep").read_bytes())
    result = run_nsprof(
        "analyze",
        report,
        "--by",
        "kernel",
        "--format",
        "json",
        env={"NSPROF_NSYS": str(nsys)},
        in_process=True,
    )
    assert result.returncode == 0, result.stderr
    _assert_rows_match(json.loads(result.stdout), _nsys_expected())


def test_notes_under_the_table_numbered_names_and_graph_profiling():
    """The per-range view's notes hold here too: kernels numbered apart, and a graph-profiling run."""
    code, out, _ = _analyze(str(SQLITE), "--by", "kernel")
    assert code == 0 and "vectorized_elementwise_kernel #5" in out and "#1, #2" in out
    code, out, _ = _analyze(str(FIXTURES / "fixture_graph_raw.csv"), "--by", "kernel")
    assert code == 0 and "graph-profiling graph" in out


@pytest.mark.parametrize("form", ["table", "markdown"])
def test_a_kernel_name_with_a_newline_stays_on_its_row(tmp_path, form):
    # A name with a line break (a report edited, a tool's odd demangling) is shown escaped: one row, one line.
    report = tmp_path / "newline.sqlite"
    report.write_bytes(SQLITE.read_bytes())
    with sqlite3.connect(report) as conn:
        (name_id,) = conn.execute(
            "SELECT s.id FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName LIMIT 1"
        ).fetchone()
        conn.execute(
            "UPDATE StringIds SET value = value || char(10) || 'second line' WHERE id = ?", (name_id,)
        )
    done = run_nsprof("analyze", report, "--format", form, in_process=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not any(line.startswith("second line") for line in lines), done.stdout
    [row] = [line for line in lines if "second line" in line]
    assert "\\nsecond line" in row and row.split()[0] in ("nsys", "|")


def _one_line_or_none(done) -> None:
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 2) and len(done.stderr.strip().splitlines()) <= 1, done.stderr


@pytest.mark.parametrize(
    ("column", "cell"),
    [
        ("launch__registers_per_thread", "1e400"),
        ("launch__registers_per_thread", "nan"),
        ("launch__registers_per_thread", "1e300"),
        ("launch__shared_mem_per_block_static", "inf"),
        ("ID", "1.0"),
    ],
    ids=["registers-overflow", "registers-nan", "registers-huge", "smem-inf", "id-not-integer"],
)
def test_by_kernel_of_an_ncu_csv_with_an_odd_launch_cell_is_no_internal_error(tmp_path, column, cell):
    """An edited or damaged cell that the plain summary reads was an OverflowError or ValueError here."""
    import shutil

    with RAW.open(newline="") as handle:
        rows = list(csv.reader(handle))
    rows[2][rows[0].index(column)] = cell  # the first kernel's row (row 1: units)
    report = tmp_path / "r.csv"
    with report.open("w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    assert run_nsprof("analyze", report, in_process=True).returncode == 0
    _one_line_or_none(run_nsprof("analyze", report, "--by", "kernel", in_process=True))
    shutil.copy(SQLITE, tmp_path / "r.sqlite")  # and an nsys export's launch cells
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        cells = {"1e400": "9e999", "nan": "'abc'", "1e300": "1e300", "inf": "X'00ff'", "1.0": "'1.5'"}
        db.execute(
            f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = {cells[cell]}, registersPerThread = {cells[cell]}"
        )
    assert run_nsprof("analyze", tmp_path / "r.sqlite", in_process=True).returncode == 0
    _one_line_or_none(run_nsprof("analyze", tmp_path / "r.sqlite", "--by", "kernel", in_process=True))


def test_a_row_the_summary_drops_for_its_fractional_id_gives_no_other_kernel_its_launch_cells(tmp_path):
    """The summary reads no row whose ID is not a whole number: a damaged copy of launch 0's row, ID "0.4", must
    not stand in for launch 0's own launch cells under --by kernel."""
    with RAW.open(newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    damaged = list(rows[2])
    damaged[header.index("ID")] = "0.4"
    damaged[header.index("launch__registers_per_thread")] = "99"
    rows.append(damaged)
    report = tmp_path / "r.csv"
    with report.open("w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    done = run_nsprof("analyze", report, "--by", "kernel", "--format", "json", in_process=True)
    assert done.returncode == 0, done.stderr
    assert 99 not in [row["registers"] for row in json.loads(done.stdout)], done.stdout
