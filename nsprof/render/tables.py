"""The tables nsprof prints: analyze's summary and comparison, profile's per-config table, tune's
ranking, validate's per-config values, agreement and verdict, and the results store's runs.

Each takes what nsprof.analysis (or the orchestration above it) computed and returns text;
nothing here measures or prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING

from nsprof.analysis import crosstruth
from nsprof.analysis.agreement import FLOOR_MARGIN, floor_map, verdicts, wide
from nsprof.analysis.confidence import LEVEL, METHOD
from nsprof.analysis.stats import is_missing
from nsprof.analysis.summary import compare_overall, one_side_ranges
from nsprof.render.text import (
    UNIT_LABELS,
    apart,
    drop_empty_columns,
    duration,
    middle,
    num,
    pct,
    render_markdown,
    render_table,
    short,
    text,
    us,
    yes_no,
)
from nsprof.schema import column_list
from nsprof.space import config_label

if TYPE_CHECKING:
    import pandas as pd


# --------------------------------------------------------------------------- nsprof analyze

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


def kernel_labels(
    summary, width: int | None = NAME_WIDTH, by: tuple[str, ...] = ("source",), names: str = "short"
) -> list[str]:
    """The kernel cell of each summary row: the short name (`names="demangled"`: the full one),
    numbered ` #1`, ` #2`, ... where kernels of one `by` group (a report) share a short name.
    A kernel's number is its full name's, counted in the order the rows come, so that it is the
    same in the short and the demangled view, in every range, and with `width` None (whole
    names). Within `width`, a long name is cut so that what tells it from the names it shares
    a short name with (or that would cut alike) stays (render.text.apart); kernels that would
    still print alike are numbered the same way."""
    return _kernel_cells(summary, width, by, names)[0]


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


# --------------------------------------------------------------------------- nsprof profile, tune, results


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
            best = rows_of_shape.loc[rows_of_shape["median_ns"].idxmin()]
            label = f" ({best['config']})" if "config" in summary else ""
            table += (
                f"\nbest at shape {int(shape)}: config {best['config_id']}{label} {best['mode']}, "
                f"{best['median_ns'] / 1e3:.3f} µs median"
            )
    elif len(measured):
        best = measured.loc[measured["median_ns"].idxmin()]
        label = f" ({best['config']})" if "config" in summary else ""
        table += (
            f"\nbest: config {best['config_id']}{label} {best['mode']}, "
            f"{best['median_ns'] / 1e3:.3f} µs median"
        )
    return table


def describe_pick(pick: dict, table) -> str:
    """One line: the tuner's own choice, and where the ground truth ranks it (`table`: analysis.ranking.rank's)."""
    head = (
        f"{pick['tuner']} ({pick['timer']}) picks config {pick['config_id']} ({config_label(pick['config'])})"
    )
    row = table[table["config_id"] == pick["config_id"]]
    if pick["config_id"] is None or row.empty or is_missing(row.iloc[0]["rank"]):
        return head + "; the ground truth has no measurement of it"
    rank, vs_best = int(row.iloc[0]["rank"]), float(row.iloc[0]["vs_best"])
    if rank == 1:
        return head + ": the ground truth's best too"
    return head + f": ground truth ranks it #{rank}, {vs_best * 100:+.1f}% vs the best"


def _coverages(table) -> list[float]:
    measured = table[table["rank"].notna()]
    return sorted({round(float(c), 6) for c in measured["ci_coverage"] if c == c})


def describe_interval(result) -> str:
    """One line: how each config's interval was made, at which level asked and achieved."""
    coverages = _coverages(result.table)
    if not coverages:
        return f"intervals: none (fewer than 2 reps per config; {METHOD}s need 2 or more)"
    achieved = (
        f"{coverages[0] * 100:.1f}%"
        if len(coverages) == 1
        else f"{coverages[0] * 100:.1f}-{coverages[-1] * 100:.1f}%"
    )
    line = f"intervals: {METHOD}, {LEVEL * 100:.0f}% asked, {achieved} achieved"
    if coverages[0] < LEVEL:
        line += " (too few reps to reach it: such a config's interval is its [min, max])"
    if result.stat != "median":
        line += f"; ranked by the {result.stat}, but the interval and the tie test are the median's"
    return line


def describe_decision(result) -> str:
    """One sentence: the winner, the tie and which member is fed back, or why neither can be said."""
    decision = result.decision
    stat = result.stat
    if decision.config_id is None:
        return "no config was measured"
    if decision.kind == "untested":
        return (
            f"config {decision.config_id} has the lowest {stat}, untested against the noise: "
            "there are too few reps per config for an interval"
        )
    half = f"±{decision.half_width * 100:.1f}%"
    if decision.kind == "tie":
        members = ", ".join(str(c) for c in decision.members)
        return (
            f"these {len(decision.members)} configs are indistinguishable here ({half}): {members} "
            f"(each one's interval overlaps the best's); feeding back {decision.config_id}, "
            f"{decision.rule}"
        )
    if decision.second is None:
        return f"config {decision.config_id} is the only config measured"
    apart = "" if decision.margin != decision.margin else f", {abs(decision.margin) * 100:.1f}% apart"
    return (
        f"config {decision.config_id} is the winner: its interval ({half}) does not overlap "
        f"#2's (config {decision.second}{apart})"
    )


def split_configs(configs: Sequence) -> tuple[dict, list | None]:
    """(the keys every config has with one same value, the other keys in order of first
    appearance) of a space's dict configs; ({}, None) when some config is not a dict, when there
    are fewer than 2, or when no key is the same in all or none differs (then each config is
    shown whole)."""
    if len(configs) < 2 or not all(isinstance(c, dict) for c in configs):
        return {}, None
    keys = list(dict.fromkeys(k for c in configs for k in c))
    constant = {k: configs[0][k] for k in keys if all(k in c and c[k] == configs[0][k] for c in configs)}
    varying = [k for k in keys if k not in constant]
    return (constant, varying) if constant and varying else ({}, None)


def constant_line(constant: dict) -> list[str]:
    """The line above a table whose config cells leave out the keys all configs share."""
    return [f"all configs: {', '.join(f'{k}={v}' for k, v in constant.items())}"] if constant else []


def config_cell(config, label, varying: list | None) -> str:
    """A config's cell, never cut: the keys that vary across the space (`varying`: split_configs),
    else its label (the table's `config`) whole."""
    if varying is None or not isinstance(config, dict) or label != config_label(config):
        return "-" if is_missing(label) else str(label)
    return ",".join(f"{k}={config[k]}" for k in varying if k in config) or "-"


def format_ranked(result, configs: Sequence) -> str:
    """`nsprof tune`'s output: how the numbers were taken, the ranked table, the best, the
    interval and the decision (winner or tie), the notes (`result`: an
    nsprof.analysis.tune_report.Ranking of a space whose configs are `configs`)."""
    headers = [
        "rank",
        "id",
        "config",
        "µs",
        "low µs",
        "high µs",
        "spread %",
        "cycles",
        "clock GHz",
        "vs best",
        "tie",
        "error",
    ]
    tie = result.decision.kind == "tie"
    constant, varying = split_configs(configs)
    rows = []
    for r in result.table.itertuples():
        rows.append(
            [
                text(r.rank),
                str(r.config_id),
                config_cell(_config_of(configs, r.config_id), r.config, varying),
                us(r.value_ns),
                us(getattr(r, "ci_low_ns", float("nan"))),
                us(getattr(r, "ci_high_ns", float("nan"))),
                num(getattr(r, "spread", float("nan")) * 100, ".1f"),
                num(getattr(r, "median_cycles", float("nan")), ",.0f"),
                num(getattr(r, "median_clock_hz", float("nan")) / 1e9, ".3f"),
                "-" if r.vs_best != r.vs_best else f"+{r.vs_best * 100:.1f}%",
                tie_cell(tie, getattr(r, "tied_with_best", False)),
                text(r.error, 50),
            ]
        )
    table = render_table(headers, rows, right={0, 1, 3, 4, 5, 6, 7, 8, 9})
    lines = [f"ranked by {result.label}", *constant_line(constant), table]
    return "\n".join(lines + ranked_lines(result, configs))


def _config_of(configs: Sequence, config_id):
    """The config `config_id` of a space, None where the space has no such config."""
    i = int(config_id)
    return configs[i] if 0 <= i < len(configs) else None


def tie_cell(tie: bool, tied_with_best) -> str:
    """A config's cell in the ranked table's tie column: "tie" for a member of a tie (`tie`: the
    decision is one), blank otherwise (the best alone is tied only with itself)."""
    return "tie" if tie and not is_missing(tied_with_best) and bool(tied_with_best) else ""


def ranked_lines(result, configs: Sequence) -> list[str]:
    """The lines format_ranked prints under its table: the best, the decision, the interval, the
    notes (the report page shows the same)."""
    lines = []
    best = result.best_config_id
    if best is not None:
        lines.append(f"best: config {best} ({config_label(_config_of(configs, best))})")
        lines.append(f"note: {describe_decision(result)}")
        lines.append(f"note: {describe_interval(result)}")
    return lines + [f"note: {note}" for note in result.notes]


CHANGED_TO = {
    ("cache_control", "none"): "warm L2",
    ("cache_control", "all"): "cold L2",
    ("clock_control", "none"): "the card's own clocks",
    ("clock_control", "base"): "clocks locked to base",
}
CAUSE_WORDS = {
    "cache_control": "the L2 state explains it",
    "clock_control": "the clocks explain it",
    "either": "the L2 state alone explains it, and so do the clocks alone",
    "both": "only the L2 state and the clocks together explain it",
    "neither": (
        "neither the L2 state nor the clocks explains it: the tools differ in more than these "
        "conditions (launch path, the profiler's own overhead), or the gap is noise"
    ),
    "not measured": "the contenders could not be measured again, so nothing explains it yet",
}


def _pct(x: float) -> str:
    return "not measured there" if x != x else f"{x * 100:+.1f}%"


def describe_pair(pair) -> str:
    """One line: whether two truths' winners agree (an nsprof.analysis.crosstruth.Pair), and when
    they do not, each winner measured under the other truth."""
    a, b = pair.a, pair.b
    if pair.verdict == crosstruth.UNKNOWN:
        missing = a if pair.winner_a is None else b
        return f"{a} and {b} cannot be compared: {missing} measured no config"
    if pair.verdict == crosstruth.AGREE:
        return f"{a} and {b} agree: both pick config {pair.winner_a}"
    if pair.verdict == crosstruth.UNTESTED:
        return (
            f"{a} and {b} cannot be told apart or against each other: {a} picks config {pair.winner_a}, "
            f"{b} config {pair.winner_b}, with too few reps for an interval (--reps 2 or more)"
        )
    if pair.verdict == crosstruth.TIED:
        return (
            f"{a} and {b} are tied: {a} picks config {pair.winner_a}, {b} config {pair.winner_b}, and each "
            f"is inside the other's tie set (neither can tell them apart)"
        )
    line = (
        f"{a} and {b} disagree: {a} picks config {pair.winner_a}, {b} config {pair.winner_b}; "
        f"{a}'s winner is {_pct(pair.a_under_b)} under {b}, {b}'s winner {_pct(pair.b_under_a)} under {a}"
    )
    for x, y, won, ties in ((a, b, pair.winner_a, pair.ties_b), (b, a, pair.winner_b, pair.ties_a)):
        if won in ties:  # one-sided: y cannot tell x's winner from its own, x can
            line += f"; {x}'s winner is tied for best under {y}, so it is the safe pick under both"
    return line


def describe_probe(probe, target: str, target_winner) -> str:
    """One clause: what the probed truth picks with `probe.changed` set as `target` has it."""
    changed = " and ".join(CHANGED_TO.get((c, probe.labels.get(c)), c) for c in probe.changed)
    head = f"with {changed} ({probe.truth})"
    if probe.winner is None:
        return f"{head} nothing was measured"
    if probe.verdict == crosstruth.AGREE:
        return f"{head} it picks config {probe.winner}, {target}'s winner"
    if probe.verdict == crosstruth.TIED:
        return f"{head} it picks config {probe.winner}, tied with {target}'s winner {target_winner}"
    return f"{head} it picks config {probe.winner}, not {target}'s {target_winner}"


def describe_cause(explanation) -> str:
    """Which condition explains a disagreement, in words."""
    if explanation.cause == "not probed":
        return f"not probed: {explanation.reason}"
    return CAUSE_WORDS[explanation.cause]


def describe_explanation(explanation) -> str:
    """One line: the contenders measured again, what each changed condition picks, and the cause."""
    pair = explanation.pair
    if explanation.cause == "not probed":
        return f"{pair.a} vs {pair.b}: {describe_cause(explanation)}"
    target_winner = pair.winner_b if explanation.target == pair.b else pair.winner_a
    probed = explanation.probed.backend
    clauses = "; ".join(describe_probe(p, explanation.target, target_winner) for p in explanation.probes)
    warnings = "".join(f" (warning: {w})" for w in explanation.warnings)
    return (
        f"contenders {', '.join(str(c) for c in explanation.contenders)} measured again under {probed}: "
        f"{clauses}. So {describe_cause(explanation)}{warnings}"
    )


def deploy_words(shape) -> str:
    """The deploy condition and its winner, in words (`shape`: an nsprof.analysis.tune_report.ShapeReport)."""
    labels = shape.ranking.labels
    words = crosstruth.condition_words(labels, labels.get("mode")) if labels else ""
    best = shape.ranking.best_config_id
    head = f"deploy {shape.deploy}" + (f" ({words})" if words else "")
    return head + (
        ": no config measured" if best is None else f": its winner, config {best}, is the one fed back"
    )


def describe_verdict(shape) -> str:
    """The closing line of a tune over several truths at one shape (a ShapeReport): agreement, the
    numbers, the cause, the deploy."""
    cross = shape.cross
    parts = []
    explained = {(e.pair.a, e.pair.b): e for e in (cross.explanations if cross else [])}
    for pair in cross.pairs if cross else []:
        if pair.verdict == crosstruth.DISAGREE:
            part = (
                f"{pair.a} and {pair.b} disagree ({pair.a}'s winner {_pct(pair.a_under_b)} under {pair.b}, "
                f"{pair.b}'s {_pct(pair.b_under_a)} under {pair.a})"
            )
            if (pair.a, pair.b) in explained:
                part += f": {describe_cause(explained[(pair.a, pair.b)])}"
        elif pair.verdict == crosstruth.TIED:
            part = f"{pair.a} and {pair.b} are tied ({pair.winner_a} and {pair.winner_b})"
        elif pair.verdict == crosstruth.AGREE:
            part = f"{pair.a} and {pair.b} agree on config {pair.winner_a}"
        elif pair.verdict == crosstruth.UNTESTED:
            part = f"{pair.a} and {pair.b} are untested ({pair.winner_a} and {pair.winner_b}: too few reps)"
        else:
            part = f"{pair.a} and {pair.b} cannot be compared"
        parts.append(part)
    return "verdict: " + "; ".join(parts + [deploy_words(shape)])


def tie_state(result) -> str:
    """A ranking's decision in a table cell: winner, tie (n), untested, or none measured."""
    decision = result.decision
    if decision.config_id is None:
        return "nothing measured"
    if decision.kind == "tie":
        return f"tie ({len(decision.members)}: {','.join(str(c) for c in decision.members)})"
    return decision.kind


def format_shapes(shapes, configs: Sequence, truth: str | None = None) -> str:
    """One compact table over a target's shapes (`shapes`: a TuneReport's ShapeReports; `truth`:
    the truth whose rankings it shows, None: the deploy truth's): a row per shape with its winner,
    the winner's time, the runner-up and how far behind it is, and the tie state
    (nsprof.analysis.confidence's decision)."""
    headers = ["#", "shape", "winner", "config", "µs", "runner-up", "vs winner", "decision"]
    constant, varying = split_configs(configs)
    rows = []
    for shaped in shapes:
        result = shaped.truths[truth] if truth else shaped.ranking
        table, decision = result.table, result.decision
        best = decision.config_id
        config = None if best is None else _config_of(configs, best)
        measured = table[table["rank"].notna()]
        value = second = behind = "-"
        if best is not None:
            value = us(float(measured[measured["config_id"] == best]["value_ns"].iloc[0]))
            others = measured[measured["config_id"] != best]
            if len(others):
                second = str(int(others.iloc[0]["config_id"]))
                behind = f"+{(float(others.iloc[0]['value_ns']) / float(measured.iloc[0]['value_ns']) - 1) * 100:.1f}%"
        rows.append(
            [
                str(shaped.shape),
                config_label(shaped.shape_value),
                "-" if best is None else str(best),
                "" if best is None else config_cell(config, config_label(config), varying),
                value,
                second,
                behind,
                tie_state(result),
            ]
        )
    label = (shapes[0].truths[truth] if truth else shapes[0].ranking).label
    lines = [f"ranked by {label}, per shape", *constant_line(constant)]
    return "\n".join([*lines, render_table(headers, rows, right={0, 2, 4, 5, 6})])


def _shape_notes(shapes) -> list[str]:
    """The notes of every shape's ranking: a note all shapes share once, the others per shape."""
    notes = [shaped.ranking.notes for shaped in shapes]
    every = [note for note in notes[0] if all(note in n for n in notes)]
    lines = list(every)
    for shaped, of_shape in zip(shapes, notes):
        lines += [f"shape {shaped.shape}: {note}" for note in of_shape if note not in every]
    return lines


def _truths_shown(report) -> list:
    """The truths whose rankings a report's per-shape tables show: every one, or [None] (the
    deploy truth's alone) where the first shape has one."""
    truths = list(report.shapes[0].truths)
    return truths if len(truths) > 1 else [None]


def format_tune_shapes(report) -> str:
    """`nsprof tune`'s output for a target with shapes: one compact table per truth (format_shapes),
    per shape how the truths' winners compare (with several), then the notes."""
    blocks = [format_shapes(report.shapes, report.configs, truth) for truth in _truths_shown(report)]
    return "\n\n".join(blocks) + "\n" + "\n".join(shapes_lines(report))


def shapes_lines(report) -> list[str]:
    """The lines format_tune_shapes prints under its tables: per shape how the truths' winners
    compare (with several), the intervals, the notes."""
    shapes = report.shapes
    lines = []
    if len(_truths_shown(report)) > 1:
        for shaped in shapes:
            lines += [
                f"cross-truth, shape {shaped.shape}: {describe_pair(pair)}" for pair in shaped.cross.pairs
            ]
            lines += [
                f"cross-truth, shape {shaped.shape}: {describe_explanation(e)}"
                for e in shaped.cross.explanations
            ]
    intervals = sorted({describe_interval(s.ranking) for s in shapes})
    lines += [f"note: {line}" for line in intervals]
    lines += [f"note: {note}" for note in _shape_notes(shapes)]
    lines.append("(--json has every shape's full ranking)")
    return lines


def format_tune(report) -> str:
    """`nsprof tune`'s output (`report`: an nsprof.analysis.tune_report.TuneReport): one ranked
    table per truth (format_ranked), then, with several truths, how their winners compare, what
    explains a disagreement, and the closing verdict. A target with shapes: format_tune_shapes."""
    if report.shaped:
        return format_tune_shapes(report)
    shape = report.shapes[0]
    if len(shape.truths) == 1:
        return format_ranked(shape.ranking, report.configs)
    blocks = [format_ranked(ranked, report.configs) for ranked in shape.truths.values()]
    return "\n\n".join(blocks) + "\n\n" + "\n".join(cross_lines(shape))


def cross_lines(shape) -> list[str]:
    """The closing lines of a tune over several truths at one shape (a ShapeReport): how their
    winners compare, what explains a disagreement, the verdict."""
    lines = [describe_pair(pair) for pair in shape.cross.pairs]
    lines += [describe_explanation(e) for e in shape.cross.explanations]
    return [f"cross-truth: {line}" for line in lines] + [describe_verdict(shape)]


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
    import json

    if is_missing(settings_json) or not settings_json:
        return ""
    try:
        settings = json.loads(str(settings_json))
    except ValueError:
        return ""
    return str(settings.get("deploy") or "") if isinstance(settings, dict) else ""


# --------------------------------------------------------------------------- nsprof validate


def _winners_by_truth(floors) -> dict[str, str]:
    if floors is None or isinstance(floors, Mapping) or "winners" not in floors:
        return {}
    out: dict[str, str] = {}
    for truth, winners in zip(floors["truth"], floors["winners"]):
        if isinstance(winners, str):
            out.setdefault(str(truth), winners)
    return out


def _ids(ids) -> str:
    return "{" + ", ".join(str(c) for c in ids) + "}"


def describe_winners(row: Mapping) -> str:
    """Words for one floor row's winner stability (analysis.agreement.winner_stability's columns)."""
    kind, a, b = row.get("winners"), row.get("winner"), row.get("winner_against")
    side = "the repeat" if row.get("against") == "repeat" else str(row.get("against"))
    if not isinstance(kind, str):
        return "-"
    if kind == "same":
        return f"same winner: config {a}"
    tie_a, tie_b = row.get("tie_set"), row.get("tie_set_against")
    if kind == "tied":
        return (
            f"tied: config {a} vs {b} in {side}, each inside the other's tie set "
            f"({_ids(tie_a)} / {_ids(tie_b)})"
        )
    if kind == "untested":
        return f"different: config {a} vs {b} in {side}, no interval to test a tie (fewer than 2 reps)"
    outside = []
    if b not in (tie_a or []):
        outside.append(f"{b} outside this run's tie set {_ids(tie_a or [])}")
    if a not in (tie_b or []):
        outside.append(f"{a} outside {side}'s tie set {_ids(tie_b or [])}")
    return f"different: config {a} vs {b} in {side}; " + "; ".join(outside)


def format_floors(floors) -> str:
    """Each truth's own floor (τ against its repeat, or its sibling mode), how far per-config
    values moved, and whether the two sides' winners were the same config, tied or neither."""
    if floors is None or isinstance(floors, Mapping) or not len(floors):
        return ""
    headers = ["truth", "against", "n", "floor τ", "median change %", "max change %", "winners"]
    rows = []
    for r in floors.to_dict("records"):
        rows.append(
            [
                str(r["truth"]),
                str(r["against"]),
                str(r["n"]),
                num(r["kendall_tau"], ".3f"),
                num(None if is_missing(r["median_rel_change"]) else r["median_rel_change"] * 100, ".1f"),
                num(None if is_missing(r["max_rel_change"]) else r["max_rel_change"] * 100, ".1f"),
                describe_winners(r),
            ]
        )
    return render_table(headers, rows, right={2, 3, 4, 5})


# The columns of a matched-conditions table (validate), in the terminal and on the page.
MATCHED_HEADERS = (
    "timer",
    "L2",
    "mode",
    "matched truth",
    "τ",
    "floor τ",
    "at floor",
    "unmatched truth",
    "τ",
    "floor τ",
    "at floor",
)


def format_matched(matched) -> str:
    """Each timer against the truth taken under its own conditions (clocks free, its L2 state)
    beside that truth's floor, and against the unmatched truth beside its floor
    (analysis.agreement.matched_agreement's table); then, per matched truth, the best timer."""
    if matched is None or not len(matched):
        return ""
    headers = list(MATCHED_HEADERS)
    rows = []
    for r in matched.to_dict("records"):
        rows.append(
            [
                str(r["timer"]),
                text(r["l2"]),
                text(r["mode"]),
                text(r["matched_truth"]),
                num(r["matched_tau"], ".3f"),
                num(r["matched_floor"], ".3f"),
                yes_no(r["matched_at_floor"]),
                text(r["unmatched_truth"]),
                num(r["unmatched_tau"], ".3f"),
                num(r["unmatched_floor"], ".3f"),
                yes_no(r["unmatched_at_floor"]),
            ]
        )
    lines = [
        "matched conditions: each timer against the truth run with clocks free (--clock-control none), as the "
        "timers run, and in the timer's own L2 state (cold: --cache-control all, warm: --cache-control none), "
        "beside the unmatched truth (the tool's defaults: base clocks, L2 flushed)",
        render_table(headers, rows, right={4, 5, 8, 9}),
    ]
    for truth, group in matched.groupby("matched_truth", sort=False):
        scored = group[group["matched_tau"].notna()]
        if scored.empty:
            continue
        best = scored.loc[scored["matched_tau"].idxmax()]
        line = f"vs {truth}: best {best['timer']} τ {best['matched_tau']:.2f}"
        if not is_missing(best["matched_floor"]):
            reach = "reaches" if bool(best["matched_at_floor"]) else "stays below"
            line += f", {reach} that truth's floor τ {best['matched_floor']:.2f}"
        if not is_missing(best["unmatched_tau"]):
            line += f" (against {best['unmatched_truth']}: τ {best['unmatched_tau']:.2f}"
            line += "" if is_missing(best["unmatched_floor"]) else f", floor {best['unmatched_floor']:.2f}"
            line += ")"
        lines.append(line)
    return "\n".join(lines)


def format_conditions(conditions: Mapping[str, str]) -> str:
    """How each number was taken: one line per timer and truth."""
    if not conditions:
        return ""
    width = max(len(m) for m in conditions)
    return "\n".join(
        ["how each was taken:"] + [f"  {m:<{width}}  {words}" for m, words in conditions.items()]
    )


def format_agreement(df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None) -> str:
    """A plain fixed-width table, one row per timer × truth; `floor τ` (and `floor winners`:
    same | tied | different between the floor's two runs) when floors are given."""
    fmap = floor_map(floors)
    winners = _winners_by_truth(floors)
    k = df.attrs.get("k", 3)
    headers = ["timer", "truth", "n", "bias ×", "τ", "ρ", "same best", "regret %", f"top-{k}"]
    if fmap:
        headers.append("floor τ")
    if winners:
        headers.append("floor winners")
    rows = []
    for rec in df.itertuples(index=False):
        row = [
            str(rec.timer),
            str(rec.truth),
            str(rec.n),
            num(rec.bias, ".3f"),
            num(rec.kendall_tau, ".3f"),
            num(rec.spearman_rho, ".3f"),
            yes_no(rec.same_best),
            num(None if is_missing(rec.regret) else rec.regret * 100, ".1f"),
            yes_no(rec.top_k_hit),
        ]
        if fmap:
            row.append(num(fmap.get(str(rec.truth)), ".3f"))
        if winners:
            row.append(winners.get(str(rec.truth), "-"))
        rows.append(row)
    return render_table(
        headers,
        rows,
        right=set(range(2, len(headers))) - {len(headers) - 1} if winners else set(range(2, len(headers))),
    )


def format_per_config(
    per_config: pd.DataFrame, configs: list[dict] | None = None, methods: Sequence[str] | None = None
) -> str:
    """Configs as rows, methods as columns, µs with 3 decimals; `configs[config_id]` labels a row."""
    table = wide(per_config, methods)
    headers = ["id"] + (["config"] if configs is not None else []) + [f"{m} µs" for m in table.columns]
    rows = []
    for cid, values in table.iterrows():
        row = [str(cid)]
        if configs is not None:
            i = int(cid)
            row.append(config_label(configs[i]) if 0 <= i < len(configs) else "?")
        row += [num(None if is_missing(v) else v / 1e3, ",.3f") for v in values]
        rows.append(row)
    first_number = 2 if configs is not None else 1
    return render_table(headers, rows, right={0, *range(first_number, len(headers))})


def format_verdict(
    agreement_df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None
) -> str:
    """One line per truth: which timer tracks it best, its τ and regret, and the truth's own floor
    (the words for analysis.agreement.verdicts)."""
    lines = []
    for v in verdicts(agreement_df, floors):
        if v.timer is None:
            lines.append(f"vs {v.truth}: no timer could be compared (fewer than 2 configs measured by both).")
            continue
        head = (
            f"vs {v.truth}: {v.timer} tracks best"
            if v.reliable
            else f"vs {v.truth}: no timer ranks configs reliably; best is {v.timer}"
        )
        stats = f"τ {v.kendall_tau:.2f}, regret {pct(v.regret)}"
        if v.floor is None:
            lines.append(f"{head} ({stats}).")
            continue
        what = "own repeatability" if v.against == "repeat" else f"agreement with {v.against}"
        stats += f"; {v.truth}'s {what} τ {v.floor:.2f}"
        if not v.near_floor:
            lines.append(f"{head} ({stats}).")
        elif v.near_floor == (v.timer,):
            lines.append(f"{head} ({stats}), as good as the ground truth's own repeatability.")
        else:
            lines.append(
                f"{head} ({stats}); {', '.join(v.near_floor)} within {FLOOR_MARGIN:.2f} of that τ: "
                "as good as the ground truth's own repeatability."
            )
    return "\n".join(lines)
