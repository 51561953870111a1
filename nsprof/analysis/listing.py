"""What analyze shows of a summary: the rows selected (`select`), their order (`order`), and the
tidy rows behind them (`samples`)."""

from __future__ import annotations

from nsprof.analysis.groups import NO_RANGE, add_group, kernel_key, natural_key, range_key
from nsprof.analysis.patterns import searcher

SORTS = ("range", "median", "total", "count", "name")


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
    "(no range)" rows when `warmup` is False. Raises regex.error for a bad expression (NsprofError for
    one that backtracks without end: nsprof.analysis.patterns). A DataFrame
    for a DataFrame, a ListTable for a ListTable (summarize's)."""
    from nsprof.schema import column_list

    keep = range(len(summary))
    if kernel:
        search = searcher(kernel, "--kernel")
        names = list(zip(column_list(summary, "kernel"), column_list(summary, "kernel_full")))
        keep = [i for i in keep if search(str(names[i][0])) or search(str(names[i][1]))]
    ranges = column_list(summary, "range")
    if range_:
        search = searcher(range_, "--range")
        keep = [i for i in keep if search(str(ranges[i]))]
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
    in order of appearance and the rows without a value still last (NaN; "(no range)" by range). Then
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
