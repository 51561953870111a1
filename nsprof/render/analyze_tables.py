"""The tables `nsprof analyze` prints: the summary (format_summary), the per-kernel table of
--by kernel (format_kernels), the comparison of two reports (format_compare) and its closing line
(describe_overall, describe_fastest), and the kernel cells they share (kernel_labels,
shares_short_names, NAME_WIDTH).

Each takes what nsprof.analysis computed and returns text; nothing here measures or prints.
"""

from __future__ import annotations

from types import SimpleNamespace

from nsprof.analysis.stats import is_missing
from nsprof.analysis.summary import compare_overall, one_side_ranges
from nsprof.render.text import (
    UNIT_LABELS,
    apart,
    drop_empty_columns,
    duration,
    middle,
    num,
    render_markdown,
    render_table,
    short,
)
from nsprof.schema import column_list

NAME_WIDTH = 48


def _kernel_cells(
    summary, width: int | None, by: tuple[str, ...], names: str
) -> tuple[list[str], list[bool]]:
    """kernel_labels' cells, and whether each is numbered."""
    short = ["?" if is_missing(k) else str(k) for k in column_list(summary, "kernel")]
    full = [s if is_missing(f) else str(f) for f, s in zip(column_list(summary, "kernel_full"), short)]
    shown = full if names == "demangled" else short
    by_columns = [[str(value) for value in column_list(summary, c)] for c in by if c in summary]
    groups = list(zip(*by_columns)) if by_columns else [()] * len(summary)

    def numbered(key) -> dict[tuple, dict[str, int]]:
        """Each set of rows (by key(i)) holding several full names: those names numbered 1, 2, ...
        in the order of the rows."""
        sets: dict[tuple, dict[str, int]] = {}
        for i in range(len(full)):
            names_of_set = sets.setdefault(key(i), {})
            names_of_set.setdefault(full[i], len(names_of_set) + 1)
        return {k: v for k, v in sets.items() if len(v) > 1}

    # kernels sharing a short name: numbered by full name, in display order, whatever the view
    sharing = numbered(lambda i: (groups[i], short[i]))
    number = [sharing.get((groups[i], short[i]), {}).get(full[i]) for i in range(len(full))]
    # a cut name keeps what tells it from the names it shares a short name with, or that would cut alike
    texts_by_short: dict[tuple, set[str]] = {}
    texts_by_cut: dict[tuple, set[str]] = {}
    budget = [None if width is None else width - (len(f" #{n}") if n else 0) for n in number]
    for i, name in enumerate(shown):
        texts_by_short.setdefault((groups[i], short[i]), set()).add(name)
        texts_by_cut.setdefault((groups[i], middle(name, budget[i])), set()).add(name)
    cells = []
    for i, name in enumerate(shown):
        others = texts_by_short[(groups[i], short[i])] | texts_by_cut[(groups[i], middle(name, budget[i]))]
        cells.append(apart(name, sorted(others - {name}), budget[i]))
    # any kernels still printed alike (names that differ only where no room was left): numbered the same way
    alike = numbered(lambda i: (groups[i], cells[i] if number[i] is None else f"#{i}"))
    for i, n in enumerate(number):
        if n is None and (groups[i], cells[i]) in alike:
            number[i] = alike[(groups[i], cells[i])][full[i]]
            cells[i] = middle(shown[i], None if width is None else width - len(f" #{number[i]}"))
    labels = [cell + (f" #{n}" if n else "") for cell, n in zip(cells, number)]
    return labels, [n is not None for n in number]


def kernel_labels(summary, width: int | None = NAME_WIDTH, names: str = "short") -> list[str]:
    """The kernel cell of each summary row: the short name (`names="demangled"`: the full one),
    numbered ` #1`, ` #2`, ... where kernels of one `by` group (a report) share a short name.
    A kernel's number is its full name's, counted in the order the rows come, so that it is the
    same in the short and the demangled view, in every range, and with `width` None (whole
    names). Within `width`, a long name is cut so that what tells it from the names it shares
    a short name with (or that would cut alike) stays (render.text.apart); kernels that would
    still print alike are numbered the same way."""
    return _kernel_cells(summary, width, ("source",), names)[0]


def shares_short_names(summary, width: int | None = NAME_WIDTH, names: str = "short") -> bool:
    """Whether the summary table had to number kernels apart (see kernel_labels)."""
    return any(_kernel_cells(summary, width, ("source",), names)[1])


def _cells(headers: list[str], rows: list[list[str]], right: set[int], keep: int, style: str) -> str:
    headers, rows, right = drop_empty_columns(headers, rows, keep, right)
    return (
        render_markdown(headers, rows, right) if style == "markdown" else render_table(headers, rows, right)
    )


def format_summary(
    summary, unit: str = "us", width: int | None = NAME_WIDTH, names: str = "short", style: str = "table"
) -> str:
    """analyze's table of a summary (analysis.summary.summarize's rows, in the order given; a
    DataFrame or a ListTable):
    durations in `unit` (ns, us, ms), kernel names per kernel_labels, as a fixed-width table or
    (`style="markdown"`) a Markdown one. Columns with no value in any row are left out."""
    u = UNIT_LABELS[unit]
    headers = [
        "source",
        "range",
        "kernel",
        "n",
        f"median {u}",
        f"min {u}",
        f"max {u}",
        f"mean {u}",
        f"std {u}",
        "cv %",
        f"total {u}",
        "% of time",
        "cycles",
        "clock GHz",
    ]
    columns = (
        "source",
        "range",
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
    )
    records = [
        SimpleNamespace(**dict(zip(columns, values)))
        for values in zip(*(column_list(summary, column) for column in columns))
    ]
    rows = [
        _summary_cells(rec, kernel, unit, width)
        for rec, kernel in zip(records, kernel_labels(summary, width, names=names))
    ]
    return _cells(headers, rows, set(range(3, len(headers))), 4, style)


def _summary_cells(rec, kernel: str, unit: str, width: int | None) -> list[str]:
    """format_summary's cells for one summary row `rec`, its kernel label already made."""
    return [
        rec.source,
        middle(str(rec.range), None if width is None else 32),
        kernel,
        str(rec.count),
        duration(rec.median_ns, unit),
        duration(rec.min_ns, unit),
        duration(rec.max_ns, unit),
        duration(rec.mean_ns, unit),
        duration(rec.std_ns, unit),
        num(rec.cv * 100 if rec.cv == rec.cv else float("nan"), ".1f"),
        duration(rec.total_ns, unit),
        num(rec.time_pct, ".1f"),
        num(rec.median_cycles, ",.0f"),
        num(
            rec.median_clock_hz / 1e9 if rec.median_clock_hz == rec.median_clock_hz else float("nan"),
            ".3f",
        ),
    ]


def format_kernels(
    table, unit: str = "us", width: int | None = NAME_WIDTH, names: str = "short", style: str = "table"
) -> str:
    """analyze --by kernel's table (analysis.kernels' rows, in the order given): the columns of
    `nsys stats --report cuda_gpu_kern_sum`, then the launch configuration (grid, block, registers
    per thread, static and dynamic shared memory per block in bytes) where the report has it, the
    kernel name last (per kernel_labels). Launch columns with no value in any row are left out."""
    u = UNIT_LABELS[unit]
    timed = ("Total Time", "Avg", "Med", "Min", "Max", "StdDev")
    headers = ["source", "Time (%)", *(f"{h} ({u})" for h in timed[:1]), "Instances"]
    headers += [f"{h} ({u})" for h in timed[1:]]
    headers += ["Grid", "Block", "Regs", "Static SMem (B)", "Dyn SMem (B)", "Name"]
    durations = ("mean_ns", "median_ns", "min_ns", "max_ns", "std_ns")
    launch = ("grid", "block", "registers", "static_smem", "dynamic_smem")
    columns = ("source", "time_pct", "total_ns", "count", *durations, *launch)
    rows = []
    for values, kernel in zip(
        zip(*(column_list(table, c) for c in columns)), kernel_labels(table, width, names=names)
    ):
        rec = dict(zip(columns, values))
        rows.append(
            [
                str(rec["source"]),
                num(rec["time_pct"], ".1f"),
                duration(rec["total_ns"], unit),
                str(rec["count"]),
                *(duration(rec[c], unit) for c in durations),
                *("-" if is_missing(rec[c]) else str(rec[c]) for c in launch),
                kernel,
            ]
        )
    return _cells(headers, rows, set(range(1, len(headers) - 1)), 9, style)


def format_compare(
    joined,
    name_a: str,
    name_b: str,
    unit: str = "us",
    width: int | None = NAME_WIDTH,
    names: str = "short",
    style: str = "table",
) -> str:
    """analyze --compare's table (analysis.summary.compare's rows), the ranges found on one side
    only named once under it instead of as rows, then the closing line over the shared ranges
    (analysis.summary.compare_overall)."""
    only_a, only_b = one_side_ranges(joined)
    one_sided = set(only_a) | set(only_b)
    shown = joined[~joined["range"].astype(str).isin(one_sided)]
    u = UNIT_LABELS[unit]
    headers = [
        "range",
        "kernel",
        f"A {u} ({short(name_a, 20)})",
        f"B {u} ({short(name_b, 20)})",
        "B/A",
        "n A",
        "n B",
        "cycles B/A",
    ]
    rows = []
    for rec, kernel in zip(shown.itertuples(index=False), kernel_labels(shown, width, names=names)):
        rows.append(
            [
                middle(str(rec.range), None if width is None else 32),
                kernel,
                duration(rec.median_ns_a, unit),
                duration(rec.median_ns_b, unit),
                num(rec.ratio, ".3f"),
                str(rec.count_a),
                str(rec.count_b),
                num(rec.cycles_ratio, ".3f"),
            ]
        )
    lines = [_cells(headers, rows, set(range(2, len(headers))), 7, style), ""]
    for side, ranges in (("A", only_a), ("B", only_b)):
        if ranges:
            counts = joined[joined["range"].isin(ranges)].groupby("range")[f"count_{side.lower()}"].sum()
            lines.append(f"only in {side}: " + ", ".join(f"{r} ({int(counts[r])} kernels)" for r in ranges))
    lines.append(describe_overall(compare_overall(joined)))
    return "\n".join(lines)


def describe_overall(overall: dict) -> str:
    """The closing line of a comparison (`overall`: analysis.summary.compare_overall's)."""
    if not overall["ranges"]:
        return 'no range measured on both sides ("(no range)" not counted)'
    head = f'over {overall["ranges"]} shared range(s) ("(no range)" not counted): '
    parts = [f"geometric-mean B/A {num(overall['geomean_ratio'], '.3f')}"]
    if overall["ranges"] < overall["kendall_tau_min_ranges"]:
        parts.append(
            f"Kendall τ not computed: {overall['ranges']} shared range{'s' if overall['ranges'] > 1 else ''}, "
            f"τ needs {overall['kendall_tau_min_ranges']} or more"
        )
    else:
        parts.append(f"Kendall τ {num(overall['kendall_tau'], '.3f')}")
    parts.append(describe_fastest(overall))
    return head + ", ".join(parts)


def describe_fastest(overall: dict) -> str:
    """Whether both sides rank the same range fastest, by tune's rule (compare_overall's `fastest`)."""
    a, b, kind = overall["fastest_a"], overall["fastest_b"], overall["fastest"]
    if kind == "same":
        return f"same fastest: {a}"
    if kind == "tied":
        return f"fastest tied within noise (A {a}, B {b}: each inside the other's tie set)"
    if kind == "untested":
        return f"fastest differs: A {a}, B {b} (untested against the noise: too few samples for an interval)"
    outside = []
    if b not in overall["tie_set_a"]:
        outside.append(f"{b} outside A's tie set {{{', '.join(overall['tie_set_a'])}}}")
    if a not in overall["tie_set_b"]:
        outside.append(f"{a} outside B's tie set {{{', '.join(overall['tie_set_b'])}}}")
    return f"fastest differs: A {a}, B {b} ({'; '.join(outside)})"
