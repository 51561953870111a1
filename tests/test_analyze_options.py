"""`nsprof analyze`'s options: filters, sort, top, units, warm-up rows, columns, names,
formats, `-` for standard output, --compare and the plots.

Every number is checked against an independent read of the real fixtures: the csv module on
ncu's raw CSV, plain SQL on the nsys SQLite export (test_nsys.expected_fixture_rows attributes
kernels to NVTX ranges by direct SQL), never against nsprof's own output.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import sqlite3
import statistics
import sys
from collections import defaultdict

import pytest
from conftest import FIXTURES, run_nsprof
from test_nsys import connect_ro, expected_fixture_rows

RAW = FIXTURES / "fixture_node_raw.csv"
SQLITE = FIXTURES / "fixture.sqlite"
PP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
SS = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
CFG = re.compile(r"cfg(\d+)\.(direct|graph)\.r\d+")
NO_RANGE = "(no range)"


def ok(*args, **kwargs):
    result = run_nsprof("analyze", *args, in_process=True, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


def table_rows(stdout: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and data rows of the first fixed-width table printed."""
    lines = stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    header = re.split(r"\s{2,}", lines[rule - 1].strip())
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip() or line.startswith(("note:", "only in", "over ")):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return header, rows


def csv_rows(stdout: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(stdout)))


# --- independent reads ------------------------------------------------------------------------


def short_of(full: str) -> str:
    """A C++ name's function name: `void at::native::k<...>(...)` -> `k`."""
    return full.split("<")[0].split("(")[0].split("::")[-1].split()[-1]


def ncu_kernels() -> list[dict]:
    """The raw CSV's kernels: range as analyze names it, short name, duration (ns), cycles."""
    with open(RAW, newline="") as handle:
        rows = list(csv.DictReader(handle))[1:]  # the units row
    out = []
    for r in rows:
        match = CFG.search(r[PP])
        group = (
            f"cfg{match[1]}.{match[2]}"
            if match
            else "torch_push"
            if "torch_push" in r[PP]
            else "startend"
            if "startend" in r[SS]
            else NO_RANGE
        )
        out.append(
            {
                "range": group,
                "kernel": short_of(r["Kernel Name"]),
                "full": r["Kernel Name"],
                "duration_ns": float(r["gpu__time_duration.sum"]) * 1e3,  # the units row says us
                "cycles": float(r["gpc__cycles_elapsed.max"].replace(",", "")),
            }
        )
    return out


def nsys_kernels(path=SQLITE) -> list[dict]:
    """The SQLite's kernels with their range (as analyze names it) and full (demangled) name."""
    rows = expected_fixture_rows(path)
    with connect_ro(path) as con:
        fulls = [
            f
            for (f,) in con.execute(
                "SELECT d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName"
                " ORDER BY k.start, k.rowid"
            )
        ]
    assert len(fulls) == len(rows)
    out = []
    for row, full in zip(rows, fulls):
        group = (
            f"cfg{row['config_id']}.{CFG.fullmatch(row['range'])[2]}"
            if row["config_id"] is not None
            else row["range"] or NO_RANGE
        )
        out.append({"range": group, "kernel": row["kernel"], "full": full, "duration_ns": row["duration_ns"]})
    return out


def by_key(kernels, key=("range", "full")) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = defaultdict(list)
    for k in kernels:
        out[tuple(k[c] for c in key)].append(k["duration_ns"])
    return out


def natural(name: str):
    return (name == NO_RANGE, [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)])


def tau_b(x, y) -> float:
    concordant = discordant = ties_x = ties_y = pairs = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            pairs += 1
            ties_x += dx == 0
            ties_y += dy == 0
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    return (concordant - discordant) / math.sqrt((pairs - ties_x) * (pairs - ties_y))


# --- rows: filters, warm-up, sort, top ---------------------------------------------------------


def test_kernel_and_range_filters():
    kernels = nsys_kernels()
    out = csv_rows(ok(SQLITE, "--kernel", "elementwise", "--range", r"^cfg2\.", "--format", "csv").stdout)
    expected = {
        key: len(v)
        for key, v in by_key(kernels).items()
        if re.search("elementwise", key[1]) and key[0].startswith("cfg2.")
    }
    assert expected and {(r["range"], r["kernel_full"]): int(r["count"]) for r in out} == expected
    # the short name matches too (ncu's --kernel-name regex: matches the function name)
    names = {r["kernel"] for r in csv_rows(ok(SQLITE, "--kernel", "^gemm_kernel$", "--format", "csv").stdout)}
    assert names == {"gemm_kernel"}
    bad = run_nsprof("analyze", SQLITE, "--kernel", "(", in_process=True)
    assert bad.returncode == 2 and "regular expression" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_no_range_rows_last_by_default_and_dropped_by_no_warmup():
    kernels = nsys_kernels()
    _, rows = table_rows(ok(SQLITE).stdout)
    ranges = [r[1] for r in rows]
    warm = sum(k["range"] == NO_RANGE for k in kernels)
    assert warm == 38
    first = ranges.index(NO_RANGE)
    assert set(ranges[first:]) == {NO_RANGE} and sum(int(r[3]) for r in rows[first:]) == warm
    _, rows = table_rows(ok(SQLITE, "--no-warmup").stdout)
    assert NO_RANGE not in [r[1] for r in rows]
    assert sum(int(r[3]) for r in rows) == len(kernels) - warm


def test_ranges_in_natural_order(tmp_path):
    # the fixture's cfg1 renamed cfg10: cfg2 must come before it
    with open(RAW, newline="") as handle:
        rows = list(csv.reader(handle))
    column = rows[0].index(PP)
    for row in rows[2:]:
        row[column] = row[column].replace("cfg1.", "cfg10.")
    path = tmp_path / "cfg10.csv"
    with open(path, "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)
    printed = list(dict.fromkeys(r[1] for r in table_rows(ok(path).stdout)[1]))
    expected = sorted({k["range"].replace("cfg1.", "cfg10.") for k in ncu_kernels()}, key=natural)
    assert printed == expected
    assert printed.index("cfg2.direct") < printed.index("cfg10.direct")


@pytest.mark.parametrize("sort_by", ["median", "total", "count", "name"])
def test_sort(sort_by):
    groups = by_key(nsys_kernels())
    out = csv_rows(ok(SQLITE, "--sort", sort_by, "--format", "csv").stdout)
    assert len(out) == len(groups)
    value = {"median": statistics.median, "total": sum, "count": len}
    if sort_by == "name":
        names = [r["kernel"] for r in out]
        assert names == sorted(names)
        return
    printed = [(r["range"], r["kernel_full"]) for r in out]
    values = [value[sort_by](groups[key]) for key in printed]
    assert values == sorted(values, reverse=True)


def test_top_n_after_sort():
    groups = by_key(nsys_kernels())
    out = csv_rows(ok(SQLITE, "--sort", "total", "--top", "3", "--format", "csv").stdout)
    totals = sorted((sum(v) for v in groups.values()), reverse=True)
    assert [float(r["total_ns"]) for r in out] == pytest.approx(totals[:3])
    _, rows = table_rows(ok(SQLITE, "--top", "2").stdout)
    assert len(rows) == 2


# --- columns and units ---------------------------------------------------------------------------


def test_max_total_and_share_of_time_columns():
    kernels = nsys_kernels()
    groups = by_key(kernels, ("range", "kernel"))
    everything = sum(k["duration_ns"] for k in kernels)
    header, rows = table_rows(ok(SQLITE, "--range", "cfg1.direct").stdout)
    assert header[4:12] == [
        "median µs",
        "min µs",
        "max µs",
        "mean µs",
        "std µs",
        "cv %",
        "total µs",
        "% of time",
    ]
    (row,) = rows
    durations = groups[("cfg1.direct", "gemm_kernel")]
    assert row[6] == f"{max(durations) / 1e3:,.3f}"
    assert row[10] == f"{sum(durations) / 1e3:,.3f}"
    assert row[11] == f"{100 * sum(durations) / everything:.1f}"  # of the whole report, filters or not


def test_columns_empty_for_the_whole_report_are_dropped():
    header, _ = table_rows(ok(SQLITE).stdout)
    assert "cycles" not in header and "clock GHz" not in header  # nsys records neither
    header, rows = table_rows(ok(RAW, "--range", "^cfg0.direct$").stdout)
    assert header[-2:] == ["cycles", "clock GHz"]
    cycles = [k["cycles"] for k in ncu_kernels() if k["range"] == "cfg0.direct"]
    assert rows[0][header.index("cycles")] == f"{statistics.median(cycles):,.0f}"


@pytest.mark.parametrize(
    ("unit", "scale", "fmt"), [("ns", 1, ",.0f"), ("us", 1e3, ",.3f"), ("ms", 1e6, ",.6f")]
)
def test_timeunit(unit, scale, fmt):
    durations = [k["duration_ns"] for k in ncu_kernels() if k["range"] == "cfg1.graph"]
    header, rows = table_rows(ok(RAW, "--range", "cfg1.graph", "--timeunit", unit).stdout)
    label = {"ns": "ns", "us": "µs", "ms": "ms"}[unit]
    assert header[4] == f"median {label}"
    assert rows[0][4] == format(statistics.median(durations) / scale, fmt)
    assert rows[0][5] == format(min(durations) / scale, fmt)


# --- names ---------------------------------------------------------------------------------------


def _long_names(tmp_path):
    """The fixture with two kernels renamed to long names that differ only at their end."""
    path = tmp_path / "long.sqlite"
    shutil.copy(SQLITE, path)
    names = {"gemm_kernel": "k" * 70 + "_one", "nvjet_sm90_hsh_64x24_64x16_2x4_h_bz_NNT": "k" * 70 + "_two"}
    with sqlite3.connect(path) as conn:
        for old, new in names.items():
            conn.execute("UPDATE StringIds SET value = ? WHERE value = ?", (new, old))
    return path, names


def test_long_names_are_cut_from_the_middle_and_whole_with_wide(tmp_path):
    path, names = _long_names(tmp_path)
    _, rows = table_rows(ok(path, "--range", "^cfg2.direct$|^cfg0.direct$").stdout)
    cells = {r[1]: r[2] for r in rows if r[2].startswith("k")}
    assert cells["cfg0.direct"].endswith("_one") and cells["cfg2.direct"].endswith("_two")
    assert all("…" in c and len(c) <= 48 for c in cells.values())
    _, rows = table_rows(ok(path, "--wide", "--range", "^cfg2.direct$|^cfg0.direct$").stdout)
    assert {r[2] for r in rows if r[2].startswith("k")} == set(names.values())


def test_names_demangled_shows_the_full_names():
    kernels = nsys_kernels()
    out = table_rows(ok(SQLITE, "--names", "demangled", "--wide", "--range", "cfg2.graph").stdout)[1]
    expected = {k["full"] for k in kernels if k["range"] == "cfg2.graph"}
    assert {r[2] for r in out} == expected and len(out) == 2


def test_two_kernels_never_print_as_one_row():
    kernels = nsys_kernels()
    for args in ((), ("--names", "demangled"), ("--wide",)):
        _, rows = table_rows(ok(SQLITE, *args).stdout)
        assert len({(r[1], r[2]) for r in rows}) == len(rows) == len(by_key(kernels)), args


# --- formats and standard output -----------------------------------------------------------------


def test_format_json_and_csv_of_the_summary():
    groups = by_key(nsys_kernels())
    rows = json.loads(ok(SQLITE, "--format", "json").stdout)
    assert len(rows) == len(groups) and "group" not in rows[0] and rows[0]["file"] == str(SQLITE)
    for row in rows:
        durations = groups[(row["range"], row["kernel_full"])]
        assert row["count"] == len(durations) and row["median_ns"] == statistics.median(durations)
        assert row["max_ns"] == max(durations) and row["total_ns"] == pytest.approx(sum(durations))
    assert [r["range"] for r in csv_rows(ok(SQLITE, "--format", "csv").stdout)] == [r["range"] for r in rows]


def test_format_markdown():
    groups = by_key(nsys_kernels())
    lines = [line for line in ok(SQLITE, "--format", "markdown").stdout.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| source | range | kernel | n |") and set(lines[1]) <= set("|-:")
    assert len(lines) - 2 == len(groups)
    assert sum(int(line.split("|")[4]) for line in lines[2:]) == sum(len(v) for v in groups.values())


def test_dash_is_standard_output(tmp_path):
    result = ok(RAW.resolve(), "--csv", "-", cwd=tmp_path)
    assert not (tmp_path / "-").exists()
    rows = csv_rows(result.stdout)
    assert len(rows) == len(ncu_kernels()) == 27
    assert [float(r["duration_ns"]) for r in rows] == pytest.approx([k["duration_ns"] for k in ncu_kernels()])
    both = run_nsprof("analyze", RAW, "--csv", "-", "--json", in_process=True)
    assert both.returncode == 2 and "standard output" in both.stderr


def test_summarize_calls_its_key_column_range():
    import nsprof

    summary = nsprof.summarize(nsprof.read_report(RAW))
    assert "range" in summary and (summary["range"] == summary["group"]).all()  # group: one release more
    groups = by_key(ncu_kernels(), ("range", "kernel"))
    assert {(r, k): n for r, k, n in zip(summary["range"], summary["kernel"], summary["count"])} == {
        key: len(v) for key, v in groups.items()
    }


# --- compare ---------------------------------------------------------------------------------------


def _expected_compare():
    """Per range × short name, A (ncu CSV) and B (nsys) durations; per shared range the sum of medians."""
    a = by_key(ncu_kernels(), ("range", "kernel"))
    b = by_key(nsys_kernels(), ("range", "kernel"))
    shared = sorted({r for r, _ in a} & {r for r, _ in b} - {NO_RANGE}, key=natural)
    times = {}
    for r in shared:
        keys = [k for k in a if k[0] == r and k in b]
        times[r] = (sum(statistics.median(a[k]) for k in keys), sum(statistics.median(b[k]) for k in keys))
    return a, b, shared, times


def test_compare_rows_counts_one_sided_ranges_and_closing_line():
    a, b, shared, times = _expected_compare()
    stdout = ok("--compare", RAW, SQLITE).stdout
    header, rows = table_rows(stdout)
    assert "cycles B/A" not in header  # nsys has no cycles: the column was always empty
    assert header[5:7] == ["n A", "n B"]
    assert list(dict.fromkeys(r[0] for r in rows)) == shared
    for r in rows:
        key = (r[0], r[1])
        assert (int(r[5]), int(r[6])) == (len(a[key]), len(b[key]))
        assert r[4] == f"{statistics.median(b[key]) / statistics.median(a[key]):.3f}"
    warm = len(b[(NO_RANGE,)]) if (NO_RANGE,) in b else sum(len(v) for k, v in b.items() if k[0] == NO_RANGE)
    only = [line for line in stdout.splitlines() if line.startswith("only in")]
    assert only == [f"only in B: {NO_RANGE} ({warm} kernels)"]
    ratios = [times[r][1] / times[r][0] for r in shared]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    tau = tau_b([times[r][0] for r in shared], [times[r][1] for r in shared])
    fastest_a = min(shared, key=lambda r: times[r][0])
    fastest_b = min(shared, key=lambda r: times[r][1])
    closing = stdout.strip().splitlines()[-1]
    assert closing.startswith(f"over {len(shared)} shared range(s)")
    assert f"geometric-mean B/A {geomean:.3f}" in closing and f"Kendall τ {tau:.3f}" in closing
    assert fastest_a == fastest_b and f"same fastest: {fastest_a}" in closing


def test_compare_format_json_and_filters():
    a, b, shared, times = _expected_compare()
    document = json.loads(ok("--compare", RAW, SQLITE, "--format", "json").stdout)
    assert document["only_in_b"] == [NO_RANGE] and document["only_in_a"] == []
    assert [r["range"] for r in document["per_range"]] == shared
    for r in document["per_range"]:
        assert r["a_ns"] == pytest.approx(times[r["range"]][0]) and r["b_ns"] == pytest.approx(
            times[r["range"]][1]
        )
    assert document["overall"]["ranges"] == len(shared) and document["overall"]["same_fastest"] is True
    rows = csv_rows(ok("--compare", RAW, SQLITE, "--format", "csv", "--kernel", "gemm", "--no-warmup").stdout)
    assert {(r["range"], int(r["count_a"]), int(r["count_b"])) for r in rows} == {
        (k[0], len(a[k]), len(b[k])) for k in a if k[1] == "gemm_kernel"
    }


# --- plots -------------------------------------------------------------------------------------------


def test_durations_plot_holds_each_range_and_its_kernels(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PathCollection

    from nsprof.analysis.listing import order, samples, select
    from nsprof.analysis.summary import summarize
    from nsprof.render.analyze_plot import durations_plot
    from nsprof.reports import read_report

    kernels = nsys_kernels()
    frame = read_report(SQLITE)
    summary = order(select(summarize(frame)))
    out = tmp_path / "d.png"
    fig = durations_plot([("fixture", samples(frame, summary))], str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (ax,) = fig.axes
    ranges = sorted({k["range"] for k in kernels}, key=natural)
    assert [t.get_text() for t in ax.get_yticklabels()] == ranges  # a row per range, from the top
    rows = defaultdict(int)  # each point's row: its range (jittered within ±0.5)
    for c in ax.collections:
        for _, y in c.get_offsets() if isinstance(c, PathCollection) else []:
            rows[ranges[round(y)]] += 1
    assert dict(rows) == {r: sum(k["range"] == r for k in kernels) for r in ranges}
    durations = [k["duration_ns"] for k in kernels]
    assert (max(durations) > 10 * min(durations)) == (ax.get_xscale() == "log")
    # through the command line: a file, or PNG on standard output
    ok(SQLITE, "--plot", tmp_path / "cli.svg")
    assert (tmp_path / "cli.svg").read_text().lstrip().startswith("<?xml")
    png = run_nsprof("analyze", RAW, "--plot", "-", text=False, in_process=True)
    assert png.returncode == 0 and png.stdout[:4] == b"\x89PNG"


def test_ratio_plot_holds_the_shared_ranges(tmp_path):
    pytest.importorskip("matplotlib")
    from nsprof.analysis.summary import compare, per_range
    from nsprof.render.analyze_plot import ratio_plot
    from nsprof.reports import read_report

    _, _, shared, times = _expected_compare()
    fig = ratio_plot(
        per_range(compare(read_report(RAW), read_report(SQLITE))), "a", "b", str(tmp_path / "r.png")
    )
    assert (tmp_path / "r.png").stat().st_size > 1000
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == shared
    assert list(ax.lines[0].get_xdata()) == pytest.approx([times[r][1] / times[r][0] for r in shared])
    ok("--compare", RAW, SQLITE, "--plot", tmp_path / "cli.png")
    assert (tmp_path / "cli.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib_is_one_line(tmp_path, monkeypatch):
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails, as without it
        result = run_nsprof("analyze", RAW, "--plot", tmp_path / "x.png", in_process=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == "nsprof: error: --plot needs matplotlib: pip install 'nsprof[plot]'"
    bad = run_nsprof("analyze", RAW, "--plot", tmp_path / "x.txt", in_process=True)
    assert bad.returncode == 2 and ".png" in bad.stderr


# --- docs/analyze.md shows real output -------------------------------------------------------------


def test_analyze_page_examples_are_the_real_output():
    import shlex
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "analyze.md").read_text()
    section = page.split("\n## On the fixtures\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^    \$ nsprof analyze (.*)\n((?:    .*\n|\n)*?)(?=    \$ |\S|\Z)", section, re.M)
    assert len(blocks) >= 4
    for command, shown in blocks:
        result = ok(*shlex.split(command), cwd=FIXTURES)
        expected = "\n".join(line[4:] for line in shown.rstrip("\n").splitlines())
        assert result.stdout.rstrip("\n") == expected.rstrip("\n"), command


@pytest.mark.parametrize("view", [["--by", "range"], ["--by", "kernel"]])
@pytest.mark.parametrize("option", ["--kernel", "--range"])
def test_an_expression_that_backtracks_without_end_is_one_line_not_a_hang(
    tmp_path, view, option, monkeypatch
):
    # (a|aa)+$ on a long run of a's not at the end tries every split of it: a lifetime, unbounded.
    # The bound shortened (each search spins a CPU until it): the same line, sooner.
    monkeypatch.setattr("nsprof.analysis.patterns.SEARCH_LIMIT_S", 0.2)
    report = tmp_path / "long.sqlite"
    report.write_bytes(SQLITE.read_bytes())
    with sqlite3.connect(report) as conn:
        conn.execute("UPDATE StringIds SET value = ? || value", ("a" * 64 + "!",))
        conn.execute("UPDATE NVTX_EVENTS SET text = ? || text WHERE text IS NOT NULL", ("a" * 64 + "!",))
    done = run_nsprof("analyze", report, *view, option, "(a|aa)+$", in_process=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert option in line and "(a|aa)+$" in line, line


def test_a_bounded_search_leaves_the_callers_own_timer_alone():
    # The bound is the search's own (no SIGALRM): a program that uses nsprof keeps its interval timer.
    import signal

    from nsprof.analysis.patterns import searcher

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    signal.setitimer(signal.ITIMER_REAL, 60.0)
    try:
        assert searcher("gemm", "--kernel")("sm90_gemm_kernel")
        left, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert 0 < left <= 60.0 and not fired


def test_compare_as_json_or_csv_says_how_each_side_was_taken(ncu_rep_dir):
    """--compare's table says how each side ran (ncu at base clocks, L2 flushed; nsys at the card's own): its
    JSON and CSV said nothing of it, beside ratios of numbers taken two ways."""
    a, b = ncu_rep_dir / "fixture_node.ncu-rep", SQLITE
    heads = ok("--compare", a, b).stdout.splitlines()[:2]
    taken = [re.fullmatch(r"[AB]: .*  \((.*)\)", line).group(1) for line in heads]
    assert "base" in taken[0] and "nsys" in taken[1], taken
    document = json.loads(ok("--compare", a, b, "--format", "json").stdout)
    assert [document["a_taken"], document["b_taken"]] == taken
    rows = list(csv.DictReader(io.StringIO(ok("--compare", a, b, "--format", "csv").stdout)))
    assert rows and all([r["taken_a"], r["taken_b"]] == taken for r in rows)


def test_by_kernel_as_json_or_csv_carries_the_reports_conditions_as_the_summary_does(ncu_rep_dir):
    report = ncu_rep_dir / "fixture_node.ncu-rep"
    summary = json.loads(ok(report, "--format", "json").stdout)
    conditions = {(r["clock_control"], r["cache_control"]) for r in summary}
    assert conditions == {("base", "all")}, conditions
    rows = json.loads(ok(report, "--by", "kernel", "--format", "json").stdout)
    assert rows and {(r.get("clock_control"), r.get("cache_control")) for r in rows} == conditions
    rows = list(csv.DictReader(io.StringIO(ok(report, "--by", "kernel", "--format", "csv").stdout)))
    assert rows and {(r.get("clock_control"), r.get("cache_control")) for r in rows} == conditions
