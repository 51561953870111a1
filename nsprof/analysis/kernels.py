"""The whole-report per-kernel summary (`analyze --by kernel`), as `nsys stats --report
cuda_gpu_kern_sum` gives it: every range pooled, one row per source × kernel (by full name) ×
launch configuration (grid, block, registers per thread, static and dynamic shared memory, where
the report has them), with its share of the source's kernel time, total, count, mean, median,
min, max and sample standard deviation of the duration. Nothing here reads files or prints."""

from __future__ import annotations

from nsprof.analysis.groups import NO_RANGE, median, natural_key, sample_std
from nsprof.analysis.patterns import searcher

LAUNCH_COLUMNS = ["grid", "block", "registers", "static_smem", "dynamic_smem"]
KERNEL_COLUMNS = [
    "source",
    "kernel",
    "kernel_full",
    *LAUNCH_COLUMNS,
    "time_pct",
    "total_ns",
    "count",
    "mean_ns",
    "median_ns",
    "min_ns",
    "max_ns",
    "std_ns",
    "clock_control",  # how the report's rows were taken (its own record: ncu's --clock-control, "none" for nsys)
    "cache_control",
]


def _value(value):
    """None for a missing value (pandas NA, NaN), else the value."""
    try:
        return None if value is None or value != value else value
    except TypeError:  # pandas NA: its comparison has no truth value
        return None


def _launches(frame, configs: dict | None) -> list[tuple]:
    """Each row's launch configuration (LAUNCH_COLUMNS' values), all None where unknown."""
    blank = (None,) * len(LAUNCH_COLUMNS)
    if not configs:
        return [blank] * len(frame)
    ids = [_value(v) for v in frame["launch_id"].tolist()]
    starts = [_value(v) for v in frame["start_ns"].tolist()]
    return [
        tuple(configs.get((None if i is None else int(i), None if s is None else int(s)), blank))
        for i, s in zip(ids, starts)
    ]


def kernel_summary(frame, configs: dict | None = None, range_re: str | None = None, warmup: bool = True):
    """The per-kernel summary of a tidy frame (rows in order of first appearance; see
    `kernel_order`). `configs` maps (launch_id, start_ns or None) to a launch configuration
    (nsprof.reports.launch_config); `range_re` (re.search on the NVTX range, "(no range)" for
    none) and `warmup` False (without the rows outside every range) choose the rows pooled.
    `time_pct` is the share of the source's whole kernel time, whatever the rows pooled."""

    durations = [_value(v) for v in frame["duration_ns"].tolist()]
    sources = [_value(v) for v in frame["source"].tolist()]
    kernels = [_value(v) for v in frame["kernel"].tolist()]
    fulls = [_value(v) for v in frame["kernel_full"].tolist()]
    ranges = [_value(v) or NO_RANGE for v in frame["range"].tolist()]
    launches = _launches(frame, configs)
    taken = list(zip(frame["clock_control"].tolist(), frame["cache_control"].tolist()))
    whole: dict = {}
    groups: dict[tuple, list[float]] = {}
    names: dict[tuple, tuple] = {}
    search = searcher(range_re, "--range") if range_re else None
    for i, duration in enumerate(durations):
        if duration is None:
            continue
        whole[sources[i]] = whole.get(sources[i], 0.0) + duration
        if (search and not search(ranges[i])) or (not warmup and ranges[i] == NO_RANGE):
            continue
        key = (sources[i], fulls[i] or kernels[i], launches[i])
        groups.setdefault(key, []).append(duration)
        names.setdefault(key, (kernels[i], fulls[i], *map(_value, taken[i])))
    rows = [_row(key, names[key], values, whole[key[0]]) for key, values in groups.items()]
    return _typed(rows)


def _typed(rows: list[dict]):
    """The rows as a frame: counts and sizes as nullable integers, names and sizes as strings."""
    import pandas as pd

    table = pd.DataFrame(rows, columns=KERNEL_COLUMNS)
    for column in ("registers", "static_smem", "dynamic_smem", "count"):
        table[column] = pd.array([_value(v) for v in table[column].tolist()], dtype="Int64")
    for column in ("source", "kernel", "kernel_full", "grid", "block", "clock_control", "cache_control"):
        table[column] = pd.array([_value(v) for v in table[column].tolist()], dtype="string")
    return table


def _row(key: tuple, names: tuple, values: list[float], whole: float) -> dict:
    source, _, launch = key
    total = float(sum(values))
    return {
        "source": source,
        "kernel": names[0],
        "kernel_full": names[1],
        **dict(zip(LAUNCH_COLUMNS, launch)),
        "time_pct": 100.0 * total / whole if whole else float("nan"),
        "total_ns": total,
        "count": len(values),
        "mean_ns": total / len(values),
        "median_ns": float(median(values)),
        "min_ns": float(min(values)),
        "max_ns": float(max(values)),
        "std_ns": sample_std(values),
        "clock_control": names[2],
        "cache_control": names[3],
    }


def _launch_key(row) -> tuple:
    return tuple((value is None, natural_key(str(value))) for value in (row[c] for c in LAUNCH_COLUMNS))


def kernel_order(table, by: str = "total", top: int | None = None, reverse: bool = False, kernel_re=None):
    """The rows whose kernel (short or full name) matches `kernel_re` (re.search), sorted:
    `total` (and `range`, the per-range view's default: there are no ranges here) largest first,
    as nsys stats does; `median`, `count` largest first; `name` by kernel name, then launch
    configuration. `reverse` turns the key around (equal keys keep their order). Then the first
    `top` rows of each source."""
    rows = [
        {column: _value(v) for column, v in zip(table.columns, values)}
        for values in table.itertuples(index=False)
    ]
    if kernel_re:
        search = searcher(kernel_re, "--kernel")
        rows = [r for r in rows if any(search(str(r[c])) for c in ("kernel", "kernel_full") if r[c])]
    keys = {
        "total": (lambda r: r["total_ns"], True),
        "range": (lambda r: r["total_ns"], True),
        "median": (lambda r: r["median_ns"], True),
        "count": (lambda r: r["count"], True),
        "name": (
            lambda r: (natural_key(str(r["kernel"])), natural_key(str(r["kernel_full"])), _launch_key(r)),
            False,
        ),
    }
    key, largest_first = keys[by]
    rows.sort(key=key, reverse=largest_first != reverse)
    if top is not None:
        seen: dict = {}
        kept = []
        for row in rows:
            seen[row["source"]] = seen.get(row["source"], 0) + 1
            if seen[row["source"]] <= top:
                kept.append(row)
        rows = kept
    return _typed(rows)
