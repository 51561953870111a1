"""Per-range and per-kernel statistics over the tidy table, and side-by-side comparison of two reports.

Each step takes a DataFrame and returns a new one; nothing here reads files, words or prints
(nsprof.render does). `summarize` is public as `nsprof.summarize`.
"""

from __future__ import annotations

import math
import re

NO_RANGE = "(no range)"
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
SORTS = ("range", "median", "total", "count", "name")


def _missing(value) -> bool:
    """None or NaN: a missing cell of _lists' columns."""
    return value is None or (isinstance(value, float) and value != value)


def _lists(frame, columns) -> dict[str, list]:
    """Columns of `frame` as lists of Python values, None for pd.NA; None for a column it lacks."""
    import pandas as pd

    return {
        column: [None if value is pd.NA else value for value in frame[column].tolist()]
        if column in frame
        else None
        for column in columns
    }


def _divide(a: float, b: float) -> float:
    """a / b as numpy divides float64: inf or NaN where b is 0."""
    if b == 0:
        return float("nan") if a == 0 or a != a else math.copysign(float("inf"), a) * math.copysign(1.0, b)
    return a / b


def _group_labels(config_id: list, mode: list, range_: list, shape: list | None) -> list:
    """`group` of each row (add_group): `cfg<id>[.s<shape>].<mode>` where the row has a config
    (missing where its mode is), else its range, "(no range)" where it has none."""
    labels = []
    for i, config in enumerate(config_id):
        if _missing(config):
            labels.append(NO_RANGE if _missing(range_[i]) else str(range_[i]))
        elif _missing(mode[i]):
            labels.append(None)
        else:
            part = "" if shape is None or _missing(shape[i]) else f".s{shape[i]}"
            labels.append(f"cfg{config}{part}.{mode[i]}")
    return labels


def add_group(frame):
    """A `group` column: `cfg<id>.<mode>` (`cfg<id>.s<shape>.<mode>` for a target's shapes) for
    nsprof's ranges (reps pooled), else the range."""
    import pandas as pd

    frame = frame.copy()
    cells = _lists(frame, ("config_id", "mode", "range", "shape"))
    group = _group_labels(cells["config_id"], cells["mode"], cells["range"], cells["shape"])
    frame["group"] = pd.Series(pd.array(group, dtype="string"), index=frame.index)
    return frame


def kernel_key(frame):
    """What tells kernels apart: the full name, else the short one (else "?")."""
    full = frame["kernel_full"] if "kernel_full" in frame else frame["kernel"]
    return full.fillna(frame["kernel"]).fillna("?")


def natural_key(text) -> tuple:
    """A sort key putting cfg2 before cfg10: digit runs compare as numbers (by length without
    leading zeros, then digit by digit: no int(), which refuses a run of 4,300 digits)."""
    return tuple(
        (0, len(part.lstrip("0")), part.lstrip("0")) if part.isascii() and part.isdigit() else (1, 0, part)
        for part in re.split(r"([0-9]+)", str(text))
        if part
    )


def range_key(name) -> tuple:
    """Ranges in natural order, "(no range)" last."""
    return (str(name) == NO_RANGE, natural_key(name))


# The statistics of one group's values computed as pandas' groupby computes them, so that the
# numbers are the same to the last bit: the variance by Welford's update (sample variance, ddof
# 1), the median the mean of the two middle values, sums as group_sums says.
# tests/test_summary_numbers.py holds them to pandas' groupby.
def group_sums(values: list[float], codes: list[int], groups: int) -> tuple[list[float], list[int]]:
    """Each group's sum of its values that are not NaN, and how many those are, added as pandas'
    groupby sum adds them: where each group's rows are together and no value is NaN, numpy's
    add.reduceat (a group's first value plus numpy's pairwise sum of the rest); else its cython
    kernel's Kahan-compensated sum in row order (a NaN compensation, as an infinity leaves it,
    reset to 0)."""
    counts = [0] * groups
    for value, code in zip(values, codes):
        if value == value:
            counts[code] += 1
    if all(a <= b for a, b in zip(codes, codes[1:])) and sum(counts) == len(values):
        sums = [0.0] * groups
        start = 0
        for end in range(1, len(codes) + 1):
            if end == len(codes) or codes[end] != codes[start]:
                sums[codes[start]] = values[start] + _pairwise_sum(values, start + 1, end)
                start = end
        return sums, counts
    sums, compensation = [0.0] * groups, [0.0] * groups
    for value, code in zip(values, codes):
        if value != value:
            continue
        y = value - compensation[code]
        t = sums[code] + y
        c = t - sums[code] - y
        compensation[code] = 0.0 if c != c else c
        sums[code] = t
    return sums, counts


def _pairwise_sum(values: list[float], start: int, end: int) -> float:
    """numpy's pairwise_sum of float64 values[start:end] (8 partial sums per block of up to 128)."""
    n = end - start
    if n < 8:
        total = 0.0
        for i in range(start, end):
            total += values[i]
        return total
    if n <= 128:
        r = values[start : start + 8]
        i = start + 8
        stop = end - n % 8
        while i < stop:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for k in range(i, end):
            total += values[k]
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values, start, start + half) + _pairwise_sum(values, start + half, end)


def sample_std(values: list[float]) -> float:
    count, mean, m2 = 0, 0.0, 0.0
    for value in values:
        count += 1
        old = mean
        mean += (value - old) / count
        m2 += (value - mean) * (value - old)
    return math.sqrt(m2 / (count - 1)) if count > 1 else float("nan")


def median(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


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
        stats = _summary_stats({column: frame[column] for column in _SUMMARY_INPUTS})
        columns = {
            column: [pd.NA if v is None else v for v in values]
            if column in _SUMMARY_TEXT
            else np.array(values, dtype=np.int64 if column == "count" else np.float64).tolist()
            for column, values in stats.items()
        }
        return ListTable({column: columns[column] for column in SUMMARY_COLUMNS}, len(stats["count"]))
    stats = _summary_stats(_lists(frame, _SUMMARY_INPUTS))
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
    """summarize's columns as lists (None where missing), from the tidy columns `cells` (_lists')."""
    # Grouped in plain Python (a report has few rows; pandas' groupby costs more per call than
    # the rows do), with pandas' arithmetic: sample_std, median, group_sums.
    group = _group_labels(cells["config_id"], cells["mode"], cells["range"], cells["shape"])
    kernel = ["?" if _missing(k) else k for k in cells["kernel"]]
    full = (
        kernel
        if cells["kernel_full"] is None
        else [k if _missing(f) else f for f, k in zip(cells["kernel_full"], kernel)]
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
        _divide(100 * total, source_sums[code]) for total, code in zip(stats["total_ns"], source_codes)
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
        return [v for v in (cells[column][i] for i in members) if not _missing(v)]

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
            ("cv", _divide(std, means[position])),
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


def samples(frame, summary):
    """The rows of `frame` behind the rows of its summary `summary` (after select): `range` as the
    summary names it, `kernel_full` its key, `kernel`, `duration_ns`; rows without a duration left out."""
    import pandas as pd

    grouped = add_group(frame)
    out = pd.DataFrame(
        {
            "range": grouped["group"],
            "kernel_full": kernel_key(grouped),
            "kernel": grouped["kernel"].fillna("?"),
            "duration_ns": grouped["duration_ns"],
        }
    )
    keys = set(zip(summary["range"].astype(str), summary["kernel_full"].astype(str)))
    keep = [(str(r), str(k)) in keys for r, k in zip(out["range"], out["kernel_full"])]
    out = out[keep]
    return out[out["duration_ns"].notna()].reset_index(drop=True)


def select(summary, kernel: str | None = None, range_: str | None = None, warmup: bool = True):
    """The rows of a summary (or a `compare` table) whose kernel (short or full name) matches the
    regular expression `kernel` and whose range matches `range_` (re.search); without the
    "(no range)" rows when `warmup` is False. Raises re.error for a bad expression. A DataFrame
    for a DataFrame, a ListTable for a ListTable (summarize's)."""
    from nsprof.schema import column_list

    keep = range(len(summary))
    if kernel:
        pattern = re.compile(kernel)
        names = list(zip(column_list(summary, "kernel"), column_list(summary, "kernel_full")))
        keep = [i for i in keep if pattern.search(str(names[i][0])) or pattern.search(str(names[i][1]))]
    ranges = column_list(summary, "range")
    if range_:
        pattern = re.compile(range_)
        keep = [i for i in keep if pattern.search(str(ranges[i]))]
    if not warmup:
        keep = [i for i in keep if str(ranges[i]) != NO_RANGE]
    return _take(summary, list(keep))


def _take(table, positions: list[int]):
    """The rows of a DataFrame (iloc) or a ListTable at `positions`."""
    return table.iloc[positions] if hasattr(table, "iloc") else table.take(positions)


def order(summary, by: str = "range", top: int | None = None, reverse: bool = False):
    """A summary sorted: `range` natural range order ("(no range)" last), kernels of a range in
    order of appearance; `median`, `total`, `count` largest first; `name` by kernel name. With
    `reverse`, each key the other way (`median` then puts the fastest first), equal keys still
    in order of appearance and the rows without a value (NaN, "(no range)") still last. Then
    the first `top` rows of each source. A DataFrame (index 0, 1, ...) for a DataFrame, a
    ListTable for a ListTable."""
    if by not in SORTS:
        raise ValueError(f"sort by one of {SORTS}, not {by!r}")
    from types import SimpleNamespace

    from nsprof.schema import column_list

    used = ("range", "median_ns", "total_ns", "count", "kernel", "kernel_full")
    columns = {column: column_list(summary, column) for column in used}
    rows = [
        (i, SimpleNamespace(**{column: columns[column][i] for column in used})) for i in range(len(summary))
    ]

    # Each key: (whether a row goes last whichever the direction, its key ascending, whether the
    # key's own direction is largest first). Python's sort is stable both ways, so equal keys keep
    # their order of appearance.
    keys = {
        "range": (lambda r: str(r.range) == NO_RANGE, lambda r: natural_key(r.range), False),
        "median": (lambda r: r.median_ns != r.median_ns, lambda r: r.median_ns, True),
        "total": (lambda r: r.total_ns != r.total_ns, lambda r: r.total_ns, True),
        "count": (lambda r: False, lambda r: r.count, True),
        "name": (
            lambda r: False,
            lambda r: (natural_key(r.kernel), natural_key(r.kernel_full), range_key(r.range)),
            False,
        ),
    }
    last, key, largest_first = keys[by]
    shown = [(i, r) for i, r in rows if not last(r)]
    positions = [i for i, _ in sorted(shown, key=lambda ir: key(ir[1]), reverse=largest_first != reverse)]
    positions += [i for i, r in rows if last(r)]
    if top is not None:  # the first `top` rows of each source, as groupby("source", dropna=False).head(top)
        import pandas as pd

        sources = column_list(summary, "source")
        seen: dict = {}
        kept = []
        for i in positions:
            source = None if pd.isna(sources[i]) else sources[i]  # every missing source is one group
            seen[source] = seen.get(source, 0) + 1
            if seen[source] <= top:
                kept.append(i)
        positions = kept
    ordered = _take(summary, positions)
    return ordered.reset_index(drop=True) if hasattr(ordered, "reset_index") else ordered


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
