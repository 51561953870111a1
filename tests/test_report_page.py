"""`tune --plot`, and the report page of `validate --html` / `tune --html`.

The plot's content is read back from the matplotlib Figure (points, intervals, labels); the page
is parsed with html.parser, and its numbers are checked against the recorded H200 validate run
(benchmarks/results/validate_seed_gemm.json) read here independently. The last test opens the
page in a real headless browser (Debian's chromium), when one is installed.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_nsprof

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "validate_seed_gemm.json"
TRUTHS = ["ncu:direct", "ncu:graph", "nsys:direct", "nsys:graph"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

matplotlib = pytest.importorskip("matplotlib")
pytest.importorskip("matplotlib.image")


# --------------------------------------------------------------------------- helpers


class Page(HTMLParser):
    """Tables (by id: rows of cell texts, the header row first) and images of an HTML page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[dict] = []
        self.tags: list[str] = []
        self._table = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id", f"table{len(self.tables)}"), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(attrs)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def decode_png(src: str):
    """The pixels of a data:image/png;base64 URI (fails unless it is a PNG that decodes)."""
    head, _, data = src.partition(",")
    assert head == "data:image/png;base64"
    raw = base64.b64decode(data, validate=True)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(io.BytesIO(raw), format="png")


def points(ax) -> list[tuple[float, float]]:
    from matplotlib.collections import PathCollection

    return [tuple(p) for c in ax.collections if isinstance(c, PathCollection) for p in c.get_offsets()]


def ranked_table(with_ci=True, with_ties=True):
    """A ranked table as nsprof.analysis.ranking.rank makes it (config 4 failed), by hand."""
    from nsprof.analysis.ranking import rank

    summary = pd.DataFrame(
        {
            "config_id": [0, 1, 2, 3, 4],
            "median_ns": [3000.0, 1000.0, 2000.0, 1040.0, float("nan")],
            "min_ns": [2900.0, 990.0, 1950.0, 1000.0, float("nan")],
            "spread": [0.02, 0.01, 0.03, 0.05, float("nan")],
            "error": [None, None, None, None, "timeout: still running after 120 s"],
        }
    )
    table = rank(summary)
    table.insert(2, "config", [f"block_N={16 * (c + 1)},stages={c % 3 + 2}" for c in table["config_id"]])
    if with_ci:
        table["ci_low_ns"] = table["value_ns"] * 0.97
        table["ci_high_ns"] = table["value_ns"] * 1.05
    if with_ties:
        table["tied_with_best"] = [True, True, False, False, False]  # ranks 1, 2: configs 1 and 3
    return table


def tune_result(table):
    from nsprof.tune import Ranking, ShapeReport, TuneReport

    configs = [{"block_N": 16 * (c + 1), "stages": c % 3 + 2} for c in range(5)]
    ranking = Ranking(table, "ncu", "ncu", "ncu, mode graph, median of 5 reps", notes=["a note"])
    errors = ["feeding the ranking back to x failed: y"]
    return TuneReport("t.py:space", configs, [ShapeReport({"ncu": ranking}, "ncu")], errors=errors)


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def validate_result(record):
    """The recorded H200 run as a ValidateResult, configs from examples/gemm_tilelang.py."""
    from nsprof.validate import ValidateResult

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from gemm_tilelang import CONFIGS
    finally:
        sys.path.remove(str(ROOT / "examples"))
    per_config = pd.DataFrame(record["per_config"])
    timers = sorted({r["timer"] for r in record["agreement"]})
    return ValidateResult(
        per_config=per_config,
        agreement=pd.DataFrame(record["agreement"]),
        floors=pd.DataFrame(record["noise_floor"]),
        verdict=record["verdict"],
        timers=timers,
        truths=TRUTHS,
        configs=CONFIGS,
        failures={("cupti", 4): "a made-up failure"},
    )


@pytest.fixture(scope="module")
def validate_html(validate_result, tmp_path_factory):
    from nsprof.render.html import validate_page, write_page

    path = tmp_path_factory.mktemp("page") / "validate.html"
    write_page(validate_page(validate_result, title="nsprof validate examples/seed_gemm.py:space"), path)
    return path


# --------------------------------------------------------------------------- tune --plot


def test_tune_plot_draws_each_measured_config_with_its_interval_and_the_tie_set():
    from matplotlib.collections import LineCollection

    from nsprof.render.tune_plot import tune_figure

    table = ranked_table()
    fig = tune_figure(table)
    ax = fig.axes[0]
    # measured configs in rank order: 1 (1000), 3 (1040), 2 (2000), 0 (3000); 4 failed
    assert sorted(points(ax), key=lambda p: p[1]) == [(1.0, 0), (1.04, 1), (2.0, 2), (3.0, 3)]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [
        "1: block_N=32,stages=3",
        "3: block_N=64,stages=2",
        "2: block_N=48,stages=4",
        "0: block_N=16,stages=2",
    ]
    tied = [c for c in ax.collections if c.get_gid() == "tied"]
    assert len(tied) == 1 and [tuple(p) for p in tied[0].get_offsets()] == [(1.0, 0), (1.04, 1)]
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 1
    segments = sorted(bars[0].get_segments(), key=lambda s: s[0][1])
    assert len(segments) == 4
    for (x0, y0), (x1, y1) in segments:  # each interval: [0.97, 1.05] × the value, at its config's row
        value = {0: 1.0, 1: 1.04, 2: 2.0, 3: 3.0}[int(y0)]
        assert y0 == y1 and x0 == pytest.approx(0.97 * value) and x1 == pytest.approx(1.05 * value)
    failed = [t.get_text() for t in fig.texts if t.get_gid() == "failed"]
    assert failed == ["not measured (failed): config 4"]
    assert ax.get_ylim() == (3.5, -0.5)  # rank 1 at the top


def test_tune_plot_without_intervals_or_ties():
    """No intervals (a fast timer's table): no error bars, and the best alone is no tie to mark."""
    from matplotlib.collections import LineCollection

    from nsprof.render.tune_plot import tune_figure

    ax = tune_figure(ranked_table(with_ci=False, with_ties=False)).axes[0]
    assert len(points(ax)) == 4
    assert not [c for c in ax.collections if isinstance(c, LineCollection)]
    assert not [c for c in ax.collections if c.get_gid() == "tied"]
    assert ax.get_legend() is None and not ax.figure.legends


def test_tune_plot_when_every_config_failed():
    import warnings

    from nsprof.render.tune_plot import tune_figure

    table = ranked_table()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = tune_figure(table[table["error"].notna()])
    assert points(fig.axes[0]) == []
    assert [t.get_text() for t in fig.texts if t.get_gid() == "failed"] == ["not measured (failed): config 4"]
    assert fig._suptitle.get_text() == "0 configs ranked"
    assert "no config measured" in [t.get_text() for t in fig.axes[0].texts]


def test_tune_plot_file_and_its_suffix(tmp_path):
    from nsprof.errors import NsprofError
    from nsprof.render.tune_plot import plot_tune

    plot_tune(ranked_table(), tmp_path / "sub" / "r.png")
    assert matplotlib.image.imread(tmp_path / "sub" / "r.png").shape[0] > 100
    plot_tune(ranked_table(), tmp_path / "r.svg")
    assert (tmp_path / "r.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(NsprofError, match=r"--plot: \S*/r\.txt: use a \.png, \.svg or \.pdf"):
        plot_tune(ranked_table(), tmp_path / "r.txt")


def test_missing_matplotlib_is_one_line(monkeypatch):
    from nsprof.errors import NsprofError
    from nsprof.render.plot import require_matplotlib
    from nsprof.render.tune_plot import tune_figure

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(NsprofError, match=r"^--plot needs matplotlib: pip install 'nsprof\[plot\]'$"):
        require_matplotlib()
    with pytest.raises(NsprofError, match="needs matplotlib"):
        tune_figure(ranked_table())


# --------------------------------------------------------------------------- the page


def assert_self_contained(text: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text, re.I)
    assert "<script" not in text.lower() and "<link" not in text.lower() and "@import" not in text
    assert "url(" not in text


def test_validate_page_holds_every_config_and_the_recorded_numbers(validate_html, record, validate_result):
    text = validate_html.read_text(encoding="utf-8")
    assert_self_contained(text)
    page = Page(text)
    assert {"per-config", "agreement", "noise-floor"} <= set(page.tables)

    # per config: one row per config id, each method's µs from the record itself
    values: dict[int, dict[str, float]] = {}
    for row in record["per_config"]:
        values.setdefault(row["config_id"], {})[row["method"]] = row["value_ns"]
    header, *rows = page.tables["per-config"]
    assert header[:2] == ["id", "config"]
    methods = [h.removesuffix(" µs") for h in header[2:]]
    assert set(methods) == {r["method"] for r in record["per_config"]}
    assert sorted(int(r[0]) for r in rows) == sorted(values)
    configs = validate_result.configs
    for row in rows:
        cid = int(row[0])
        assert row[1] == ",".join(f"{k}={v}" for k, v in configs[cid].items())
        for method, cell in zip(methods, row[2:]):
            value = values[cid].get(method)
            assert cell == ("-" if value is None else f"{value / 1e3:,.3f}"), (cid, method)

    # agreement: every timer × truth with its n, τ, ρ and regret
    header, *rows = page.tables["agreement"]
    assert len(rows) == len(record["agreement"]) == 44
    by_pair = {(r[0], r[1]): dict(zip(header, r)) for r in rows}
    for rec in record["agreement"]:
        cells = by_pair[(rec["timer"], rec["truth"])]
        assert cells["n"] == str(rec["n"]) == "23"
        assert cells["τ"] == f"{rec['kendall_tau']:.3f}" and cells["ρ"] == f"{rec['spearman_rho']:.3f}"
        assert cells["regret %"] == f"{rec['regret'] * 100:.1f}"
        assert cells["same best"] == ("yes" if rec["same_best"] else "no")
        assert cells["timer's pick"] == str(rec["timer_pick"]) and cells["truth's best"] == str(
            rec["truth_best"]
        )

    header, *rows = page.tables["noise-floor"]
    assert [(r[0], r[3]) for r in rows] == [
        (f["truth"], f"{f['kendall_tau']:.3f}") for f in record["noise_floor"]
    ]
    for line in record["verdict"].splitlines():
        assert line in text
    assert "cupti failed on config 4: a made-up failure" in text

    (image,) = page.images
    assert image["id"] == "agreement-plot"
    pixels = decode_png(image["src"])
    assert pixels.shape[0] > 200 and pixels.shape[1] > 800  # 4 truths + the τ panel, side by side
    assert (pixels[..., :3] < 0.9).any()


def test_tune_page_holds_every_config_its_interval_and_the_plot():
    from nsprof.render.html import tune_page

    table = ranked_table()
    text = tune_page(tune_result(table), title="nsprof tune t.py:space")
    assert_self_contained(text)
    page = Page(text)
    header, *rows = page.tables["ranked"]
    assert header[:6] == ["rank", "id", "config", "µs", "interval µs", "tie"]
    assert [r[1] for r in rows] == ["1", "3", "2", "0", "4"]  # rank order, the failure last
    for row, rec in zip(rows, table.to_dict("records")):
        assert row[2] == rec["config"]
        if pd.isna(rec["error"]):
            assert row[0] == str(rec["rank"]) and row[3] == f"{rec['value_ns'] / 1e3:,.3f}"
            assert row[4] == f"{rec['ci_low_ns'] / 1e3:,.3f} – {rec['ci_high_ns'] / 1e3:,.3f}"
        else:
            assert row[0] == "-" and row[3] == "-" and row[-1] == rec["error"]
    assert [r[5] for r in rows] == ["tie", "tie", "", "", ""]  # configs 1 and 3 are tied
    assert text.count('<tr class="tied">') == 2
    assert "best: config 1 (block_N=32,stages=3)" in text and "a note" in text
    assert "feeding the ranking back to x failed: y" in text
    (image,) = page.images
    assert image["id"] == "ranking-plot" and decode_png(image["src"]).shape[0] > 100


def test_the_page_without_matplotlib_keeps_its_tables(monkeypatch, validate_result):
    from nsprof.render.html import NO_MATPLOTLIB, tune_page, validate_page

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for text in (validate_page(validate_result), tune_page(tune_result(ranked_table()))):
        page = Page(text)
        assert not page.images and NO_MATPLOTLIB in text and page.tables


def test_tune_plot_and_html_through_the_cli(tmp_path):
    """`nsprof tune --plot --html` end to end on a CPU target, through the stand-in profiler."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{'ns': 3000.0}, {'ns': 1000.0}, {'ns': 2000.0}],\n"
        "                           build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = run_nsprof(
        "tune",
        "t.py:space",
        "--backend",
        "ncu",
        "--mode",
        "direct",
        "--reps",
        "2",
        "--no-store",
        "--no-feed-back",
        "--no-tuner-pick",
        "--plot",
        "out/r.png",
        "--html",
        "out/r.html",
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote out/r.png" in done.stderr and "wrote out/r.html" in done.stderr
    assert matplotlib.image.imread(tmp_path / "out" / "r.png").shape[0] > 100
    page = Page((tmp_path / "out" / "r.html").read_text())
    header, *rows = page.tables["ranked"]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("1", "ns=1000.0", "1.000"),
        ("2", "ns=2000.0", "2.000"),
        ("0", "ns=3000.0", "3.000"),
    ]
    assert len(page.images) == 1


def test_validate_html_through_the_cli(tmp_path):
    """`nsprof validate --html` end to end on a CPU target: the stand-in profiler is both ground
    truths; the fast timers fail without a GPU, and the page says so: written, then exit status 2, since no
    timer could be compared."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{'ns': 3000.0}, {'ns': 1000.0}, {'ns': 2000.0}],\n"
        "                           build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = run_nsprof(
        "validate",
        "t.py:space",
        "--timers",
        "event",
        "--no-external",
        "--truth",
        "ncu,nsys",
        "--mode",
        "direct",
        "--reps",
        "2",
        "--timer-reps",
        "3",
        "--timeout",
        "30",
        "--html",
        "v.html",
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    assert done.returncode == 2 and "nothing compared: no fast timer measured 2" in done.stderr, done.stderr
    assert "wrote v.html" in done.stderr
    page = Page((tmp_path / "v.html").read_text())
    header, *rows = page.tables["per-config"]
    cells = [dict(zip(header, r)) for r in rows]
    assert [(c["id"], c["config"], c["ncu:direct µs"], c["nsys:direct µs"]) for c in cells] == [
        ("0", "ns=3000.0", "3.000", "3.000"),
        ("1", "ns=1000.0", "1.000", "1.000"),
        ("2", "ns=2000.0", "2.000", "2.000"),
    ]
    assert {(r[0], r[1]) for r in page.tables["agreement"][1:]} == {
        (t, g) for t in ("event", "event_cold") for g in ("ncu:direct", "nsys:direct")
    }
    assert len(page.images) == 1 and decode_png(page.images[0]["src"]).shape[0] > 100


def test_a_bad_plot_name_fails_before_any_work(tmp_path):
    done = run_nsprof(
        "tune", "nowhere.py:space", "--backend", "graph", "--plot", "r.txt", cwd=tmp_path, in_process=True
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "nsprof: error: --plot: r.txt: use a .png, .svg or .pdf file name, or - for PNG on standard output"
    )


# --------------------------------------------------------------------------- a real browser

LOADED = """<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  document.body.dataset.images = images.length;
  document.body.dataset.decoded = images.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.tables = document.querySelectorAll("table").length;
  document.body.dataset.rows = document.querySelectorAll("table#per-config tbody tr").length;
});
</script>"""


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--hide-scrollbars",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH (apt-get install chromium): the page is "
    "checked by html.parser above, not in a browser",
)
def test_the_page_renders_in_headless_chromium(validate_html, record, tmp_path):
    # The DOM as the browser built it: the tables, and images that loaded and decoded. The check
    # runs in a copy with a script added (the page itself has none).
    probe = tmp_path / "probe.html"
    probe.write_text(
        validate_html.read_text(encoding="utf-8").replace("</body>", LOADED + "</body>"), encoding="utf-8"
    )
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri()).stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    found = dict(re.findall(r'data-(\w+)="(\d+)"', body.group(1)))
    n_configs = len({r["config_id"] for r in record["per_config"]})
    assert found == {"images": "1", "decoded": "1", "tables": "3", "rows": str(n_configs)}
    assert '<table id="agreement">' in dom and "nsys:graph" in dom

    # A screenshot of the page itself: not blank, and the plot's colours are in it.
    shot = tmp_path / "shot.png"
    done = chromium("--window-size=1280,2400", f"--screenshot={shot}", validate_html.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1280)
    dark = (pixels.max(axis=2) < 0.5).mean()  # text, table rules, axes
    assert 0.002 < dark < 0.5
    blue = ((pixels[..., 2] > 0.55) & (pixels[..., 0] < 0.35)).sum()  # matplotlib's C0 points
    assert blue > 50


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
def test_the_tune_page_renders_in_headless_chromium(tmp_path):
    from nsprof.render.html import tune_page, write_page

    page = tmp_path / "tune.html"
    write_page(tune_page(tune_result(ranked_table())), page)
    probe = tmp_path / "probe.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", LOADED + "</body>"), encoding="utf-8"
    )
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri()).stdout
    found = dict(re.findall(r'data-(\w+)="(\d+)"', re.search(r"<body([^>]*)>", dom).group(1)))
    assert found["images"] == found["decoded"] == "1" and found["tables"] == "1"
    assert "best: config 1" in dom and "feeding the ranking back to x failed: y" in dom
    # A screenshot: not blank, the tie set's red rows and points in it.
    shot = tmp_path / "shot.png"
    done = chromium("--window-size=1400,1600", f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (1600, 1400)
    assert 0.002 < (pixels.max(axis=2) < 0.5).mean() < 0.5
    red = ((pixels[..., 0] > 0.7) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)).sum()  # tied points
    assert red > 20


def test_dash_is_standard_output_for_tune_validate_and_results(tmp_path):
    """`-` means standard output wherever a path is taken: tune --html - and --plot -, validate
    --save - and --html -, results --export -; the tables then go to stderr, and no file "-"."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{'ns': 3000.0}, {'ns': 1000.0}],\n"
        "                           build=lambda c: (lambda: None), device='cpu')\n"
    )

    tune = [
        "tune",
        "t.py:space",
        "--backend",
        "ncu",
        "--mode",
        "direct",
        "--reps",
        "2",
        "--no-feed-back",
        "--no-tuner-pick",
        "--store",
        "r.sqlite",
    ]
    # fd 1 itself is what is tested: nsprof in a child process, so that anything else written there shows
    page = run_nsprof(*tune, "--html", "-", cwd=tmp_path, standins=True)
    assert page.returncode == 0, page.stderr
    header, *rows = Page(page.stdout).tables["ranked"]
    assert [r[1] for r in rows] == ["1", "0"]
    assert "rank" in page.stderr and "ns=1000.0" in page.stderr  # the ranked table, on stderr
    png = run_nsprof(*tune, "--plot", "-", cwd=tmp_path, standins=True, text=False)
    assert png.returncode == 0, png.stderr
    assert png.stdout.startswith(b"\x89PNG\r\n\x1a\n")
    both = run_nsprof(*tune, "--plot", "-", "--json", cwd=tmp_path, in_process=True)  # refused before any run
    assert both.returncode == 2 and "would both write to standard output" in both.stderr
    exported = run_nsprof("results", "--store", "r.sqlite", "--export", "-", cwd=tmp_path, standins=True)
    assert exported.returncode == 0, exported.stderr
    stored = list(csv.DictReader(exported.stdout.splitlines()))
    assert {r["config_id"] for r in stored} == {"0", "1"} and len(
        stored
    ) == 2 * 2 * 2  # 2 tunes x 2 configs x 2 reps
    validate = [
        "validate",
        "t.py:space",
        "--timers",
        "event",
        "--no-external",
        "--truth",
        "ncu",
        "--mode",
        "direct",
        "--reps",
        "2",
        "--timer-reps",
        "3",
        "--timeout",
        "30",
    ]
    saved = run_nsprof(*validate, "--save", "-", cwd=tmp_path, standins=True)
    assert saved.returncode == 2, saved.stderr  # no timer compared here (no GPU): the JSON written first
    assert set(json.loads(saved.stdout)) >= {"agreement", "per_config"}
    assert "ncu" in saved.stderr  # the tables went to stderr
    assert not (tmp_path / "-").exists()


# --------------------------------------------------------------------------- complete pages


def page_text(text: str) -> str:
    """The page's visible text, runs of white space as one space."""

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts: list[str] = []
            self._skip = 0

        def handle_starttag(self, tag, attrs):
            self._skip += tag in ("style", "title")

        def handle_endtag(self, tag):
            self._skip -= tag in ("style", "title")

        def handle_data(self, data):
            if not self._skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(text)
    return " ".join(" ".join(parser.parts).split())


def decided_result(tie: bool):
    """A tune result with intervals at 93.8% coverage: config 1 the winner, or tied with 3."""
    table = ranked_table()
    table["ci_low_ns"] = table["value_ns"] * 0.995
    table["ci_high_ns"] = table["value_ns"] * 1.005
    table["ci_coverage"] = [0.938] * 4 + [float("nan")]
    table["tied_with_best"] = [True, tie, False, False, False]
    return tune_result(table)


def terminal_cells(printed: str, column: str) -> dict[int, str]:
    """{config id: cell} of one column of tune's printed table, cut by its rule line's spans."""
    lines = printed.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("----"))
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rule])]
    names = [lines[rule - 1][a:b].strip() for a, b in spans]
    out = {}
    for line in lines[rule + 1 :]:
        if not re.match(r"\s*(\d+|-)\s", line):  # past the table: "best: ...", the notes
            break
        cells = [line[a:b].strip() for a, b in spans]
        out[int(cells[names.index("id")])] = cells[names.index(column)]
    return out


@pytest.mark.parametrize("tie", [False, True])
def test_tune_page_says_every_decision_line_the_terminal_prints(tie):
    from nsprof.render.html import tune_page
    from nsprof.render.tune_tables import format_tune

    result = decided_result(tie)
    printed = format_tune(result)
    decisions = [
        line for line in printed.splitlines() if line.startswith(("ranked by", "best:", "note:", "verdict:"))
    ]
    # the winner (or tie) and the coverage caveat are among them
    words = "these 2 configs are indistinguishable" if tie else "config 1 is the winner: its interval"
    assert any(words in line for line in decisions)
    assert any("95% asked, 93.8% achieved" in line for line in decisions)
    text = page_text(tune_page(result))
    for line in decisions:
        assert " ".join(line.split()) in text, line


@pytest.mark.parametrize("tie", [False, True])
def test_tune_page_tie_column_reads_as_the_terminal_does(tie):
    from nsprof.render.html import tune_page
    from nsprof.render.tune_tables import format_tune

    result = decided_result(tie)
    printed = terminal_cells(format_tune(result), "tie")
    assert printed[1] == ("tie" if tie else "")  # the best alone is no tie
    rows = Page(tune_page(result)).tables["ranked"]
    head = rows[0]
    on_page = {int(r[head.index("id")]): r[head.index("tie")] for r in rows[1:]}
    assert head[head.index("tie")] == "tie"  # headed as the terminal heads it
    assert on_page == printed


def test_every_table_scrolls_inside_its_own_box(validate_result):
    from nsprof.render.html import STYLE, tune_page, validate_page

    # .scroll's rule: as wide as the page at most, scrolling sideways within itself
    rule = re.search(r"\.scroll\s*\{([^}]*)\}", STYLE)
    assert rule and "overflow-x: auto" in rule.group(1) and "max-width: 100%" in rule.group(1)
    for text in (validate_page(validate_result), tune_page(decided_result(False))):
        tables = re.findall(r"(.{0,40})<table", text)
        assert tables and all(before.endswith('<div class="scroll">') for before in tables), tables
        assert text.count('<div class="scroll">') == text.count("<table")
