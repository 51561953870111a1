"""Per-config statistics over the tidy table, and side-by-side comparison of two reports.

Each step takes a DataFrame and returns a new one; nothing here reads files or prints.
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


def _label(frame, column: str, option: str, default: str) -> str:
    values = frame.loc[frame["source"].eq("ncu"), column].dropna().unique().tolist()
    name = option.removeprefix("--").replace("-", " ")
    if values:
        where = frame.attrs.get("labels_from", {}).get(column)
        return f"{name} {','.join(sorted(values))}" + (f" (from {where})" if where else "")
    if frame.attrs.get("ncu_command_line"):
        return (f"{name} unknown (the report's ncu command line does not set {option}: ncu's default, "
                f"{default}, applies unless an ncu config file set another)")
    return f"{name} unknown (not recorded in this report)"


def describe_report(frame) -> str:
    """One line on what a report's rows are: count, kind, and how ncu ran (as far as it is recorded).

    Clock and cache control come from the report's own record (the ncu command line in an
    .ncu-rep, ncu's notes above a CSV table) or from the caller's labels; nothing is assumed.
    """
    notes = [f"{len(frame)} rows", frame.attrs.get("kind", "?")]
    if frame["source"].eq("ncu").any():
        notes.append(_label(frame, "clock_control", "--clock-control", "base"))
        notes.append(_label(frame, "cache_control", "--cache-control", "all"))
    else:
        notes.append("nsys: CUPTI kernel trace at the run's own clocks and cache state")
    return ", ".join(notes)


def graph_profiling_note(frame) -> str | None:
    """The note for a report captured with ncu --graph-profiling graph, naming every row kind
    it inflates (whole-graph rows and plain kernel rows alike), or None."""
    ncu = frame[frame["source"].eq("ncu")]
    if frame.attrs.get("graph_profiling") != "graph" and not ncu["workload"].eq("graph").any():
        return None
    counts = ncu["workload"].fillna("kernel").value_counts()
    kinds = []
    if counts.get("graph", 0):
        kinds.append(f"{counts['graph']} 'graph' row(s), each a whole graph and not a kernel")
    if counts.get("kernel", 0):
        kinds.append(f"{counts['kernel']} 'kernel' row(s), plain launches included")
    return ("note: this report was captured with ncu --graph-profiling graph, which inflates every row "
            f"in it ({'; '.join(kinds)}). On an H200, µs kernels profiled this way took 19-83x as long as "
            "the same kernels profiled per node, their cycles inflated alike. Profile with "
            "--graph-profiling node for per-kernel durations.")


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


def _us(value) -> str:
    import math

    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value / 1e3:,.3f}"


def _num(value, fmt: str) -> str:
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def render_table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """A plain fixed-width table (no colour, safe to pipe)."""
    right = right if right is not None else set(range(1, len(headers)))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def kernel_labels(summary, width: int = 48, by: tuple[str, ...] = ("source", "group")) -> list[str]:
    """The kernel cell of each summary row: the short name within `width`, made distinct
    (` #1`, ` #2`, ...) where several kernels of one `by` group would print alike (a shared
    short name, or names that differ only past the width)."""
    labels = [_short(str(k), width) for k in summary["kernel"]]
    keys = [tuple(str(summary[c].iloc[i]) for c in by if c in summary) for i in range(len(summary))]
    seen: dict[tuple, list[int]] = {}
    for i, label in enumerate(labels):
        seen.setdefault((*keys[i], label), []).append(i)
    for positions in seen.values():
        if len(positions) < 2:
            continue
        ordered = sorted(positions, key=lambda i: str(summary["kernel_full"].iloc[i]))
        for number, i in enumerate(ordered, 1):
            suffix = f" #{number}"
            labels[i] = _short(str(summary["kernel"].iloc[i]), width - len(suffix)) + suffix
    return labels


def format_summary(summary) -> str:
    headers = ["source", "range", "kernel", "n", "median µs", "min µs", "mean µs", "std µs",
               "cv %", "cycles", "clock GHz"]
    rows = []
    for rec, kernel in zip(summary.itertuples(index=False), kernel_labels(summary)):
        rows.append([
            rec.source, _short(str(rec.group), 32), kernel, str(rec.count),
            _us(rec.median_ns), _us(rec.min_ns), _us(rec.mean_ns), _us(rec.std_ns),
            _num(rec.cv * 100 if rec.cv == rec.cv else float("nan"), ".1f"),
            _num(rec.median_cycles, ",.0f"),
            _num(rec.median_clock_hz / 1e9 if rec.median_clock_hz == rec.median_clock_hz else float("nan"), ".3f"),
        ])
    return render_table(headers, rows, right=set(range(3, len(headers))))


def format_compare(joined, name_a: str, name_b: str) -> str:
    headers = ["range", "kernel", f"A µs ({_short(name_a, 20)})", f"B µs ({_short(name_b, 20)})",
               "B/A", "cycles B/A"]
    rows = []
    for rec, kernel in zip(joined.itertuples(index=False), kernel_labels(joined, by=("group",))):
        rows.append([
            _short(str(rec.group), 32), kernel, _us(rec.median_ns_a),
            _us(rec.median_ns_b), _num(rec.ratio, ".3f"), _num(rec.cycles_ratio, ".3f"),
        ])
    return render_table(headers, rows, right=set(range(2, len(headers))))


def _text(value, width: int = 60) -> str:
    """A cell for any value: missing (None/NaN/NA) -> '-'."""
    import pandas as pd

    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "-"
    return str(value)[:width]


def format_config_summary(summary) -> str:
    """The per-config table of `nsprof profile` (from nsprof.profile.config_summary), then the best."""
    headers = ["id", "config", "mode", "median µs", "min µs", "spread %", "reps", "kernels", "cycles",
               "clock GHz", "error"]
    rows = []
    for r in summary.itertuples():
        rows.append([str(r.config_id), _text(getattr(r, "config", ""), 40), _text(r.mode), _us(r.median_ns),
                     _us(r.min_ns), _num(r.spread * 100, ".1f"), str(r.reps), str(r.kernels),
                     _num(r.median_cycles, ",.0f"), _num(r.median_clock_hz / 1e9, ".3f"), _text(r.error, 60)])
    table = render_table(headers, rows, right={0, 3, 4, 5, 6, 7, 8, 9})
    measured = summary[summary["error"].isna() & summary["median_ns"].notna()]
    if len(measured):
        best = measured.loc[measured["median_ns"].idxmin()]
        label = f" ({best['config']})" if "config" in summary else ""
        table += (f"\nbest: config {best['config_id']}{label} {best['mode']}, "
                  f"{best['median_ns'] / 1e3:.3f} µs median")
    return table
