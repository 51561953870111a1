"""The ranking plot of `nsprof tune --plot`: one point per measured config, best at the top.

Each point is the config's ranked value (`value_ns`, in µs); its interval is drawn as an error
bar when the ranked table has `ci_low_ns` and `ci_high_ns`, and the configs of the tie set
(`tied_with_best`, where the table has it) are drawn in their own colour. Failed configs have no
value: they are left out of the axes and named under them. One panel (one per shape once tune
measures shapes).
"""

from __future__ import annotations

import re

from nsprof.analysis.stats import is_missing
from nsprof.render.plot import legend_outside, log_axis, plain_text, require_matplotlib, save_figure, wrapped

LABEL_WIDTH = 48  # characters of a config's label on the axis


def config_tick(config_id, config) -> str:
    """The axis label of a config: its id and its `k=v,...` label, whole: a long one is wrapped
    onto more lines between two `k=v` (cut, two configs could read alike)."""
    label = "" if is_missing(config) else str(config)
    if not label:
        return str(int(config_id))
    lines = [""]
    for item in re.split(r",(?=[A-Za-z_][\w.]*=)", label):  # at a comma that starts a key
        if lines[-1] and len(lines[-1]) + len(item) + 1 > LABEL_WIDTH:
            lines[-1] += ","
            lines.append("")
        lines[-1] = f"{lines[-1]},{item}" if lines[-1] else item
    return f"{int(config_id)}: " + "\n".join(lines)


def measured_rows(table):
    """The ranked table's measured configs (a value, no error), in rank order."""
    ok = table["error"].isna() & table["value_ns"].notna()
    return table[ok]


@plain_text
def tune_figure(table, title: str | None = None, configs=None):
    """A matplotlib Figure of the ranked table (`Ranking.table`, nsprof.analysis.ranking.rank's).
    `configs`: the space's configs, so that a config is labelled by the keys that vary across
    them, the keys all share said once under the title."""
    require_matplotlib()
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    measured = measured_rows(table)
    failed = table[~table.index.isin(measured.index)]
    n = len(measured)
    constant, labels = _labels(measured, configs)
    ticks = [config_tick(c, label) for c, label in zip(measured["config_id"], labels)]
    rows = max([t.count("\n") + 1 for t in ticks] + [1])  # a wrapped label's lines
    fig = Figure(figsize=(7.5, 1.2 + 0.32 * rows * max(n, 3)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    y = np.arange(n)
    values = measured["value_ns"].to_numpy(float) / 1e3
    if "ci_low_ns" in table and "ci_high_ns" in table and n:
        _intervals(ax, measured, values, y)
    _configs(ax, measured, values, y)
    ax.set_yticks(y, ticks, fontsize="small")
    ax.set_ylim(max(n, 1) - 0.5, -0.5)  # rank 1 at the top
    if n and np.nanmin(values) > 0 and np.nanmax(values) / np.nanmin(values) > 10:
        log_axis(ax, "x")
    ax.set_xlabel("µs (ranked value)")
    ax.set_ylabel("config (best first)")
    ax.grid(axis="x", color="0.9")
    ax.set_axisbelow(True)
    # over the whole figure, wrapped to its width: a tune label runs longer than the axes are wide
    fig.suptitle(
        wrapped(title or f"{n} configs ranked", 80) + "".join(f"\n{line}" for line in constant),
        fontsize="medium",
    )
    # right of the axes, at their foot, clear of the title: inside, it covers a point
    legend_outside(fig, loc="outside right lower")
    if len(failed):
        ids = ", ".join(str(int(c)) for c in failed["config_id"])
        fig.text(
            0.01,
            0.005,
            f"not measured (failed): config {ids}",
            fontsize="small",
            color="C3",
            va="bottom",
            gid="failed",
        )
    if not n:
        ax.text(0.5, 0.5, "no config measured", ha="center", va="center", transform=ax.transAxes)
    return fig


def _labels(measured, configs) -> tuple[list[str], list]:
    """(the line naming the keys all configs share, or none; each measured config's label)."""
    from nsprof.render.configs import config_cell, config_of, constant_line, split_configs

    given = measured["config"] if "config" in measured else [None] * len(measured)
    if configs is None:
        return [], list(given)
    constant, varying = split_configs(configs)
    cells = [
        config_cell(config_of(configs, c), label, varying) for c, label in zip(measured["config_id"], given)
    ]
    return constant_line(constant), cells


def _intervals(ax, measured, values, y) -> None:
    """Each measured config's interval, as error bars around its value."""
    import numpy as np

    low = measured["ci_low_ns"].to_numpy(float) / 1e3
    high = measured["ci_high_ns"].to_numpy(float) / 1e3
    ok = np.isfinite(low) & np.isfinite(high)
    if ok.any():
        xerr = np.vstack([np.clip(values - low, 0, None), np.clip(high - values, 0, None)])
        ax.errorbar(
            values[ok],
            y[ok],
            xerr=xerr[:, ok],
            fmt="none",
            ecolor="0.35",
            elinewidth=1.2,
            capsize=3,
            label="interval",
            gid="intervals",
        )


def _configs(ax, measured, values, y) -> None:
    """The measured configs' points, those tied with the best (a tie of two or more) marked apart."""
    import numpy as np

    n = len(measured)
    tied = np.array([not is_missing(v) and bool(v) for v in measured.get("tied_with_best", [None] * n)], bool)
    if tied.sum() < 2:
        tied[:] = False  # the best alone is tied only with itself: no tie to mark
    if (~tied).any() or not n:
        label = "measured" if tied.any() else None
        ax.scatter(values[~tied], y[~tied], s=30, color="C0", zorder=3, gid="configs", label=label)
    if tied.any():
        ax.scatter(
            values[tied],
            y[tied],
            s=42,
            color="C3",
            marker="D",
            zorder=3,
            gid="tied",
            label="tied with the best",
        )


def plot_tune(table, path: str, title: str | None = None, configs=None):
    """Write tune_figure to `path` (png, svg or pdf, from its suffix); returns the Figure."""
    from nsprof.render.plot import plot_path

    plot_path(path)
    fig = tune_figure(table, title, configs)
    save_figure(fig, path)
    return fig
