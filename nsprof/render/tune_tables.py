"""What `nsprof tune` prints: the ranked table of one truth (format_ranked) and the lines under
it (ranked_lines: the best, describe_decision, describe_interval, the notes), its tie column
(tie_cell), the per-shape tables of a target with shapes (format_shapes, format_tune_shapes,
shapes_lines, tie_state), the whole output over every truth (format_tune, cross_lines), and the
line of a tuner's own pick against the ground truth (describe_pick).

Each takes an nsprof.analysis.tune_report ranking or report and returns text; nothing here
measures or prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from nsprof.analysis.confidence import LEVEL, METHOD
from nsprof.analysis.stats import is_missing
from nsprof.errors import printable
from nsprof.render.configs import config_cell, config_of, constant_line, split_configs
from nsprof.render.crosstruth_words import describe_explanation, describe_pair, describe_verdict
from nsprof.render.text import (
    num,
    render_table,
    text,
    us,
)
from nsprof.space import config_label


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
    """One sentence: the winner, the tie and which member is picked, or why neither can be said (a pick
    is fed back only where the notes say so: not for a truth other than --deploy, nor with --no-feed-back)."""
    decision = result.decision
    stat = result.stat
    if decision.config_id is None:
        return "no config was measured"
    if decision.kind == "untested":
        return (
            f"config {decision.config_id} has the lowest {stat}, untested against the noise: "
            "it has fewer than 2 reps, so no interval"
        )
    half = f"±{decision.half_width * 100:.1f}%"
    if decision.kind == "tie":
        members = ", ".join(str(c) for c in decision.members)
        return (
            f"these {len(decision.members)} configs are indistinguishable here ({half}): {members} "
            f"(none is told slower: no one's interval lies wholly above the best's); the pick is "
            f"{decision.config_id}, by {decision.rule}"
        )
    if decision.second is None:
        return f"config {decision.config_id} is the only config measured"
    # the margin is the gap between the two intervals, not between the medians
    apart = (
        ""
        if decision.margin != decision.margin
        else f", {abs(decision.margin) * 100:.1f}% between the intervals"
    )
    return (
        f"config {decision.config_id} is the winner: its interval ({half}) does not overlap "
        f"#2's (config {decision.second}{apart})"
    )


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
                config_cell(config_of(configs, r.config_id), r.config, varying),
                us(r.value_ns),
                us(getattr(r, "ci_low_ns", float("nan"))),
                us(getattr(r, "ci_high_ns", float("nan"))),
                num(getattr(r, "spread", float("nan")) * 100, ".1f"),
                num(getattr(r, "median_cycles", float("nan")), ",.0f"),
                num(getattr(r, "median_clock_hz", float("nan")) / 1e9, ".3f"),
                f"+{r.vs_best * 100:.1f}%" if math.isfinite(r.vs_best) else "-",  # none behind a 0 ns best
                tie_cell(tie, getattr(r, "tied_with_best", False)),
                text(r.error, 50),
            ]
        )
    table = render_table(headers, rows, right={0, 1, 3, 4, 5, 6, 7, 8, 9})
    lines = [printable(f"ranked by {result.label}"), *constant_line(constant), table]
    return "\n".join(lines + ranked_lines(result, configs))


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
        lines.append(f"best: config {best} ({config_label(config_of(configs, best))})")
        lines.append(f"note: {describe_decision(result)}")
        lines.append(f"note: {describe_interval(result)}")
    return lines + [f"note: {printable(note)}" for note in result.notes]


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
        config = None if best is None else config_of(configs, best)
        measured = table[table["rank"].notna()]
        value = second = behind = "-"
        if best is not None:
            value = us(float(measured[measured["config_id"] == best]["value_ns"].iloc[0]))
            others = measured[measured["config_id"] != best]
            if len(others):
                second = str(int(others.iloc[0]["config_id"]))
                first = float(measured.iloc[0]["value_ns"])
                if first > 0:  # a report's 0 ns winner leaves no ratio to show
                    behind = f"+{(float(others.iloc[0]['value_ns']) / first - 1) * 100:.1f}%"
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
    labels = [(shaped.truths[truth] if truth else shaped.ranking).label for shaped in shapes]
    if len(set(labels)) == 1:
        lines = [printable(f"ranked by {labels[0]}, per shape")]
    else:  # adaptive reps at some shapes only: each its own
        lines = [
            "ranked per shape by:",
            *(printable(f"  shape {s.shape}: {label}") for s, label in zip(shapes, labels)),
        ]
    lines += constant_line(constant)
    return "\n".join([*lines, render_table(headers, rows, right={0, 2, 4, 5, 6})])


def _shape_notes(shapes, rankings) -> list[str]:
    """The notes of one truth's rankings (`rankings`, of `shapes` in order): a note all shapes share once, the
    others per shape."""
    notes = [ranking.notes for ranking in rankings]
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
    compare (with several), the intervals and the notes (with several truths, what all say once, the rest
    named by the truth that says it)."""
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
    said = {truth: _truth_notes(shapes, truth) for truth in _truths_shown(report)}
    every = [line for line in next(iter(said.values())) if all(line in other for other in said.values())]
    lines += [f"note: {printable(line)}" for line in every]  # what every truth says, once
    for truth, of_truth in said.items():  # the rest named by the truth that says it
        lines += [f"note: {truth}: {printable(line)}" for line in of_truth if line not in every]
    lines.append("(--json has every shape's full ranking)")
    return lines


def _truth_notes(shapes, truth) -> list[str]:
    """One truth's intervals and notes over the shapes that ranked under it (None: the deploy truth)."""
    of_truth = [(s, s.ranking if truth is None else s.truths.get(truth)) for s in shapes]
    of_truth = [(s, ranking) for s, ranking in of_truth if ranking is not None]
    intervals = sorted({describe_interval(ranking) for _, ranking in of_truth})
    return intervals + _shape_notes([s for s, _ in of_truth], [ranking for _, ranking in of_truth])


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
