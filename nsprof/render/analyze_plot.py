"""analyze's plots: `analyze --plot` (each range's kernel durations as a strip plot, one panel per
report) and `analyze --compare --plot` (the per-range B/A ratios).

matplotlib is optional (`nsprof[plot]`); nsprof.render.plot.require_matplotlib gives the one-line
error. Each function returns the matplotlib Figure it wrote, so that callers (and tests) can read
what is drawn.
"""

from __future__ import annotations

from nsprof.analysis.groups import NO_RANGE, range_key
from nsprof.render.plot import (
    log_axis,
    plain_text,
    require_matplotlib,
    save_figure,
    scatter_style,
    series_styles,
)
from nsprof.render.text import UNIT_LABELS, middle, short

LOG_SPREAD = 10.0  # a log axis once the largest value is this many times the smallest
TOP_KERNELS = 8  # kernels named one by one in a panel's legend, by total time; the rest are "other"
OTHER_COLOUR = "#b0b0b0"
ROW_IN = 0.2  # inches per range row, until the figure reaches MAX_HEIGHT_IN
MAX_HEIGHT_IN = 14.0  # the tallest figure (at savefig's 120 dpi, 1680 px), however many ranges
LABEL_PITCH_IN = 0.17  # the least room per labelled range: past that, every k-th is labelled
WIDTH_IN = 10.0


def _figure(rows: list[int]):
    """A figure of one panel per entry of `rows` (its number of ranges), stacked, each as tall as
    its rows need and all together at most MAX_HEIGHT_IN; returns it, its axes and each panel's
    height in inches."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    wanted = [1.4 + ROW_IN * max(n, 1) for n in rows]
    scale = min(1.0, MAX_HEIGHT_IN / sum(wanted))
    heights = [h * scale for h in wanted]
    fig = Figure(figsize=(WIDTH_IN, sum(heights)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), 1, squeeze=False, height_ratios=heights)[:, 0]
    return fig, axes, heights


def _log_if_spread(ax, values) -> None:
    """A log axis (log_axis), when the values spread more than LOG_SPREAD×."""
    positive = [v for v in values if v == v and v > 0]
    if positive and max(positive) > LOG_SPREAD * min(positive):
        log_axis(ax, "x")


def _range_rows(ax, names: list[str], height_in: float) -> str:
    """Ranges as rows of `ax`, the first at the top, labelled on the y axis: every one when they
    fit, else every k-th; returns words for the title when some are unlabelled ("" otherwise)."""
    n = len(names)
    room = max(1, int((height_in - 1.2) / LABEL_PITCH_IN))
    every = max(1, -(-n // room))
    ticks = list(range(0, n, every))
    ax.set_yticks(ticks, [short(names[i], 40) for i in ticks], fontsize="small")
    ax.set_ylim(max(n, 1) - 0.5, -0.5)  # an empty panel keeps one row's room (no inverted limits)
    return "" if every == 1 else f"{n} ranges, every {every}th labelled"


def _kernel_groups(samples) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """The series of a panel: its TOP_KERNELS kernels by total time, then "other" for the rest;
    returns their labels in that order, each kernel's label, and each label's short name."""
    total = samples.groupby(samples["kernel_full"].astype(str))["duration_ns"].sum()
    order = sorted(total.index, key=lambda k: (-float(total[k]), k))
    top, rest = order[:TOP_KERNELS], order[TOP_KERNELS:]
    names = dict(zip(samples["kernel_full"].astype(str), samples["kernel"].astype(str)))
    shown = [names[k] for k in top]
    label = {}
    for k in top:
        # the short name; where two shown kernels share it, the full one from there on (its
        # template arguments tell them apart)
        at = k.find(names[k])
        if shown.count(names[k]) == 1:
            label[k] = short(names[k], 48)
        else:
            label[k] = short(k[at:], 60) if at >= 0 else middle(k, 60)
    other = f"other ({len(rest)} kernels)" if len(rest) != 1 else "other (1 kernel)"
    for k in rest:
        label[k] = other
    labels = [label[k] for k in top] + ([other] if rest else [])
    return labels, label, names


def _median_ticks(ax, samples, kernel, row, scale: float, colour) -> None:
    """The median of each kernel of each range in `samples`, as a short vertical tick on its row."""
    medians = samples.groupby([samples["range"].astype(str), kernel])["duration_ns"].median()
    if len(medians):
        ax.vlines(
            medians.to_numpy(float) / scale,
            [row[r] - 0.35 for r, _ in medians.index],
            [row[r] + 0.35 for r, _ in medians.index],
            color=colour,
            linewidth=1.2,
            zorder=5,
        )


@plain_text
def durations_plot(panels, path: str | None, unit: str = "us"):
    """One strip plot per (title, samples) pair (`samples`: analysis.listing.samples' rows): a row
    of points per range, in natural order from the top with "(no range)" last, one point per kernel
    execution; the median of each kernel of a range as a short tick. A panel's TOP_KERNELS kernels
    by total time each have their own colour and marker, the rest are grey "other", all named in
    the legend right of the panel; a log axis when the durations spread more than 10×. The figure
    stays within WIDTH_IN × MAX_HEIGHT_IN however many ranges. Written to `path` unless it is None."""
    import numpy as np

    from nsprof.render.text import TIME_UNITS

    scale = TIME_UNITS[unit][0]
    fig, axes, heights = _figure([s["range"].nunique() for _, s in panels])
    for ax, height, (title, samples) in zip(axes, heights, panels):
        ranges = sorted(samples["range"].astype(str).unique(), key=range_key)
        row = {name: i for i, name in enumerate(ranges)}
        labels, label_of, _ = _kernel_groups(samples)
        styles = dict(zip(labels, series_styles(len(labels))))
        if labels and labels[-1].startswith("other ("):
            styles[labels[-1]] = (OTHER_COLOUR, "o")
        kernel = samples["kernel_full"].astype(str)
        group = kernel.map(label_of)
        y = samples["range"].astype(str).map(row).to_numpy(float)
        x = samples["duration_ns"].to_numpy(float) / scale
        jitter = np.random.default_rng(0).uniform(-0.22, 0.22, len(y))  # the same every time
        for label in labels:
            mine = (group == label).to_numpy()
            ax.scatter(
                x[mine],
                y[mine] + jitter[mine],
                s=12 if label.startswith("other (") else 16,
                alpha=0.75,
                label=label,
                zorder=3 if label.startswith("other (") else 4,
                **scatter_style(styles[label]),
            )
            _median_ticks(ax, samples[mine], kernel[mine], row, scale, styles[label][0].split(":")[0])
        _log_if_spread(ax, x)
        thinned = _range_rows(ax, ranges, height)
        ax.set_xlabel(f"kernel duration, {UNIT_LABELS[unit]}")
        ax.set_title(title + (f" ({thinned})" if thinned else ""), fontsize="medium")
        ax.grid(axis="x", color="0.92")
        ax.set_axisbelow(True)
        if labels:
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        if NO_RANGE in ranges and len(ranges) > 1:
            ax.axhline(len(ranges) - 1.5, color="0.7", linewidth=0.8, linestyle=":")
    if path is not None:
        save_figure(fig, path)
    return fig


@plain_text
def ratio_plot(ranges, name_a: str, name_b: str, path: str | None, geomean: float | None = None):
    """The B/A ratio of each shared range (`ranges`: analysis.summary.per_range's rows) as a point
    per range, a row per range in natural order from the top, a line at 1 (equal) and one at the
    geometric mean; a log axis when the ratios spread more than 10×; the figure within
    WIDTH_IN × MAX_HEIGHT_IN. Written to `path` unless it is None."""
    names = [str(r) for r in ranges["range"]]
    fig, (ax,), (height,) = _figure([len(names)])
    ratio = ranges["ratio"].to_numpy(float)
    ax.plot(ratio, range(len(names)), marker="o", linestyle="none", color="C0", label="B/A per range")
    ax.axvline(1.0, color="0.5", linewidth=0.8, linestyle="--", label="equal")
    if geomean is not None:
        ax.axvline(geomean, color="C1", linewidth=1, label=f"geometric mean {geomean:.3f}")
    _log_if_spread(ax, list(ratio) + [1.0])
    thinned = _range_rows(ax, names, height)
    ax.set_xlabel("B/A")
    ax.grid(axis="x", color="0.92")
    ax.set_axisbelow(True)
    ax.set_title(
        f"per range, B/A of the kernels' median durations{f' ({thinned})' if thinned else ''}\n"
        f"A {name_a}, B {name_b}",
        fontsize="medium",
    )
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if path is not None:
        save_figure(fig, path)
    return fig
