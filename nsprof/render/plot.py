"""The agreement plot of `nsprof validate --plot`: timer against truth per config, and τ per timer;
and the helpers every plot uses (file suffix check, saving, PNG bytes for the report page).

matplotlib is optional (`nsprof[plot]`): `require_matplotlib` is the one check for it, with its
one-line error, for callers that want to fail before any work starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nsprof.analysis.agreement import floor_map, wide
from nsprof.errors import NsprofError

if TYPE_CHECKING:
    import pandas as pd

PLOT_SUFFIXES = (".png", ".svg", ".pdf")

# Series styles: 13 colours (matplotlib's 10, then black, gold, indigo) and 12 filled markers.
# 13 and 12 share no factor, so series i's (colour, marker) pair repeats only after 156 series;
# past that, hollow markers give 156 more. Up to 12 series neither a colour nor a marker repeats.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#000000",
    "#e7ba52",
    "#393b79",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")


def series_styles(n: int) -> list[tuple[str, str]]:
    """(colour, marker) for each of `n` series, no pair twice: colour i mod 13, marker i mod 12,
    and from 156 on the same pairs again with a hollow marker ("colour:hollow"); callers with an
    unbounded number of series (kernels) fold the rest into one "other" series first."""
    out = []
    for i in range(n):
        cycle, j = divmod(i, len(PALETTE) * len(MARKERS))
        colour = PALETTE[j % len(PALETTE)]
        out.append((colour if cycle == 0 else f"{colour}:hollow{cycle}", MARKERS[j % len(MARKERS)]))
    return out


def scatter_style(style: tuple[str, str]) -> dict:
    """matplotlib scatter keywords for a series_styles entry."""
    colour, marker = style
    if ":hollow" in colour:
        return {"facecolors": "none", "edgecolors": colour.split(":")[0], "marker": marker}
    return {"color": colour, "marker": marker}


def legend_outside(fig, loc: str = "outside right upper", **kwargs):
    """A figure legend outside every axes (right of them unless `loc` says otherwise; constrained
    layout makes room for it), so it never covers a point; one entry per label of the axes."""
    handles, labels = [], []
    for ax in fig.axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if not handles:
        return None
    return fig.legend(handles, labels, loc=loc, fontsize="small", **kwargs)


def wrapped(text: str, width: int) -> str:
    """`text` broken into lines of at most `width` characters at spaces (a title that fits)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def log_axis(ax, which: str) -> None:
    """`ax`'s x or y axis (`which`) on a log scale labelled 1-2-5 in plain numbers: µs ranges of a
    tuning space often span less than a decade, where default log axes label one tick or collide
    in 3×10^0 form."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log") if which == "x" else ax.set_yscale("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def plain_text(draw):
    """`draw` with matplotlib's mathtext off: text from outside nsprof (a config's values, a range's name)
    is drawn as it is written; a `$` in it would be parsed, and one that does not parse ends the run."""
    import functools

    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        require_matplotlib()
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return drawn


def require_matplotlib() -> None:
    """Raise NsprofError (one line, how to install it) when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NsprofError("--plot needs matplotlib: pip install 'nsprof[plot]'") from None


def plot_path(path: str):
    """`path` as a Path, after checking its suffix names a format savefig writes ("-" stays "-":
    PNG on standard output)."""
    from pathlib import Path

    if path == "-":
        return "-"
    out = Path(path)
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise NsprofError(
            f"--plot: {path}: use a .png, .svg or .pdf file name, or - for PNG on standard output"
        )
    return out


def _shown(fig) -> None:
    """Every text of `fig` with its control characters shown escaped, as on a terminal (a newline stays one):
    a name from a report may hold an ESC, which matplotlib would name raw in a missing glyph's warning."""
    from matplotlib.text import Text

    from nsprof.errors import CONTROL_ESCAPES

    escapes = {c: e for c, e in CONTROL_ESCAPES.items() if c != ord("\n")}
    for text in fig.findobj(Text):
        text.set_text(text.get_text().translate(escapes))


@plain_text
def save_figure(fig, path: str) -> None:
    """Write `fig` to `path` (format from the suffix; "-": PNG on standard output), making its folder."""
    import sys

    _shown(fig)
    out = plot_path(path)
    if out == "-":
        fig.savefig(sys.stdout.buffer, format="png", dpi=120)
        sys.stdout.buffer.flush()
        return
    from nsprof.host.owned import written_over

    with written_over(out) as file:
        fig.savefig(file, format=out.suffix.lower()[1:], dpi=120)


@plain_text
def png_bytes(fig) -> bytes:
    """`fig` as PNG bytes (for pages that embed it)."""
    import io

    _shown(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def plot(
    per_config: pd.DataFrame,
    agreement_df: pd.DataFrame,
    timers: Sequence[str],
    truths: Sequence[str],
    path: str,
    floors: pd.DataFrame | Mapping[str, float] | None = None,
) -> None:
    """Write agreement_figure to `path`; the format from its suffix (png, svg, pdf)."""
    plot_path(path)
    save_figure(agreement_figure(per_config, agreement_df, timers, truths, floors), path)


@plain_text
def agreement_figure(
    per_config: pd.DataFrame,
    agreement_df: pd.DataFrame,
    timers: Sequence[str],
    truths: Sequence[str],
    floors: pd.DataFrame | Mapping[str, float] | None = None,
):
    """One log–log scatter per truth (timer µs against truth µs, y = x drawn) and a panel of τ per
    timer × truth with each truth's noise floor as a horizontal tick (a matplotlib Figure). Each
    timer has its own colour and marker (series_styles) in every panel, named once in a legend
    right of the panels."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    timers, truths = list(timers), list(truths)
    table = wide(per_config, list(dict.fromkeys([*timers, *truths])))
    fmap = floor_map(floors)
    styles = dict(zip(timers, series_styles(len(timers))))

    panels = len(truths) + 1
    # Figure + FigureCanvasAgg rather than pyplot: no global backend switch, nothing left open in
    # a caller's interactive session; savefig still picks the svg/pdf canvas by suffix.
    fig = Figure(figsize=(3.6 * panels + 1.8, 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]

    for ax, truth in zip(axes, truths):
        _scatter_panel(ax, table, timers, truth, styles)
    _tau_panel(axes[-1], agreement_df, timers, truths, styles, fmap)
    legend_outside(fig)
    return fig


def _scatter_panel(ax, table, timers: list[str], truth: str, styles: dict) -> None:
    """One truth's panel: each timer's µs against the truth's, log-log, with y = x drawn."""
    import numpy as np

    g = table[truth].to_numpy(float) / 1e3
    lo, hi = np.inf, -np.inf
    for timer in timers:
        t = table[timer].to_numpy(float) / 1e3
        ok = np.isfinite(t) & np.isfinite(g) & (t > 0) & (g > 0)  # log axes need positives
        if not ok.any():
            continue
        ax.scatter(g[ok], t[ok], s=20, label=timer, alpha=0.8, **scatter_style(styles[timer]))
        lo = min(lo, g[ok].min(), t[ok].min())
        hi = max(hi, g[ok].max(), t[ok].max())
    if np.isfinite(lo):
        span = np.array([lo / 1.1, hi * 1.1])
        ax.plot(span, span, color="0.5", linestyle="--", linewidth=1, label="y = x")
        log_axis(ax, "x")
        log_axis(ax, "y")
    else:
        ax.text(0.5, 0.5, "nothing measured by both", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(f"{truth} µs")
    ax.set_ylabel("timer µs")
    ax.set_title(f"timers vs {truth}", fontsize="medium")


def _tau_panel(ax, agreement_df, timers: list[str], truths: list[str], styles: dict, fmap: dict) -> None:
    """The τ panel: a dot per timer and truth in the timer's style, each truth's noise floor a tick."""
    import numpy as np

    step = 0.8 / max(len(timers), 1)
    x = np.arange(len(truths))
    for i, timer in enumerate(timers):
        taus = []
        for truth in truths:
            sel = agreement_df[(agreement_df["timer"] == timer) & (agreement_df["truth"] == truth)]
            taus.append(float(sel["kendall_tau"].iloc[0]) if len(sel) else float("nan"))
        taus = np.array(taus)
        ok = np.isfinite(taus)
        # a dot per timer and truth, in the timer's style: bars would need a colour per timer alone
        ax.scatter(
            (x - 0.4 + step * (i + 0.5))[ok], taus[ok], s=22, label=timer, **scatter_style(styles[timer])
        )
    floors = [j for j, truth in enumerate(truths) if truth in fmap]
    for n, j in enumerate(floors):
        label = "truth's noise floor" if n == 0 else None
        ax.hlines(fmap[truths[j]], j - 0.45, j + 0.45, color="black", linewidth=2, label=label)
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_xticks(x, truths, rotation=20, ha="right")
    ax.set_xlim(-0.5, len(truths) - 0.5)
    taus = agreement_df["kendall_tau"]
    lowest = np.nanmin(taus.to_numpy(float)) if taus.notna().any() else 0
    ax.set_ylim(min(0.0, float(lowest)) - 0.05, 1.05)
    ax.set_ylabel("Kendall τ")
    ax.set_title("ranking agreement", fontsize="medium")
    ax.grid(axis="y", color="0.92")
    ax.set_axisbelow(True)
