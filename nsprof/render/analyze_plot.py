"""analyze's plots: `analyze --plot` (each range's kernel durations as a strip plot, one panel per
report) and `analyze --compare --plot` (the per-range B/A ratios).

matplotlib is optional (`nsprof[plot]`); nsprof.render.plot.require_matplotlib gives the one-line
error. Each function returns the matplotlib Figure it wrote, so that callers (and tests) can read
what is drawn.
"""

from __future__ import annotations

from nsprof.analysis.summary import NO_RANGE, range_key
from nsprof.render.plot import require_matplotlib, save_figure
from nsprof.render.text import UNIT_LABELS

LOG_SPREAD = 10.0  # a log axis once the largest value is this many times the smallest


def _figure(panels: int, width: float = 6.0):
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 3.6 * panels), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(panels, 1, squeeze=False)[:, 0]


def _log_if_spread(ax, values) -> None:
    """A log y axis, labelled 1-2-5 in plain numbers, when the values spread more than LOG_SPREAD×."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    positive = [v for v in values if v == v and v > 0]
    if positive and max(positive) > LOG_SPREAD * min(positive):
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def durations_plot(panels, path: str | None, unit: str = "us"):
    """One strip plot per (title, samples) pair (`samples`: analysis.summary.samples' rows): a
    column of points per range, in natural order with "(no range)" last, one point per kernel
    execution, coloured by kernel; the median of each kernel of a range as a short line; a log axis
    when the durations spread more than 10×. Written to `path` unless it is None."""
    import numpy as np

    from nsprof.render.text import TIME_UNITS

    scale = TIME_UNITS[unit][0]
    fig, axes = _figure(
        len(panels), width=max(6.0, 1.0 + 0.9 * max((s["range"].nunique() for _, s in panels), default=1))
    )
    for ax, (title, samples) in zip(axes, panels):
        ranges = sorted(samples["range"].astype(str).unique(), key=range_key)
        kernels = list(dict.fromkeys(samples["kernel_full"].astype(str)))
        color = {k: f"C{i % 10}" for i, k in enumerate(kernels)}
        rng = np.random.default_rng(0)  # the same jitter every time
        for x, name in enumerate(ranges):
            rows = samples[samples["range"].astype(str) == name]
            y = rows["duration_ns"].to_numpy(float) / scale
            jitter = rng.uniform(-0.18, 0.18, len(y))
            ax.scatter(
                x + jitter,
                y,
                s=14,
                alpha=0.75,
                c=[color[k] for k in rows["kernel_full"].astype(str)],
                gid=name,
                label="_nolegend_",
            )
            for kernel, durations in rows.groupby(rows["kernel_full"].astype(str))["duration_ns"]:
                ax.hlines(
                    float(durations.median()) / scale, x - 0.3, x + 0.3, color=color[kernel], linewidth=1.2
                )
        _log_if_spread(ax, samples["duration_ns"].to_numpy(float) / scale)
        ax.set_xticks(
            range(len(ranges)),
            ranges,
            rotation=30 if len(ranges) > 4 else 0,
            ha="right" if len(ranges) > 4 else "center",
        )
        ax.set_xlim(-0.6, len(ranges) - 0.4)
        ax.set_ylabel(f"kernel duration, {UNIT_LABELS[unit]}")
        ax.set_title(title, fontsize="medium")
        if len(kernels) <= 8:
            names = dict(zip(samples["kernel_full"].astype(str), samples["kernel"].astype(str)))
            for k in kernels:
                label = names[k] if list(names.values()).count(names[k]) == 1 else f"{names[k]} ({k[:24]}…)"
                ax.scatter([], [], s=14, c=color[k], label=label[:48])
            ax.legend(fontsize="x-small", loc="best")
        if NO_RANGE in ranges:
            ax.axvline(len(ranges) - 1.5, color="0.7", linewidth=0.8, linestyle=":")
    if path is not None:
        save_figure(fig, path)
    return fig


def ratio_plot(ranges, name_a: str, name_b: str, path: str | None, geomean: float | None = None):
    """The B/A ratio of each shared range (`ranges`: analysis.summary.per_range's rows) as a point
    per range in natural order, a line at 1 (equal) and one at the geometric mean; a log axis when
    the ratios spread more than 10×. Written to `path` unless it is None."""
    fig, (ax,) = _figure(1, width=max(6.0, 1.0 + 0.7 * len(ranges)))
    names = [str(r) for r in ranges["range"]]
    ratio = ranges["ratio"].to_numpy(float)
    ax.plot(range(len(names)), ratio, marker="o", linestyle="none", color="C0", label="B/A per range")
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle="--", label="equal")
    if geomean is not None:
        ax.axhline(geomean, color="C1", linewidth=1, label=f"geometric mean {geomean:.3f}")
    _log_if_spread(ax, list(ratio) + [1.0])
    ax.set_xticks(
        range(len(names)),
        names,
        rotation=30 if len(names) > 4 else 0,
        ha="right" if len(names) > 4 else "center",
    )
    ax.set_ylabel("B/A")
    ax.set_title(
        f"per range, B/A of the kernels' median durations\nA {name_a}, B {name_b}", fontsize="medium"
    )
    ax.legend(fontsize="x-small", loc="best")
    if path is not None:
        save_figure(fig, path)
    return fig
