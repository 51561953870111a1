"""The command line: exit codes and stderr as users see them, through nsprof's main() in this process
(run_nsprof(in_process=True)), and `python -m nsprof` itself in a child process."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from conftest import FIXTURES, run_nsprof

RAW = FIXTURES / "fixture_node_raw.csv"


def test_help_for_every_command():
    from nsprof.cli import cli

    top = run_nsprof("--help")  # a child process: the entry point itself
    assert top.returncode == 0 and "analyze" in top.stdout
    for name in cli.commands:
        result = run_nsprof(name, "--help", in_process=True)
        assert result.returncode == 0, name
        assert "Usage:" in result.stdout and len(result.stdout.splitlines()) > 4


def test_analyze_prints_summary_per_config():
    result = run_nsprof("analyze", RAW, in_process=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    cfg0 = next(line for line in lines if line.startswith("ncu") and "cfg0.direct" in line)
    # independent: median of cfg0.direct.r* durations in the raw CSV (in µs, 3 decimals)
    with open(RAW, newline="") as handle:
        rows = list(csv.DictReader(handle))[1:]
    values = sorted(
        float(r["gpu__time_duration.sum"])
        for r in rows
        if "cfg0.direct.r" in r["thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"]
    )
    assert len(values) == 3
    assert f"{values[1]:.3f}" in cfg0.split()
    assert "clock control unknown (not recorded in this report)" in result.stdout


def test_analyze_json_rows():
    result = run_nsprof("analyze", RAW, "--json", in_process=True)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 27
    assert rows[0]["range"] == "cfg0.direct.r0" and rows[0]["config_id"] == 0
    assert rows[0]["duration_ns"] == pytest.approx(5664.0)
    assert rows[-1]["config_id"] is None and rows[-1]["range"] == "startend"
    from nsprof.schema import COLUMNS

    assert list(rows[0]) == ["file", *COLUMNS]


def test_analyze_csv_export(tmp_path):
    out = tmp_path / "rows.csv"
    result = run_nsprof("analyze", RAW, "--csv", out, in_process=True)
    assert result.returncode == 0, result.stderr
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 27 and float(rows[0]["cycles"]) == 7785.0


def test_compare_two_reports(tmp_path):
    result = run_nsprof("analyze", "--compare", RAW, FIXTURES / "fixture_node_details.csv", in_process=True)
    assert result.returncode == 0, result.stderr
    cfg0 = next(line for line in result.stdout.splitlines() if line.startswith("cfg0.direct"))
    # independent: medians of cfg0.direct durations in each file, by the csv module
    pp = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
    with open(RAW, newline="") as handle:
        raw = sorted(
            float(r["gpu__time_duration.sum"])
            for r in list(csv.DictReader(handle))[1:]
            if "cfg0.direct.r" in r[pp]
        )
    with open(FIXTURES / "fixture_node_details.csv", newline="") as handle:
        det = sorted(
            float(r["Metric Value"])
            for r in csv.DictReader(handle)
            if "cfg0.direct.r" in r[pp] and r["Metric Name"] == "gpu__time_duration.sum"
        )
    assert cfg0.split()[2:5] == [f"{raw[1]:.3f}", f"{det[1]:.3f}", f"{det[1] / raw[1]:.3f}"]


def test_compare_needs_two_files():
    result = run_nsprof("analyze", "--compare", RAW, in_process=True)
    assert result.returncode == 2
    assert "exactly two" in result.stderr


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_bytes(b""), "empty file"),
        (lambda p: p.write_text("name,value\nx,1\n"), "not a report nsprof reads"),
        (lambda p: p.write_bytes(b"SQLite format 3\0" + b"\0" * 100), ""),
        (lambda p: p.mkdir(), "is a folder"),
    ],
)
def test_bad_inputs_give_one_line_and_exit_2(tmp_path, make, message):
    path = tmp_path / "input.dat"
    make(path)
    result = run_nsprof("analyze", path, in_process=True)
    assert result.returncode == 2
    assert result.stdout == ""
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("nsprof: error:"), err
    assert "Traceback" not in result.stderr
    assert message in err


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path):
    pytest.importorskip("pandas")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        result = run_nsprof("analyze", RAW, "--parquet", tmp_path / "x.parquet", in_process=True)
        assert result.returncode == 2 and "pyarrow" in result.stderr
    else:
        result = run_nsprof("analyze", RAW, "--parquet", tmp_path / "x.parquet", in_process=True)
        assert result.returncode == 0 and (tmp_path / "x.parquet").stat().st_size > 0


def test_import_is_light():
    code = (
        "import sys, nsprof, nsprof.cli, nsprof.schema, nsprof.host.tools; "
        "heavy = [m for m in ('torch', 'tilelang', 'cupti', 'subprocess', 'pandas', 'ncu_report', 'triton') "
        "if m in sys.modules]; print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_command_line_imports_only_the_command_it_runs():
    """Every nsprof command is a fresh Python: its start pays for the modules it imports, so `nsprof
    analyze` and `--version` import none of the measuring commands (session, tune, validate)."""
    code = (
        "import sys; from nsprof.cli import main; sys.argv = ['nsprof', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "names = ('nsprof.session', 'nsprof.measure', 'nsprof.commands.tune', 'nsprof.validate', 'nsprof.serve')\n"
        "print(','.join(m for m in names if m in sys.modules), file=sys.stderr)"
    )
    for argv in (["--version"], ["analyze", RAW, "--format", "csv"]):
        result = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr.strip().splitlines()[-1:] in ([], [""]), (argv, result.stderr)


def test_import_nsprof_does_no_registering_and_settings_know_the_backends_without_the_registry():
    """`import nsprof` imports no driver registry (no work done by an import), and the settings
    check backend names without it."""
    code = (
        "import sys, nsprof; from nsprof.settings import ProfileSettings, TuneSettings, backends, ground_truths; "
        "loaded = 'nsprof.drivers.registry' in sys.modules; "
        "ProfileSettings(backend='nsys'); TuneSettings(backend='cupti'); "
        "print(loaded, backends(), ground_truths())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False ('ncu', 'nsys', 'none') ('ncu', 'nsys')"


def test_a_registered_backend_is_one_the_settings_take_until_it_is_unregistered():
    from nsprof.drivers import registry
    from nsprof.errors import NsprofError
    from nsprof.settings import ProfileSettings, backends, ground_truths

    registry.register("extra_truth", "nsprof.drivers.nsys:NsysDriver")
    try:
        assert ProfileSettings(backend="extra_truth").backend == "extra_truth"
        assert backends()[-1] == "extra_truth" and ground_truths()[-1] == "extra_truth"
        assert registry.names() == backends() and registry.ground_truths() == ground_truths()
    finally:
        registry.unregister("extra_truth")
    assert "extra_truth" not in backends() and "extra_truth" not in ground_truths()
    with pytest.raises(NsprofError, match="backend must be one of"):
        ProfileSettings(backend="extra_truth")


def test_compare_flags_rows_an_order_of_magnitude_apart():
    # the graph-profiling run of the same workload measured every kernel 30-74x longer
    result = run_nsprof("analyze", "--compare", RAW, FIXTURES / "fixture_graph_raw.csv", in_process=True)
    assert result.returncode == 0, result.stderr
    assert "differ more than 10x" in result.stdout
    plain = run_nsprof("analyze", "--compare", RAW, FIXTURES / "fixture_node_details.csv", in_process=True)
    assert "differ more than 10x" not in plain.stdout


def test_user_code_output_goes_to_stderr_so_json_on_stdout_stays_clean():
    # TileLang logs to stdout; a --json result must still parse. Python- and C-level writes alike.
    code = (
        "import os\nfrom nsprof.host.redirect import results_only_on_stdout\n"
        "with results_only_on_stdout():\n"
        "    print('python noise')\n"
        "    os.write(1, b'c noise\\n')\n"
        "print('{\"result\": 1}')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{"result": 1}\n'
    assert "python noise" in result.stderr and "c noise" in result.stderr


def _table_rows(stdout: str) -> list[list[str]]:
    """The data rows of analyze's tables, split into cells (two or more spaces apart)."""
    import re

    rows, in_table = [], False
    for line in stdout.splitlines():
        if line.startswith("------"):
            in_table = True
            continue
        if not line.strip() or line.startswith("note:"):
            in_table = False
            continue
        if in_table:
            rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_kernels_sharing_a_short_name_print_as_distinct_rows():
    import sqlite3

    sqlite = FIXTURES / "fixture.sqlite"
    with sqlite3.connect(sqlite.resolve().as_uri() + "?mode=ro", uri=True) as conn:
        kernels, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL"
        ).fetchone()
    result = run_nsprof("analyze", sqlite, in_process=True)
    assert result.returncode == 0, result.stderr
    rows = _table_rows(result.stdout)
    cells = [(row[1], row[2]) for row in rows]  # range, kernel
    assert len(cells) == len(set(cells)), "two rows print alike"
    assert sum(int(row[3]) for row in rows) == kernels
    # over all ranges, every full name is a row of its own somewhere
    assert len({row[2].split(" #")[0] + row[2] for row in rows if "vectorized" in row[2]}) >= 5 <= distinct


def test_names_that_differ_past_the_display_width_never_print_as_one_row(tmp_path):
    import shutil
    import sqlite3

    path = tmp_path / "long.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", path)
    base = "k" * 70
    with sqlite3.connect(path) as conn:
        ids = [
            i
            for (i,) in conn.execute(
                "SELECT DISTINCT k.shortName FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName"
                " WHERE s.value IN ('gemm_kernel', 'nvjet_sm90_hsh_64x24_64x16_2x4_h_bz_NNT')"
            )
        ]
        assert len(ids) == 2
        for suffix, string_id in zip(("_one", "_two"), ids):
            conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (base + suffix, string_id))
        # both names in one group: their kernels all outside any range
        expected = conn.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName IN (?, ?)", ids
        ).fetchone()[0]
        conn.execute("DELETE FROM NVTX_EVENTS")
    for args, kernel_cell in (((path,), 2), (("--compare", path, path), 1)):
        result = run_nsprof("analyze", *args, in_process=True)
        assert result.returncode == 0, result.stderr
        rows = [row for row in _table_rows(result.stdout) if row[kernel_cell].startswith("kkk")]
        labels = [row[kernel_cell] for row in rows]
        assert len(labels) == 2 and len(set(labels)) == 2, result.stdout
        if kernel_cell == 2:
            assert sum(int(row[3]) for row in rows) == expected


def test_json_rows_are_written_in_chunks_with_the_same_text(monkeypatch, capsys):
    import nsprof.render.json as render_json
    from nsprof.reports import read_report

    frame = read_report(FIXTURES / "fixture.sqlite")
    monkeypatch.setattr(render_json, "JSON_CHUNK_ROWS", 7)  # 65 rows: 10 chunks
    render_json.write_rows(frame, sys.stdout)
    assert json.loads(capsys.readouterr().out) == json.loads(
        frame.to_json(orient="records", force_ascii=False)
    )
    render_json.write_rows(frame.iloc[:0], sys.stdout)
    assert json.loads(capsys.readouterr().out) == []


def test_an_error_naming_a_path_with_a_newline_is_still_one_line(tmp_path):
    """A path is the user's text: a newline in it must not split the error, nor let a name fake a
    second `nsprof: error:` line."""
    named = tmp_path / "x\nnsprof: error: fake.csv"
    result = run_nsprof("analyze", named, in_process=True)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    named.write_text("not a report\n")
    result = run_nsprof("analyze", named, RAW, "--format", "csv", in_process=True)
    assert result.returncode == 2 and result.stdout.strip()  # the good report is printed
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_plot_with_nothing_to_draw_prints_no_python_warning(tmp_path):
    pytest.importorskip("matplotlib")
    done = run_nsprof(
        "analyze", RAW, "--kernel", "matches-no-kernel", "--plot", tmp_path / "p.png", timeout=120
    )
    assert "Warning" not in done.stderr and "warn(" not in done.stderr, done.stderr
