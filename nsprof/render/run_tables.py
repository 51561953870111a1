"""The tables of what was measured and stored: `nsprof profile`'s per-config table with its best
(format_config_summary) and `nsprof results`' runs of the store (format_runs, run_deploy).

Each takes rows already made and returns text; nothing here measures or prints.
"""

from __future__ import annotations

from nsprof.analysis.stats import is_missing
from nsprof.render.text import (
    num,
    render_table,
    text,
    us,
)


def format_config_summary(summary) -> str:
    """The per-config table of `nsprof profile` (from nsprof.profile.config_summary), then the best."""
    shaped = "shape" in summary
    headers = [
        "id",
        "config",
        "mode",
        "median µs",
        "min µs",
        "spread %",
        "reps",
        "kernels",
        "cycles",
        "clock GHz",
        "error",
    ]
    rows = []
    for r in summary.itertuples():
        rows.append(
            [
                str(r.config_id),
                text(getattr(r, "config", ""), 40),
                text(r.mode),
                us(r.median_ns),
                us(r.min_ns),
                num(r.spread * 100, ".1f"),
                str(r.reps),
                str(r.kernels),
                num(r.median_cycles, ",.0f"),
                num(r.median_clock_hz / 1e9, ".3f"),
                text(r.error, 60),
            ]
        )
        if shaped:
            rows[-1].insert(0, text(r.shape))
    if shaped:
        headers.insert(0, "shape")
    table = render_table(
        headers, rows, right={0, 3, 4, 5, 6, 7, 8, 9} if not shaped else {0, 1, 4, 5, 6, 7, 8, 9, 10}
    )
    measured = summary[summary["error"].isna() & summary["median_ns"].notna()]
    if shaped:
        for shape, rows_of_shape in measured.groupby("shape", sort=True):
            table += _best_line(f"best at shape {int(shape)}", rows_of_shape, "config" in summary)
    elif len(measured):
        table += _best_line("best", measured, "config" in summary)
    return table


def _best_line(head: str, measured, labelled: bool) -> str:
    """The line under profile's table naming the fastest of `measured` (`labelled`: with its config)."""
    best = measured.loc[measured["median_ns"].idxmin()]
    label = f" ({best['config']})" if labelled else ""
    return (
        f"\n{head}: config {best['config_id']}{label} {best['mode']}, {best['median_ns'] / 1e3:.3f} µs median"
    )


def format_runs(runs, counts) -> str:
    """`nsprof results`: one row per run of the results store (`counts`: rows per run id)."""
    rows = [
        [
            str(r.id),
            text(r.started_at, 19),
            text(r.target, 40),
            text(r.backend),
            text(r.mode),
            text(getattr(r, "clock_control", None)),
            text(getattr(r, "cache_control", None)),
            text(r.gpu, 20),
            str(int(counts.get(r.id, 0))) if len(runs) else "0",
            text(r.status),
            run_deploy(getattr(r, "settings_json", None)),
        ]
        for r in runs.itertuples()
    ]
    return render_table(
        ["run", "started", "target", "backend", "mode", "clock", "cache", "gpu", "rows", "status", "deploy"],
        rows,
        right={0, 8},
    )


def run_deploy(settings_json) -> str:
    """The deploy condition a run's tune recorded in its settings ("" for runs from before
    cross-truth tuning, or of other commands)."""

    if is_missing(settings_json) or not settings_json:
        return ""
    from nsprof.store_rows import settings_of

    return str(settings_of(str(settings_json)).get("deploy") or "")
