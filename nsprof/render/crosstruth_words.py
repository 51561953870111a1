"""Words for a tune over several truths (nsprof.analysis.crosstruth's findings), shared by the
terminal, the JSON and the report page: whether two truths' winners agree (describe_pair), what
a changed condition picks (describe_probe), which condition explains a disagreement
(describe_cause, describe_explanation, CAUSE_WORDS, CHANGED_TO), the deploy (deploy_words) and
the closing verdict at one shape (describe_verdict).
"""

from __future__ import annotations

from nsprof.analysis import crosstruth

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
