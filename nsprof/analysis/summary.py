"""Per-range and per-kernel statistics over the tidy table (`summarize`, `median_intervals`), and
side-by-side comparison of two reports (`compare`, `per_range`, `compare_overall`). The rows'
groups and pandas-exact arithmetic are in nsprof.analysis.groups; selecting and ordering a
summary in nsprof.analysis.listing.

Each step takes a DataFrame and returns a new one; nothing here reads files, words or prints
(nsprof.render does). `summarize` is public as `nsprof.summarize`.
"""

from __future__ import annotations

from nsprof.analysis.groups import (
    NO_RANGE,
    add_group,
    divide,
    group_labels,
    group_sums,
    kernel_key,
    lists,
    median,
    missing,
    place_labels,
    range_key,
    sample_std,
)

# Kendall τ over fewer shared ranges is left out: below 4 even τ = ±1 comes by chance more than
# 1 time in 20 (1/n! of the orderings; 1/6 for 3 ranges, and τ of 2 ranges is always ±1).
MIN_TAU_RANGES = 4
# `group` is `range` under its old name, kept for one release (nsprof 0.x readers of summarize())
SUMMARY_COLUMNS = [
    "source",
    "range",
    "kernel",
    "kernel_full",
    "count",
    "median_ns",
    "min_ns",
    "max_ns",
    "mean_ns",
    "std_ns",
    "cv",
    "total_ns",
    "time_pct",
    "median_cycles",
    "median_clock_hz",
    "clock_control",
    "cache_control",
    "group",
]


_SUMMARY_INPUTS = (
    "source",
    "config_id",
    "mode",
    "range",
    "shape",
    "kernel",
    "kernel_full",
    "duration_ns",
    "cycles",
    "clock_hz",
    "clock_control",
    "cache_control",
    "device",
    "pid",
)
_SUMMARY_TEXT = ("source", "range", "group", "kernel", "kernel_full", "clock_control", "cache_control")


def summarize(frame):
    """One row per source × range × kernel (by full name): count, median, min, max, mean, std, CV,
    total, share of the source's kernel time (`time_pct`, 0-100), cycles, clock. `range` is
    `cfg<id>.<mode>` for nsprof's ranges (reps pooled), else the NVTX range; `group` is the same
    column under its old name, kept for one release. `kernel` is the short name for display;
    `kernel_full` the key. Rows in order of first appearance (see `order`).

    A DataFrame for a DataFrame; for a ListTable (nsprof.schema.tidy_rows) a ListTable of the same
    columns holding what the DataFrame's columns' tolist() would."""
    import numpy as np
    import pandas as pd

    from nsprof.schema import ListTable

    if isinstance(frame, ListTable):
        stats = _summary_stats(
            {column: frame[column] if column in frame else None for column in _SUMMARY_INPUTS}
        )
        columns = {
            column: [pd.NA if v is None else v for v in values]
            if column in _SUMMARY_TEXT
            else np.array(values, dtype=np.int64 if column == "count" else np.float64).tolist()
            for column, values in stats.items()
        }
        return ListTable({column: columns[column] for column in SUMMARY_COLUMNS}, len(stats["count"]))
    stats = _summary_stats(lists(frame, _SUMMARY_INPUTS))
    string = _string_dtype()
    text = {
        "source": frame["source"].dtype,
        "range": string,
        "group": string,
        "kernel": frame["kernel"].dtype,
        "kernel_full": (frame["kernel_full"] if "kernel_full" in frame else frame["kernel"]).dtype,
        "clock_control": frame["clock_control"].dtype,
        "cache_control": frame["cache_control"].dtype,
    }
    return pd.DataFrame(
        {
            column: pd.array(values, dtype=text[column])
            if column in text
            else np.array(values, dtype=np.int64 if column == "count" else np.float64)
            for column, values in stats.items()
        },
        columns=SUMMARY_COLUMNS,
        copy=False,
    )


def _summary_stats(cells: dict[str, list]) -> dict[str, list]:
    """summarize's columns as lists (None where missing), from the tidy columns `cells` (groups.lists')."""
    # Grouped in plain Python (a report has few rows; pandas' groupby costs more per call than
    # the rows do), with pandas' arithmetic: sample_std, median, group_sums.
    where = place_labels(cells["device"], cells["pid"])
    group = group_labels(cells["config_id"], cells["mode"], cells["range"], cells["shape"], where)
    kernel = ["?" if missing(k) else k for k in cells["kernel"]]
    full = (
        kernel
        if cells["kernel_full"] is None
        else [k if missing(f) else f for f, k in zip(cells["kernel_full"], kernel)]
    )
    rows, codes = _first_seen_groups(zip(cells["source"], group, full))
    durations_ = [float("nan") if d is None else d for d in cells["duration_ns"]]
    sums, counts = group_sums(durations_, codes, len(rows))
    means = [total / count if count else float("nan") for total, count in zip(sums, counts)]
    stats = _group_stats(cells, rows, kernel, sums, means)
    sources = {source: None for source in stats["source"]}
    source_codes = [list(sources).index(source) for source in stats["source"]]
    source_sums = group_sums(stats["total_ns"], source_codes, len(sources))[0]
    stats["time_pct"] = [
        divide(100 * total, source_sums[code]) for total, code in zip(stats["total_ns"], source_codes)
    ]
    return stats


def _first_seen_groups(keys) -> tuple[dict[tuple, list[int]], list[int]]:
    """Each distinct key's row positions, and each row's group number in order of first
    appearance (as groupby(sort=False) numbers them)."""
    rows: dict[tuple, list[int]] = {}
    codes = []
    for i, key in enumerate(keys):
        members = rows.setdefault(key, [])
        if not members:
            codes.append(len(rows) - 1)
        else:
            codes.append(codes[members[0]])
        members.append(i)
    return rows, codes


def _group_stats(
    cells: dict[str, list], rows: dict, kernel: list, sums: list, means: list
) -> dict[str, list]:
    """SUMMARY_COLUMNS (all but time_pct) per group of `rows`, from the tidy columns."""

    def present(column, members):
        return [v for v in (cells[column][i] for i in members) if not missing(v)]

    def first(column, members):
        return next(iter(present(column, members)), None)

    stats = {column: [] for column in SUMMARY_COLUMNS}
    for position, ((source, label, kernel_full), members) in enumerate(rows.items()):
        durations = present("duration_ns", members)
        count = len(durations)
        std = sample_std(durations)
        for column, value in (
            ("source", source),
            ("range", label),
            ("kernel", kernel[members[0]]),
            ("kernel_full", kernel_full),
            ("count", count),
            ("median_ns", median(durations)),
            ("min_ns", min(durations, default=float("nan"))),
            ("max_ns", max(durations, default=float("nan"))),
            ("mean_ns", means[position]),
            ("std_ns", std),
            ("cv", divide(std, means[position])),
            ("total_ns", sums[position] if count else float("nan")),
            ("median_cycles", median(present("cycles", members))),
            ("median_clock_hz", median(present("clock_hz", members))),
            ("clock_control", first("clock_control", members)),
            ("cache_control", first("cache_control", members)),
            ("group", label),
        ):
            stats[column].append(value)
    return stats


_STRING: list = []


def _string_dtype():
    """pandas' "string" dtype, looked up once (the lookup costs more than a small column)."""
    if not _STRING:
        import pandas as pd

        _STRING.append(pd.api.types.pandas_dtype("string"))
    return _STRING[0]


def median_intervals(frame):
    """One row per source × range × kernel (summarize's keys): the interval of the median of its
    durations (`ci_low_ns`, `ci_high_ns`: nsprof.analysis.confidence.median_interval, the one
    tune gives each config; NaN with fewer than 2 durations)."""
    import pandas as pd

    from nsprof.analysis.confidence import median_interval

    grouped = add_group(frame)
    grouped["kernel_full"] = kernel_key(grouped)
    rows = []
    for (source, group, kernel), durations in grouped.groupby(
        ["source", "group", "kernel_full"], sort=False, dropna=False
    )["duration_ns"]:
        interval = median_interval(durations.to_numpy(dtype=float, na_value=float("nan")))
        rows.append((source, group, kernel, interval.low, interval.high))
    return pd.DataFrame(rows, columns=["source", "range", "kernel_full", "ci_low_ns", "ci_high_ns"])


def compare(frame_a, frame_b):
    """Medians of two reports side by side, joined on range × kernel, with b/a ratios and the
    counts of each side (`count_a`, `count_b`) and each median's interval (`ci_low_ns_a`,
    `ci_high_ns_a`, ... : median_intervals); rows in natural range order, "(no range)" last.

    Kernels join by full name; ncu's CSV and nsys demangle differently, so rows left
    unmatched on both sides then join by short name where that name is one kernel on each
    side (never pooling kernels that share a short name). `group` repeats `range` (its old
    name, kept for one release).
    """
    import pandas as pd

    columns = [
        "range",
        "kernel",
        "kernel_full",
        "count",
        "median_ns",
        "median_cycles",
        "ci_low_ns",
        "ci_high_ns",
    ]
    a, b = (
        summarize(frame).merge(median_intervals(frame), on=["source", "range", "kernel_full"], how="left")[
            columns
        ]
        for frame in (frame_a, frame_b)
    )
    joined = a.merge(
        b.drop(columns="kernel"),
        on=["range", "kernel_full"],
        how="outer",
        suffixes=("_a", "_b"),
        sort=False,
        indicator=True,
    )
    joined["kernel"] = joined["kernel"].fillna(
        joined["kernel_full"].map(dict(zip(b["kernel_full"], b["kernel"])))
    )
    only_a = joined[joined["_merge"] == "left_only"]
    only_b = joined[joined["_merge"] == "right_only"]
    pairs = []
    for (range_, kernel), rows_a in only_a.groupby(["range", "kernel"], sort=False):
        rows_b = only_b[(only_b["range"] == range_) & (only_b["kernel"] == kernel)]
        if len(rows_a) == 1 and len(rows_b) == 1:
            pairs.append((rows_a.index[0], rows_b.index[0]))
    for index_a, index_b in pairs:
        for column in ("count_b", "median_ns_b", "median_cycles_b", "ci_low_ns_b", "ci_high_ns_b"):
            joined.loc[index_a, column] = joined.loc[index_b, column]
    joined = joined.drop(index=[index_b for _, index_b in pairs]).drop(columns="_merge")
    joined = pd.DataFrame(joined).reset_index(drop=True)
    for column in ("count_a", "count_b"):
        joined[column] = joined[column].fillna(0).astype("int64")
    joined["ratio"] = joined["median_ns_b"] / joined["median_ns_a"]
    joined["cycles_ratio"] = joined["median_cycles_b"] / joined["median_cycles_a"]
    joined = joined.iloc[sorted(range(len(joined)), key=lambda i: (range_key(joined["range"].iloc[i]), i))]
    joined["group"] = joined["range"]
    return joined.reset_index(drop=True)


def one_side_ranges(joined) -> tuple[list[str], list[str]]:
    """The ranges of a `compare` table with kernels on one side only: (only in A, only in B)."""
    a = joined.groupby("range", sort=False)["count_a"].sum()
    b = joined.groupby("range", sort=False)["count_b"].sum()
    only_a = sorted((r for r in a.index if a[r] > 0 and b[r] == 0), key=range_key)
    only_b = sorted((r for r in b.index if b[r] > 0 and a[r] == 0), key=range_key)
    return only_a, only_b


def per_range(joined):
    """One row per range measured on both sides (natural order, "(no range)" left out: warm-up):
    `a_ns`, `b_ns` (the sum of the medians of the kernels matched on both sides, so that each
    side times the same kernels), `ratio` (b/a), `kernels` (how many were matched), and each
    side's interval of its time (`a_low_ns`, `a_high_ns`, `b_low_ns`, `b_high_ns`): the sums of
    its kernels' median intervals. For a range of one kernel that is tune's interval of a
    config; for several it is wider (it holds the sum of the medians whenever each kernel's
    interval holds its median), so that it never claims a difference the noise could make.
    NaN where a kernel has no interval (fewer than 2 durations)."""
    import pandas as pd

    both = joined[
        joined["median_ns_a"].notna()
        & joined["median_ns_b"].notna()
        & (joined["range"].astype(str) != NO_RANGE)
    ]

    def whole(values):  # a sum that is NaN when any part is
        return values.sum(skipna=False)

    out = (
        both.groupby("range", sort=False)
        .agg(
            a_ns=("median_ns_a", "sum"),
            b_ns=("median_ns_b", "sum"),
            kernels=("kernel_full", "count"),
            a_low_ns=("ci_low_ns_a", whole),
            a_high_ns=("ci_high_ns_a", whole),
            b_low_ns=("ci_low_ns_b", whole),
            b_high_ns=("ci_high_ns_b", whole),
        )
        .reset_index()
    )
    out["ratio"] = out["b_ns"] / out["a_ns"]
    out = out[["range", "a_ns", "b_ns", "kernels", "ratio", "a_low_ns", "a_high_ns", "b_low_ns", "b_high_ns"]]
    out = out.iloc[sorted(range(len(out)), key=lambda i: range_key(out["range"].iloc[i]))]
    return pd.DataFrame(out).reset_index(drop=True)


def compare_overall(joined) -> dict:
    """The closing numbers of a comparison over the shared ranges (see `per_range`): how many,
    the geometric mean of their b/a ratios, Kendall τ-b between the two sides' range times
    (None with fewer than MIN_TAU_RANGES ranges), and the fastest range by tune's rule.

    Each side's fastest is its lowest time, then the earlier range (natural order), with its
    tie set: the ranges whose interval overlaps its own (nsprof.analysis.confidence.pick, None
    when it has no interval). `fastest` relates the two as validate's winner stability relates
    two runs (confidence.stability): "same", "tied" (each side's fastest inside the other's tie
    set), "different", or "untested" (different, without an interval to test a tie)."""
    from nsprof.analysis.confidence import stability

    ranges = per_range(joined)
    if not len(ranges):
        return {
            "ranges": 0,
            "geomean_ratio": None,
            "kendall_tau": None,
            "kendall_tau_min_ranges": MIN_TAU_RANGES,
            "fastest_a": None,
            "fastest_b": None,
            "same_fastest": None,
            "fastest": None,
            "tie_set_a": None,
            "tie_set_b": None,
        }
    geomean, tau = _ratio_numbers(ranges)
    picks = _side_picks(ranges)
    names = [str(r) for r in ranges["range"]]
    fastest_a, fastest_b = (names[p.winner] for p in picks)
    tie_a, tie_b = (None if p.tie_set is None else [names[i] for i in p.tie_set] for p in picks)
    return {
        "ranges": len(ranges),
        "geomean_ratio": geomean,
        "kendall_tau": tau,
        "kendall_tau_min_ranges": MIN_TAU_RANGES,
        "fastest_a": fastest_a,
        "fastest_b": fastest_b,
        "same_fastest": fastest_a == fastest_b,
        "fastest": stability(*picks),
        "tie_set_a": tie_a,
        "tie_set_b": tie_b,
    }


def _ratio_numbers(ranges) -> tuple[float | None, float | None]:
    """The geometric mean of the shared ranges' b/a ratios, and Kendall τ-b between the two
    sides' times (None with fewer than MIN_TAU_RANGES ranges)."""
    import numpy as np

    from nsprof.analysis.stats import kendall_tau_b

    ratio = ranges["ratio"].to_numpy(float)
    ok = np.isfinite(ratio) & (ratio > 0)
    geomean = float(np.exp(np.log(ratio[ok]).mean())) if ok.any() else None
    tau = None
    if len(ranges) >= MIN_TAU_RANGES:
        tau = kendall_tau_b(ranges["a_ns"].to_numpy(float), ranges["b_ns"].to_numpy(float))
        tau = None if tau != tau else tau
    return geomean, tau


def _side_picks(ranges) -> list:
    """Each side's fastest range with its tie set (confidence.pick), as range positions."""
    import pandas as pd

    from nsprof.analysis.confidence import pick

    # pick's "config id" is the range's place in natural order: its tie rule, the lower id, is the earlier range
    return [
        pick(
            pd.DataFrame(
                {
                    "config_id": range(len(ranges)),
                    "value_ns": ranges[f"{side}_ns"],
                    "ci_low_ns": ranges[f"{side}_low_ns"],
                    "ci_high_ns": ranges[f"{side}_high_ns"],
                }
            )
        )
        for side in ("a", "b")
    ]


def far_apart(joined, factor: float = 10.0):
    """The rows of a `compare` table whose B/A ratio is beyond `factor` either way."""
    return joined[(joined["ratio"] > factor) | (joined["ratio"] < 1 / factor)]
