"""The notes `nsprof analyze` prints about a report: what its rows are and how ncu took them,
and the warnings its numbers call for (kernels sharing a short name, graph-profiling inflation,
two reports an order of magnitude apart).

Each returns words for what nsprof.analysis computed; nothing here reads files or prints.
"""

from __future__ import annotations

from nsprof.analysis.stats import is_missing
from nsprof.analysis.summary import far_apart
from nsprof.errors import printable
from nsprof.render.analyze_tables import NAME_WIDTH, shares_short_names
from nsprof.schema import column_list

SHARED_NAMES_NOTE = (
    "note: kernels marked #1, #2, ... share a short name (or would print alike); each is its "
    "own row by full name, its number the same in every view: see them with --names demangled --wide"
)


def _ncu_values(frame, column: str) -> list:
    """The values of `column` in the ncu rows of `frame`, in row order (missing ones left out)."""
    return [
        value
        for source, value in zip(column_list(frame, "source"), column_list(frame, column))
        if not is_missing(source) and source == "ncu" and not is_missing(value)
    ]


def _label(frame, column: str, option: str, default: str) -> str:
    values = list(dict.fromkeys(_ncu_values(frame, column)))
    name = option.removeprefix("--").replace("-", " ")
    if values:
        where = frame.attrs.get("labels_from", {}).get(column)
        return f"{name} {','.join(sorted(values))}" + (f" (from {where})" if where else "")
    if frame.attrs.get("ncu_command_line"):
        return (
            f"{name} unknown (the report's ncu command line does not set {option}: ncu's default, "
            f"{default}, applies unless an ncu config file set another)"
        )
    return f"{name} unknown (not recorded in this report)"


def describe_report(frame) -> str:
    """One line on what a report's rows are: count, kind, and how ncu ran (as far as it is recorded).

    Clock and cache control come from the report's own record (the ncu command line in an
    .ncu-rep, ncu's notes above a CSV table) or from the caller's labels; nothing is assumed.
    """
    notes = [f"{len(frame)} rows", frame.attrs.get("kind", "?")]
    if any(not is_missing(source) and source == "ncu" for source in column_list(frame, "source")):
        notes.append(_label(frame, "clock_control", "--clock-control", "base"))
        notes.append(_label(frame, "cache_control", "--cache-control", "all"))
    else:
        notes.append("nsys: CUPTI kernel trace at the run's own clocks and cache state")
    return printable(", ".join(notes))  # the labels are the report's own text


def graph_profiling_note(frame) -> str | None:
    """The note for a report captured with ncu --graph-profiling graph, naming every row kind
    it inflates (whole-graph rows and plain kernel rows alike), or None."""
    workloads = [
        "kernel" if is_missing(workload) else workload
        for source, workload in zip(column_list(frame, "source"), column_list(frame, "workload"))
        if not is_missing(source) and source == "ncu"
    ]
    if frame.attrs.get("graph_profiling") != "graph" and "graph" not in workloads:
        return None
    counts = {"graph": workloads.count("graph"), "kernel": workloads.count("kernel")}
    kinds = []
    if counts.get("graph", 0):
        kinds.append(f"{counts['graph']} 'graph' row(s), each a whole graph and not a kernel")
    if counts.get("kernel", 0):
        kinds.append(f"{counts['kernel']} 'kernel' row(s), plain launches included")
    return (
        "note: this report was captured with ncu --graph-profiling graph, which inflates every row "
        f"in it ({'; '.join(kinds)}). On an H200, µs kernels profiled this way took 19-83x as long as "
        "the same kernels profiled per node, their cycles inflated alike. Profile with "
        "--graph-profiling node for per-kernel durations."
    )


def summary_notes(frame, summary, width: int | None = NAME_WIDTH, names: str = "short") -> list[str]:
    """The notes under a report's summary table (`summary`: analysis.summary.summarize(frame),
    as printed; `width`, `names`: how its kernel names were shown)."""
    notes = [SHARED_NAMES_NOTE] if shares_short_names(summary, width, names) else []
    note = graph_profiling_note(frame)
    return notes + ([note] if note else [])


def compare_note(joined) -> str | None:
    """The note under a comparison (`joined`: analysis.summary.compare's) when rows are 10x apart, or None."""
    far = far_apart(joined)
    if not len(far):
        return None
    # ncu with --clock-control none, or any --graph-profiling graph run, measured µs
    # kernels 30-80x too long on the H200.
    return (
        f"note: {len(far)} row(s) differ more than 10x between A and B: for µs kernels that "
        "points at ncu --clock-control none or --graph-profiling graph, not at the kernel"
    )
