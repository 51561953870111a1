"""Plots a person can read: every series its own colour and marker whatever their
number, legends outside the data, a legend entry for every kernel drawn (the top ones by time and
"other"), a bounded size however many ranges, and titles and labels inside the image.

What is drawn is read back from the matplotlib artists and their extents as the renderer lays
them out; the inputs are the real fixtures (tests/fixtures/) and the recorded H200 validate run
(benchmarks/results/validate_seed_gemm.json), and the expected values come from reading those
independently (json, SQL), never from nsprof's output.
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES
from test_analyze_options import nsys_kernels

matplotlib = pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "validate_seed_gemm.json"
TRUTHS = ["ncu:direct", "ncu:graph", "nsys:direct", "nsys:graph"]
SQLITE = FIXTURES / "fixture.sqlite"
MAX_PX = 2000  # the most pixels a saved plot may have on either side


# --------------------------------------------------------------------------- reading a figure


def renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def area(a, b) -> float:
    """The area (px²) two display boxes share."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


def legends(fig) -> list:
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]


def assert_legends_clear_of_data(fig) -> None:
    """No legend box overlaps any axes' data area."""
    r = renderer(fig)
    found = legends(fig)
    assert found, "no legend drawn"
    for legend in found:
        box = legend.get_window_extent(r)
        name = [t.get_text() for t in legend.get_texts()][:3]
        for ax in fig.axes:
            assert area(box, ax.get_window_extent(r)) < 1.0, f"legend {name} covers axes {ax.get_title()!r}"
            assert area(box, ax.title.get_window_extent(r)) < 1.0, f"legend {name} covers a title"
        if fig._suptitle is not None:
            assert area(box, fig._suptitle.get_window_extent(r)) < 1.0, f"legend {name} covers the title"


def assert_text_inside(fig) -> None:
    """Titles, legends, and each axes with its drawn labels and tick labels lie inside the image
    (nothing cut off)."""
    r = renderer(fig)
    page = fig.bbox
    texts = {id(t): t for t in [*fig.texts, *([fig._suptitle] if fig._suptitle is not None else [])]}
    parts = [(t.get_text(), t.get_window_extent(r)) for t in texts.values() if t.get_visible()]
    parts += [("legend", legend.get_window_extent(r)) for legend in legends(fig)]
    for ax in fig.axes:
        parts += [(f"title {ax.get_title()!r}", ax.title.get_window_extent(r))]
        parts += [(f"axes {ax.get_title()!r} with its labels", ax.get_tightbbox(r))]
    for label, box in parts:
        assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1, f"{label} cut at the side"
        assert box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1, f"{label} cut at the top or bottom"


def series(ax) -> dict[str, tuple[str, tuple]]:
    """{label: (colour, marker path)} of each labelled scatter of `ax`."""
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_hex

    out = {}
    for c in ax.collections:
        if isinstance(c, PathCollection) and not c.get_label().startswith("_"):
            colour = to_hex(c.get_facecolor()[0] if len(c.get_facecolor()) else c.get_edgecolor()[0])
            marker = tuple(map(tuple, c.get_paths()[0].vertices.round(3)))
            out[c.get_label()] = (colour, marker)
    return out


def handle_style(handle) -> tuple[str, tuple]:
    """(colour, marker path) of a legend handle (a scatter's or a Line2D's)."""
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D
    from matplotlib.markers import MarkerStyle

    if isinstance(handle, Line2D):
        m = MarkerStyle(handle.get_marker())
        path = m.get_path().transformed(m.get_transform())
        return to_hex(handle.get_markerfacecolor()), tuple(map(tuple, path.vertices.round(3)))
    colour = handle.get_facecolor()
    return to_hex(colour[0] if len(colour) else handle.get_edgecolor()[0]), tuple(
        map(tuple, handle.get_paths()[0].vertices.round(3))
    )


def png_size(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", raw[16:24])


# --------------------------------------------------------------------------- validate --plot


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def agreement_fig(record):
    from nsprof.render.plot import agreement_figure

    timers = sorted({r["timer"] for r in record["agreement"]})
    return agreement_figure(
        pd.DataFrame(record["per_config"]),
        pd.DataFrame(record["agreement"]),
        timers,
        TRUTHS,
        floors=pd.DataFrame(record["noise_floor"]),
    )


def test_agreement_plot_gives_each_of_its_11_timers_its_own_colour_and_marker(record, agreement_fig):
    timers = sorted({r["timer"] for r in record["agreement"]})
    assert len(timers) == 11
    styles = None
    for ax in agreement_fig.axes:  # the 4 scatter panels and the τ panel
        drawn = series(ax)
        assert set(timers) <= set(drawn), ax.get_title()
        mine = {t: drawn[t] for t in timers}
        assert len({c for c, _ in mine.values()}) == 11, mine  # no colour twice
        assert len({m for _, m in mine.values()}) == 11, mine  # no marker twice
        styles = styles or mine
        assert mine == styles  # a timer looks the same in every panel
    # the legend names every timer once, with the style its points have
    entries = {
        t.get_text(): handle_style(h)
        for legend in legends(agreement_fig)
        for t, h in zip(legend.get_texts(), legend.legend_handles)
    }
    assert {t: entries[t] for t in timers} == styles


def test_agreement_plot_legends_stay_off_the_data_and_inside_the_image(agreement_fig):
    assert_legends_clear_of_data(agreement_fig)
    assert_text_inside(agreement_fig)


def test_series_styles_never_repeat():
    from nsprof.render.plot import series_styles

    for n in (1, 2, 10, 11, 13, 60, 150):
        styles = series_styles(n)
        assert len(styles) == n and len(set(styles)) == n
        if n <= 12:  # as many colours and markers as series: neither repeats
            assert len({c for c, _ in styles}) == n and len({m for _, m in styles}) == n


# --------------------------------------------------------------------------- tune --plot


def tune_table():
    """A ranked table (nsprof.analysis.ranking.rank) of the ncu fixture's configs: each config's
    median kernel time in its direct ranges, read with the csv module."""
    import csv
    import re
    import statistics

    from nsprof.analysis.ranking import rank

    times = defaultdict(list)
    with open(FIXTURES / "fixture_node_raw.csv", newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}
    duration = col["gpu__time_duration.sum"]
    assert rows[1][duration] == "us"  # the units row
    for row in rows[2:]:
        name = row[col["thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"]]
        m = re.search(r"cfg(\d+)\.direct", name)
        if m:
            times[int(m[1])].append(float(row[duration]) * 1e3)
    ids = sorted(times)
    summary = pd.DataFrame(
        {
            "config_id": ids,
            "median_ns": [statistics.median(times[c]) for c in ids],
            "min_ns": [min(times[c]) for c in ids],
            "spread": [0.02] * len(ids),
            "error": [None] * len(ids),
        }
    )
    table = rank(summary)
    table.insert(
        2,
        "config",
        [f"block_M=16,block_N={32 * (c + 1)},block_K=128,num_stages=3" for c in table["config_id"]],
    )
    table["ci_low_ns"] = table["value_ns"] * 0.99
    table["ci_high_ns"] = table["value_ns"] * 1.01
    table["tied_with_best"] = [True] + [False] * (len(table) - 1)
    return table, times


def test_tune_plot_legend_leaves_the_slowest_point_and_its_title_fits():
    from nsprof.render.tune_plot import tune_figure

    table, times = tune_table()
    assert len(times) == 3
    table["tied_with_best"] = [True, True, False]  # a tie: the legend has two entries and an interval
    fig = tune_figure(
        table, "ranked by ncu (clock base, cache all), mode direct, median of 5 reps, per config"
    )
    assert_legends_clear_of_data(fig)
    assert_text_inside(fig)
    # the slowest config's point is drawn where the legend is not
    r = renderer(fig)
    (ax,) = fig.axes
    slowest = max(times, key=lambda c: sorted(times[c])[len(times[c]) // 2])
    rank_of = {int(c): i for i, c in enumerate(table["config_id"])}
    x, y = ax.transData.transform((sorted(times[slowest])[1] / 1e3, rank_of[slowest]))  # its median, µs
    for legend in legends(fig):
        assert not legend.get_window_extent(r).contains(x, y)


# --------------------------------------------------------------------------- analyze --plot


def fixture_samples():
    from nsprof.analysis.listing import order, samples, select
    from nsprof.analysis.summary import summarize
    from nsprof.reports import read_report

    frame = read_report(SQLITE)
    return samples(frame, order(select(summarize(frame))))


def test_durations_plot_names_every_kernel_it_draws():
    from nsprof.render.analyze_plot import TOP_KERNELS, durations_plot

    kernels = nsys_kernels()
    total = defaultdict(float)
    count = defaultdict(int)
    for k in kernels:
        total[k["full"]] += k["duration_ns"]
        count[k["full"]] += 1
    assert len(total) > TOP_KERNELS  # more kernels than the legend names one by one: an "other"
    top = sorted(total, key=lambda f: -total[f])[:TOP_KERNELS]
    rest = [f for f in total if f not in top]

    fig = durations_plot([("fixture", fixture_samples())], None)
    (ax,) = fig.axes
    drawn = series(ax)
    legend = legends(fig)
    assert len(legend) == 1
    labels = [t.get_text() for t in legend[0].get_texts()]
    entries = dict(zip(labels, (handle_style(h) for h in legend[0].legend_handles)))
    assert len(labels) == TOP_KERNELS + 1 and labels[-1] == f"other ({len(rest)} kernels)"
    # each legend entry is a drawn series with that style, top kernels in order of time
    assert set(labels) == set(drawn) and all(entries[k] == drawn[k] for k in labels)
    assert len(set(entries.values())) == len(labels)
    by_label = {}
    from matplotlib.collections import PathCollection

    for c in ax.collections:
        if isinstance(c, PathCollection) and c.get_label() in entries:
            by_label[c.get_label()] = len(c.get_offsets())
    assert [by_label[label] for label in labels] == [count[f] for f in top] + [sum(count[f] for f in rest)]
    short = {k["full"]: k["kernel"] for k in kernels}
    for label, full in zip(labels, top):
        assert label.startswith(short[full][:40])
    assert_legends_clear_of_data(fig)
    assert_text_inside(fig)


@pytest.mark.parametrize("n_ranges", [60, 600])
def test_durations_plot_size_is_bounded_however_many_ranges(tmp_path, n_ranges):
    from nsprof.render.analyze_plot import durations_plot

    base = fixture_samples()
    rows = base.iloc[[i % len(base) for i in range(2 * n_ranges)]].copy()
    rows["range"] = [f"step {i // 2}" for i in range(2 * n_ranges)]
    out = tmp_path / "many.png"
    fig = durations_plot([("many", rows)], str(out))
    width, height = png_size(out)
    assert width <= MAX_PX and height <= MAX_PX, (width, height)
    assert_text_inside(fig)
    # the range labels shown are in order and none covers another
    (ax,) = fig.axes
    r = renderer(fig)
    shown = [t for t in ax.get_yticklabels() if t.get_text()]
    names = [f"step {i}" for i in range(n_ranges)]
    assert [t.get_text() for t in shown] == [n for n in names if n in {t.get_text() for t in shown}]
    assert len(shown) >= min(n_ranges, 30)
    boxes = [t.get_window_extent(r) for t in shown]
    assert all(area(a, b) < 1.0 for a, b in zip(boxes, boxes[1:]))


def test_ratio_plot_size_is_bounded(tmp_path):
    from nsprof.render.analyze_plot import ratio_plot

    ranges = pd.DataFrame(
        {"range": [f"step {i}" for i in range(600)], "ratio": [1.0 + i / 600 for i in range(600)]}
    )
    out = tmp_path / "ratio.png"
    fig = ratio_plot(ranges, "a", "b", str(out), geomean=1.4)
    width, height = png_size(out)
    assert width <= MAX_PX and height <= MAX_PX, (width, height)
    assert_legends_clear_of_data(fig)
    assert_text_inside(fig)


MATH = r"cost $\bad{$"  # not mathtext matplotlib can parse: drawn as it is written


def test_a_dollar_in_a_config_or_range_is_drawn_as_written_not_parsed(tmp_path):
    import shutil
    import sqlite3

    from conftest import FIXTURES, run_nsprof

    target = tmp_path / "t.py"
    target.write_text(
        "import nsprof.space\n"
        f"configs = [{{'ns': 1000.0, 'tag': {MATH!r}}}, {{'ns': 2000.0, 'tag': 'b'}}]\n"
        "space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = run_nsprof(
        "tune", f"{target}:space", "--backend", "ncu", "--mode", "direct", "--reps", "2", "--no-store",
        "--no-feed-back", "--no-tuner-pick", "--plot", tmp_path / "t.png", "--html", tmp_path / "t.html",
        "--work-dir", tmp_path / "w", standins=True, in_process=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t.png").stat().st_size > 0 and "winner" in done.stdout
    report = tmp_path / "r.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", report)
    with sqlite3.connect(report) as con:
        con.execute("UPDATE StringIds SET value = ? WHERE value = 'torch_push'", (MATH,))
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'torch_push'", (MATH,))
    con.close()
    done = run_nsprof("analyze", report, "--plot", tmp_path / "a.png", in_process=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.png").stat().st_size > 0 and MATH in done.stdout
