"""Per-range and per-kernel statistics over the tidy table, and side-by-side comparison of two reports.

Each step takes a DataFrame and returns a new one; nothing here reads files, words or prints
(nsprof.render does). `summarize` is public as `nsprof.summarize`.
"""

from __future__ import annotations

NO_RANGE = "(no range)"
SUMMARY_COLUMNS = [
    "source", "group", "kernel", "kernel_full", "count", "median_ns", "min_ns", "mean_ns", "std_ns", "cv",
    "median_cycles", "median_clock_hz", "clock_control", "cache_control",
]


def add_group(frame):
    """A `group` column: `cfg<id>.<mode>` for nsprof's ranges (reps pooled), else the range."""
    import pandas as pd

    frame = frame.copy()
    has_cfg = frame["config_id"].notna()
    group = frame["range"].astype("string").fillna(NO_RANGE)
    cfg = "cfg" + frame["config_id"].astype("string") + "." + frame["mode"].astype("string")
    group = group.where(~has_cfg, cfg)
    frame["group"] = pd.Series(group, index=frame.index, dtype="string")
    return frame


def kernel_key(frame):
    """What tells kernels apart: the full name, else the short one (else "?")."""
    full = frame["kernel_full"] if "kernel_full" in frame else frame["kernel"]
    return full.fillna(frame["kernel"]).fillna("?")


def summarize(frame):
    """One row per source × group × kernel (by full name): count, median, min, mean, std, CV,
    cycles, clock. `kernel` is the short name for display; `kernel_full` the key."""
    import pandas as pd

    grouped = add_group(frame)
    grouped["kernel_full"] = kernel_key(grouped)
    grouped["kernel"] = grouped["kernel"].fillna("?")
    keys = ["source", "group", "kernel_full"]
    agg = grouped.groupby(keys, sort=False, dropna=False).agg(
        kernel=("kernel", "first"),
        count=("duration_ns", "count"),  # rows with a duration: an empty one is not a sample
        median_ns=("duration_ns", "median"),
        min_ns=("duration_ns", "min"),
        mean_ns=("duration_ns", "mean"),
        std_ns=("duration_ns", "std"),
        median_cycles=("cycles", "median"),
        median_clock_hz=("clock_hz", "median"),
        clock_control=("clock_control", "first"),
        cache_control=("cache_control", "first"),
    ).reset_index()
    agg["cv"] = agg["std_ns"] / agg["mean_ns"]
    agg["count"] = agg["count"].astype("int64")
    return pd.DataFrame(agg[SUMMARY_COLUMNS])


def compare(frame_a, frame_b):
    """Medians of two reports side by side, joined on group × kernel, with b/a ratios.

    Kernels join by full name; ncu's CSV and nsys demangle differently, so rows left
    unmatched on both sides then join by short name where that name is one kernel on each
    side (never pooling kernels that share a short name).
    """
    import pandas as pd

    columns = ["group", "kernel", "kernel_full", "count", "median_ns", "median_cycles"]
    a = summarize(frame_a)[columns]
    b = summarize(frame_b)[columns]
    joined = a.merge(b.drop(columns="kernel"), on=["group", "kernel_full"], how="outer",
                     suffixes=("_a", "_b"), sort=False, indicator=True)
    joined["kernel"] = joined["kernel"].fillna(joined["kernel_full"].map(dict(zip(b["kernel_full"], b["kernel"]))))
    only_a = joined[joined["_merge"] == "left_only"]
    only_b = joined[joined["_merge"] == "right_only"]
    pairs = []
    for (group, kernel), rows_a in only_a.groupby(["group", "kernel"], sort=False):
        rows_b = only_b[(only_b["group"] == group) & (only_b["kernel"] == kernel)]
        if len(rows_a) == 1 and len(rows_b) == 1:
            pairs.append((rows_a.index[0], rows_b.index[0]))
    for index_a, index_b in pairs:
        for column in ("count_b", "median_ns_b", "median_cycles_b"):
            joined.loc[index_a, column] = joined.loc[index_b, column]
    joined = joined.drop(index=[index_b for _, index_b in pairs]).drop(columns="_merge")
    joined = pd.DataFrame(joined).reset_index(drop=True)
    joined["ratio"] = joined["median_ns_b"] / joined["median_ns_a"]
    joined["cycles_ratio"] = joined["median_cycles_b"] / joined["median_cycles_a"]
    return joined


def far_apart(joined, factor: float = 10.0):
    """The rows of a `compare` table whose B/A ratio is beyond `factor` either way."""
    return joined[(joined["ratio"] > factor) | (joined["ratio"] < 1 / factor)]
