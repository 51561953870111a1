"""A report's rows from several GPUs or processes, and NVTX names with ':' in ncu's CSV.

Expected values come from the csv module and sqlite3 reads of mutated copies of the real
fixtures (test_ncu_csv.independent_raw, test_nsys.expected_fixture_rows), never from nsprof.
"""

from __future__ import annotations

import csv
import shutil
import sqlite3
import statistics

import pytest
from conftest import FIXTURES, run_nsprof
from test_ncu_csv import PP_COL, independent_raw
from test_nsys import expected_fixture_rows

import nsprof
from nsprof.reports.nvtx_cells import cell_attribution, parse_csv_cells

RAW = FIXTURES / "fixture_node_raw.csv"


def _rewrite_csv(path, edit) -> None:
    """RAW copied to `path` with `edit(row, col)` applied to each data row."""
    with open(RAW, newline="") as handle:
        rows = list(csv.reader(handle))
    col = {name: i for i, name in enumerate(rows[0])}
    for row in rows[2:]:
        edit(row, col)
    with open(path, "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)


def _summary_rows(path) -> dict[str, tuple[int, float]]:
    summary = nsprof.summarize(nsprof.read_report(path))
    return {
        str(r): (int(c), float(m))
        for r, c, m in zip(summary["range"], summary["count"], summary["median_ns"])
        if str(r).startswith("cfg0.direct")
    }


def test_rows_of_another_gpu_and_process_are_their_own_rows_not_pooled(tmp_path):
    path = tmp_path / "two.csv"
    moved = {"cfg0.direct.r1", "cfg0.direct.r2"}

    def edit(row, col):
        if any(f":{name}:" in row[col[PP_COL]] for name in moved):
            row[col["Process ID"]], row[col["Device"]] = "999", "1"

    _rewrite_csv(path, edit)
    raw = {r["id"]: r for r in independent_raw(RAW)}
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))[1:]
    where: dict[tuple, list[float]] = {}
    for row in rows:
        entry = raw[int(row["ID"])]
        if entry["entries"] and entry["entries"][-1][1].startswith("cfg0.direct."):
            where.setdefault((row["Process ID"], row["Device"]), []).append(entry["ns"])
    assert sorted((k, len(v)) for k, v in where.items()) == [(("452", "0"), 1), (("999", "1"), 2)]
    got = _summary_rows(path)
    assert got == {
        "cfg0.direct (gpu 0, pid 452)": (1, pytest.approx(statistics.median(where[("452", "0")]))),
        "cfg0.direct (gpu 1, pid 999)": (2, pytest.approx(statistics.median(where[("999", "1")]))),
    }
    out = run_nsprof("analyze", str(path), "--range", "cfg0.direct", in_process=True)
    assert out.returncode == 0, out.stderr
    assert "cfg0.direct (gpu 1, pid 999)" in out.stdout and "cfg0.direct (gpu 0, pid 452)" in out.stdout


def test_one_gpu_and_process_keep_the_plain_range_names():
    got = _summary_rows(RAW)
    assert set(got) == {"cfg0.direct"}


def test_nsys_kernels_on_a_second_gpu_are_their_own_rows(tmp_path):
    path = tmp_path / "two.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = deviceId + 1 WHERE rowid % 2 = 0")
    con.close()
    where: dict[tuple, list[float]] = {}
    for row in expected_fixture_rows(path):
        if row["config_id"] == 0 and ".direct." in row["range"]:
            where.setdefault(row["device"], []).append(row["duration_ns"])
    assert len(where) == 2
    got = _summary_rows(path)
    assert got == {
        f"cfg0.direct (gpu {device})": (len(values), pytest.approx(statistics.median(values)))
        for device, values in where.items()
    }


def test_an_unregistered_name_with_a_colon_is_read_whole():
    # The shape of the fixture's own torch.cuda.nvtx.range_push cell (its message fields "none").
    with open(RAW, newline="") as handle:
        cells = [row[PP_COL] for row in csv.DictReader(handle) if "torch_push" in row.get(PP_COL, "")]
    assert cells, "the fixture holds an unregistered push/pop range"
    cell = cells[0].replace("torch_push", "step:fwd")
    state = parse_csv_cells(cell, "")
    assert "step:fwd" in state.push_pop["<default domain>"]
    assert "step:fwd" in (cell_attribution(cell, "")[2] or "")


def test_standard_input_named_twice_is_one_line_before_anything_is_read():
    out = run_nsprof("analyze", "-", "-", input=RAW.read_text(), in_process=True)
    assert out.returncode == 2
    assert "standard input" in out.stderr and "once" in out.stderr
    assert out.stdout == ""


def test_kernels_of_an_export_without_names_stay_apart(tmp_path):
    path = tmp_path / "nostrings.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", path)
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE StringIds")
        per_name = dict(
            con.execute(
                "SELECT demangledName, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName"
            )
        )
    con.close()
    assert len(per_name) > 1
    frame = nsprof.read_report(path)
    got = frame["kernel_full"].value_counts()
    assert sorted(got.tolist()) == sorted(per_name.values())
    assert frame["kernel"].isna().all()  # shown as "?": the names are unknown
