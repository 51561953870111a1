""".ncu-rep parsing, checked against a direct ncu_report read of the real fixtures."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from nsprof.errors import ReportError
from nsprof.reports import read_report
from nsprof.reports.ncu_csv import read_ncu_csv
from nsprof.reports.ncu_rep import read_ncu_rep


def _import_ncu_report():
    """ncu_report from the wheel, or from an Nsight Compute install as nsprof finds it."""
    import sys

    from nsprof.reports.ncu_rep import ncu_report_folder

    try:
        folder = ncu_report_folder()
    except ReportError as exc:
        pytest.skip(str(exc), allow_module_level=True)
    if folder not in sys.path:
        sys.path.append(folder)
    return pytest.importorskip("ncu_report")


ncu_report = _import_ncu_report()


def direct_read(path):
    """(name, workload_type, ns, cycles, hz, nsprof-domain stack) per action, straight from ncu_report."""
    context = ncu_report.load_report(str(path))
    out = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            state = action.nvtx_state()
            stacks = {
                state.domain_by_id(d).name(): list(state.domain_by_id(d).push_pop_ranges())
                for d in state.domains()
            }
            out.append(
                (
                    action.name(),
                    action.workload_type(),
                    action.metric_by_name("gpu__time_duration.sum").as_double(),
                    action.metric_by_name("gpc__cycles_elapsed.max").as_double(),
                    action.metric_by_name("gpc__cycles_elapsed.avg.per_second").as_double(),
                    stacks.get("nsprof", []),
                )
            )
    return out


def test_node_report_matches_direct_read(ncu_rep_dir):
    path = ncu_rep_dir / "fixture_node.ncu-rep"
    frame = read_ncu_rep(path)
    expected = direct_read(path)
    assert len(frame) == len(expected) == 27
    assert frame["kernel"].tolist() == [e[0] for e in expected]
    assert frame["duration_ns"].tolist() == [e[2] for e in expected]
    assert frame["cycles"].tolist() == [e[3] for e in expected]
    assert frame["clock_hz"].tolist() == [e[4] for e in expected]
    for row, exp in zip(frame.itertuples(), expected):
        if len(exp[5]) == 2:
            assert row.range == exp[5][1]
    assert set(frame["workload"]) == {"kernel"}


def test_node_report_agrees_with_its_csv_export(ncu_rep_dir):
    rep = read_ncu_rep(ncu_rep_dir / "fixture_node.ncu-rep")
    csv = read_ncu_csv(FIXTURES / "fixture_node_raw.csv")
    assert rep["range"].tolist() == csv["range"].tolist()
    assert rep["kernel"].tolist() == csv["kernel"].tolist()
    assert rep["duration_ns"].tolist() == pytest.approx(csv["duration_ns"].tolist())
    assert rep["cycles"].tolist() == csv["cycles"].tolist()


def test_graph_report_has_graph_workloads(ncu_rep_dir):
    path = ncu_rep_dir / "fixture_graph.ncu-rep"
    frame = read_ncu_rep(path)
    expected = direct_read(path)
    graph_types = [e for e in expected if e[1] == ncu_report.IAction.WorkloadType_GRAPH]
    assert len(graph_types) == 9
    graph = frame[frame["workload"] == "graph"]
    assert len(graph) == 9
    assert graph["range"].tolist() == [e[5][-1] for e in graph_types]
    assert graph["duration_ns"].tolist() == [e[2] for e in graph_types]
    assert set(graph["mode"]) == {"graph"}


def test_start_end_and_default_domain_ranges(ncu_rep_dir):
    frame = read_ncu_rep(ncu_rep_dir / "fixture_node.ncu-rep")
    assert frame[frame["range"] == "torch_push"]["domain"].tolist() == ["<default domain>"]
    assert frame[frame["range"] == "startend"]["kernel"].tolist() == [
        "nvjet_sm90_hsh_64x24_64x16_2x4_h_bz_NNT",
        "vectorized_elementwise_kernel",
    ]


def test_read_report_sniffs_ncu_rep(ncu_rep_dir):
    frame = read_report(ncu_rep_dir / "fixture_node.ncu-rep", clock_control="base")
    assert frame.attrs["kind"] == "ncu-rep"
    assert set(frame["clock_control"]) == {"base"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"NVR\0" + bytes(range(256)) * 20, "truncated"),  # its first size runs past the end
        (b"NVR\0\2\0\0\0\x08\x07", "holds no (results|profiled kernels)"),  # a file header, no block
        (b"garbage that is not a report" * 10, "bad magic"),
    ],
    ids=["empty", "garbage-after-magic", "header-only", "no-magic"],
)
def test_bad_ncu_rep_inputs(tmp_path, content, message):
    path = tmp_path / "bad.ncu-rep"
    path.write_bytes(content)
    with pytest.raises(ReportError, match=message) as info:
        read_ncu_rep(path)
    assert "\n" not in str(info.value)


def _cut_offsets(size: int) -> list[int]:
    """Cut points all over a report: the header's first bytes, a fixed spread, the last bytes."""
    spread = range(97, size, size // 150 + 1)
    return sorted({1, 4, 5, 8, 9, 12, 100, 145, 150, *spread, size - 4, size - 1})


@pytest.mark.parametrize(
    "name", ["fixture_node", "fixture_graph", "fixture_clock_none", "fixture_clock_default"]
)
def test_truncated_ncu_rep_is_refused_at_every_cut(ncu_rep_dir, tmp_path, name):
    # ncu_report reads a cut report as a smaller one (the results after the cut are gone,
    # a half-written one loses its metrics): nsprof refuses it, whatever the cut point,
    # and reads the uncut file exactly.
    from nsprof.reports.ncu_rep import block_ends

    data = (ncu_rep_dir / f"{name}.ncu-rep").read_bytes()
    ends = block_ends(ncu_rep_dir / f"{name}.ncu-rep")
    assert ends[-1] == len(data) and len(ends) == len(set(ends)) and len(ends) < 100
    path = tmp_path / "cut.ncu-rep"
    offsets = [size for size in _cut_offsets(len(data)) if size not in ends]
    assert len(offsets) > 150
    for size in offsets:
        path.write_bytes(data[:size])
        with pytest.raises(ReportError) as info:
            read_ncu_rep(path)
        message = str(info.value)
        assert "\n" not in message and ("truncated" in message or "bad magic" in message), (size, message)
    assert len(read_ncu_rep(ncu_rep_dir / f"{name}.ncu-rep")) == len(
        direct_read(ncu_rep_dir / f"{name}.ncu-rep")
    )


def test_truncated_ncu_rep_at_2mb_is_one_line_and_no_table(ncu_rep_dir, tmp_path):
    """A report cut at 2,000,000 bytes, through the command line (in this process; the reader in its child)."""
    from conftest import run_nsprof

    data = (ncu_rep_dir / "fixture_node.ncu-rep").read_bytes()
    for size in (len(data) - 1000, 2_000_000, len(data) // 2):
        path = tmp_path / f"cut{size}.ncu-rep"
        path.write_bytes(data[:size])
        proc = run_nsprof("analyze", path, in_process=True)
        assert proc.returncode == 2, (size, proc.stdout, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"nsprof: error: {path}: truncated"), proc.stderr


# --- clock control as the report records it -------------------------------------


def _capture_flag(command_key: str, flag: str):
    """The value of `flag` in a recorded capture command (capture*.json), or None without it."""
    import json

    record = {}
    for name in ("capture.json", "capture_clock.json"):
        record.update(json.loads((FIXTURES / name).read_text())["commands"])
    command = record[command_key]
    return command[command.index(flag) + 1] if flag in command else None


def _median_clock_hz(path) -> float:
    import statistics

    return statistics.median(row[4] for row in direct_read(path))


@pytest.mark.parametrize(
    ("report", "command"),
    [
        ("fixture_node", "ncu_node"),
        ("fixture_graph", "ncu_graph"),
        ("fixture_clock_none", "ncu_clock_none"),
        ("fixture_clock_default", "ncu_clock_default"),
    ],
)
def test_clock_and_cache_control_come_from_the_report(ncu_rep_dir, report, command):
    frame = read_report(ncu_rep_dir / f"{report}.ncu-rep")
    for column, flag in (("clock_control", "--clock-control"), ("cache_control", "--cache-control")):
        expected = _capture_flag(command, flag)
        values = set(frame[column].dropna())
        assert values == ({expected} if expected else set()), column


def test_free_clock_report_is_labelled_none_and_ran_faster(ncu_rep_dir):
    # Independent evidence beside the capture record: ncu_report's own clock metric.
    none_hz = _median_clock_hz(ncu_rep_dir / "fixture_clock_none.ncu-rep")
    base_hz = _median_clock_hz(ncu_rep_dir / "fixture_node.ncu-rep")
    assert none_hz > 1.2 * base_hz
    frame = read_report(ncu_rep_dir / "fixture_clock_none.ncu-rep")
    assert set(frame["clock_control"]) == {"none"}


def test_caller_labels_win_over_the_record(ncu_rep_dir):
    frame = read_report(ncu_rep_dir / "fixture_clock_none.ncu-rep", clock_control="base")
    assert set(frame["clock_control"]) == {"base"}


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ("fixture_clock_none.ncu-rep", "clock control none (from the report's ncu command line)"),
        ("fixture_node.ncu-rep", "clock control base (from the report's ncu command line)"),
        ("fixture_clock_default.ncu-rep", "clock control unknown"),
    ],
)
def test_analyze_says_the_recorded_clock_control(ncu_rep_dir, report, expected):
    from conftest import run_nsprof

    result = run_nsprof("analyze", ncu_rep_dir / report, in_process=True, timeout=120)
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0]
    assert expected in header
    assert "default: base" not in header and "(ncu's default" not in header


def test_ncu_options_stop_at_the_program():
    from nsprof.reports.ncu_command import ncu_options

    line = "/opt/ncu --nvtx -f --metrics a,b --clock-control=none python3 tune.py --clock-control base"
    assert ncu_options(line) == {"--clock-control": "none"}
    assert ncu_options("/opt/ncu --nvtx python3 x.py --cache-control none") == {}
    # an option nsprof does not know: its value and the program cannot be told apart, so stop
    assert ncu_options("ncu --brand-new x --clock-control none app") == {}
    assert ncu_options("python3 tune.py --clock-control none") is None


# --- graph profiling inflates every row kind ------------------------------------


def test_graph_profiling_note_names_every_row_kind(ncu_rep_dir):
    from nsprof.render.notes import graph_profiling_note

    path = ncu_rep_dir / "fixture_graph.ncu-rep"
    expected = direct_read(path)
    graphs = sum(e[1] == ncu_report.IAction.WorkloadType_GRAPH for e in expected)
    kernels = sum(e[1] == ncu_report.IAction.WorkloadType_KERNEL for e in expected)
    assert (graphs, kernels) == (9, 15)
    note = graph_profiling_note(read_report(path))
    assert f"{graphs} 'graph' row(s)" in note and f"{kernels} 'kernel' row(s)" in note
    assert "\n" not in note
    # node profiling: no such note
    assert graph_profiling_note(read_report(ncu_rep_dir / "fixture_node.ncu-rep")) is None


def test_graph_profiling_note_for_a_report_with_only_kernel_rows(ncu_rep_dir):
    # A graph-profiling run whose graphs all fell outside the NVTX filter: only plain kernels
    # are left, and they are still inflated; the recorded command line says how ncu ran.
    from nsprof.render.notes import graph_profiling_note

    frame = read_report(ncu_rep_dir / "fixture_graph.ncu-rep")
    kernels = frame[frame["workload"] == "kernel"].copy()
    kernels.attrs = dict(frame.attrs)
    note = graph_profiling_note(kernels)
    assert note and "15 'kernel' row(s)" in note and "'graph' row" not in note


def test_analyze_prints_the_graph_profiling_note_for_kernel_rows(ncu_rep_dir):
    from conftest import run_nsprof

    result = run_nsprof("analyze", ncu_rep_dir / "fixture_graph.ncu-rep", in_process=True, timeout=120)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if "--graph-profiling graph" in line]
    assert len(notes) == 1 and "'kernel' row(s)" in notes[0] and "'graph' row(s)" in notes[0]


def _direct_l2(path) -> list[tuple[str, float]]:
    """(nsprof range, lts__t_sector_hit_rate.pct) per action, straight from ncu_report."""
    context = ncu_report.load_report(str(path))
    out = []
    for r in range(context.num_ranges()):
        for a in range(context.range_by_idx(r).num_actions()):
            action = context.range_by_idx(r).action_by_idx(a)
            state = action.nvtx_state()
            stack = next(
                list(state.domain_by_id(d).push_pop_ranges())
                for d in state.domains()
                if state.domain_by_id(d).name() == "nsprof"
            )
            out.append((stack[-1], action.metric_by_name("lts__t_sector_hit_rate.pct").as_double()))
    return out


@pytest.mark.parametrize("name", ["fixture_l2_ncu", "fixture_l2_flushed"])
def test_the_l2_hit_rate_is_read_per_kernel_as_ncu_report_gives_it(ncu_rep_dir, name):
    path = ncu_rep_dir / f"{name}.ncu-rep"
    frame = read_ncu_rep(path)
    expected = _direct_l2(path)
    assert len(frame) == len(expected) > 0
    assert frame["range"].tolist() == [e[0] for e in expected]
    assert frame["l2_hit_pct"].tolist() == [e[1] for e in expected]


def test_the_l2_checks_table_from_the_seed_gemms_reports(ncu_rep_dir):
    """The check's two sessions on the H200 (validate --l2-check of the seed GEMM): ncu's flush, and
    reps taking turns, even ones after the cold timers' flush, odd ones after nothing. Expected: the
    medians of ncu_report's own values; the flush is cold (within COLD_MARGIN of ncu's) and no flush is
    warm, as the H200 showed once ncu ran the program again for each pass instead of replaying kernels."""
    import re
    import statistics

    from nsprof.analysis.l2 import COLD_MARGIN, CONDITIONS, check_table

    def condition(session: str, rep: int) -> str:
        return CONDITIONS[0] if session == "ncu" else CONDITIONS[1 + rep % 2]

    rows, direct = [], {}
    for session in ("ncu", "flushed"):
        path = ncu_rep_dir / f"fixture_l2_{session}.ncu-rep"
        for r in read_ncu_rep(path).itertuples():
            rows.append({"config_id": r.config_id, "mode": r.mode, "condition": condition(session, r.rep),
                         "l2_hit_pct": r.l2_hit_pct})  # fmt: skip
        for range_name, hit in _direct_l2(path):
            config, rep = map(int, re.fullmatch(r"cfg(\d+)\.graph\.r(\d+)", range_name).groups())
            direct.setdefault((config, condition(session, rep)), []).append(hit)
    table = check_table(rows)
    assert sorted(table["config_id"]) == sorted({c for c, _ in direct})
    for row in table.to_dict("records"):
        for cond in CONDITIONS:
            assert row[cond] == statistics.median(direct[(row["config_id"], cond)])
        assert row[CONDITIONS[1]] <= row[CONDITIONS[0]] + COLD_MARGIN
        assert row[CONDITIONS[2]] >= row[CONDITIONS[0]] + COLD_MARGIN
        assert row["cold"] == "cold"
