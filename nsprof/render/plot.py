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


def require_matplotlib() -> None:
    """Raise NsprofError (one line, how to install it) when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NsprofError("--plot needs matplotlib: pip install 'nsprof[plot]'") from None


def plot_path(path: str, option: str = "--plot"):
    """`path` as a Path, after checking its suffix names a format savefig writes ("-" stays "-":
    PNG on standard output)."""
    from pathlib import Path

    if path == "-":
        return "-"
    out = Path(path)
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise NsprofError(
            f"{option}: {out.name}: use a .png, .svg or .pdf file name, or - for PNG on standard output"
        )
    return out


def save_figure(fig, path: str, option: str = "--plot") -> None:
    """Write `fig` to `path` (format from the suffix; "-": PNG on standard output), making its folder."""
    import sys

    out = plot_path(path, option)
    if out == "-":
        fig.savefig(sys.stdout.buffer, format="png", dpi=120)
        sys.stdout.buffer.flush()
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def png_bytes(fig) -> bytes:
    """`fig` as PNG bytes (for pages that embed it)."""
    import io

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


def agreement_figure(
    per_config: pd.DataFrame,
    agreement_df: pd.DataFrame,
    timers: Sequence[str],
    truths: Sequence[str],
    floors: pd.DataFrame | Mapping[str, float] | None = None,
):
    """One log–log scatter per truth (timer µs against truth µs, y = x drawn) and a bar panel of τ
    per timer × truth with each truth's noise floor as a horizontal tick (a matplotlib Figure)."""
    require_matplotlib()
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    timers, truths = list(timers), list(truths)
    table = wide(per_config, list(dict.fromkeys([*timers, *truths])))
    fmap = floor_map(floors)
    colors = {t: f"C{i % 10}" for i, t in enumerate(timers)}

    panels = len(truths) + 1
    # Figure + FigureCanvasAgg rather than pyplot: no global backend switch, nothing left open in
    # a caller's interactive session; savefig still picks the svg/pdf canvas by suffix.
    fig = Figure(figsize=(4.2 * panels, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]

    for ax, truth in zip(axes, truths):
        g = table[truth].to_numpy(float) / 1e3
        lo, hi = np.inf, -np.inf
        for timer in timers:
            t = table[timer].to_numpy(float) / 1e3
            ok = np.isfinite(t) & np.isfinite(g) & (t > 0) & (g > 0)  # log axes need positives
            if not ok.any():
                continue
            ax.scatter(g[ok], t[ok], s=18, color=colors[timer], label=timer, alpha=0.8)
            lo = min(lo, g[ok].min(), t[ok].min())
            hi = max(hi, g[ok].max(), t[ok].max())
        if np.isfinite(lo):
            span = np.array([lo / 1.1, hi * 1.1])
            ax.plot(span, span, color="0.5", linestyle="--", linewidth=1, label="y = x")
            ax.set_xscale("log")
            ax.set_yscale("log")
            # µs ranges of a tuning space often span less than a decade, where default log axes
            # label one tick or collide in 3×10^0 form; plain 1-2-5 labels read better
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
                axis.set_minor_formatter(NullFormatter())
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "nothing measured by both", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(f"{truth} µs")
        ax.set_ylabel("timer µs")
        ax.set_title(f"timers vs {truth}")

    ax = axes[-1]
    width = 0.8 / max(len(timers), 1)
    x = np.arange(len(truths))
    for i, timer in enumerate(timers):
        taus = []
        for truth in truths:
            sel = agreement_df[(agreement_df["timer"] == timer) & (agreement_df["truth"] == truth)]
            taus.append(float(sel["kendall_tau"].iloc[0]) if len(sel) else float("nan"))
        ax.bar(
            x - 0.4 + width * (i + 0.5),
            np.nan_to_num(np.array(taus), nan=0.0),
            width,
            color=colors[timer],
            label=timer,
        )
    labelled = False
    for j, truth in enumerate(truths):
        if truth in fmap:
            ax.hlines(
                fmap[truth],
                j - 0.45,
                j + 0.45,
                color="black",
                linewidth=2,
                label=None if labelled else "truth's noise floor",
            )
            labelled = True
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_xticks(x, truths, rotation=20, ha="right")
    lowest = (
        np.nanmin(agreement_df["kendall_tau"].to_numpy(float))
        if agreement_df["kendall_tau"].notna().any()
        else 0
    )
    ax.set_ylim(min(0.0, float(lowest)) - 0.05, 1.05)
    ax.set_ylabel("Kendall τ")
    ax.set_title("ranking agreement")
    # below the axes: τ bars reach 1.0 and any spot inside would cover one
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=2, frameon=False)

    return fig
