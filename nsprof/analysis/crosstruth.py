"""Cross-truth tuning: do two ground truths pick the same winner, by how much do they
differ when they do not, and which measuring condition explains it. Pure data over ranked tables
(nsprof.analysis.ranking.rank's); nsprof.tune does the measuring, nsprof.render the words.

A truth is a ground truth under named conditions: `ncu` (clocks locked to base, caches flushed
before each replay), `nsys` (the card's own clocks, L2 as the run left it: warm), and the
variants of a backend whose driver honours clock and cache control: `ncu@base-warm` (L2 not
flushed), `ncu@free-cold` (clocks not locked), `ncu@free-warm` (both). Two truths' winners

- agree when they are the same config;
- are tied when each one's winner is inside the other's tie set (neither truth can tell them
  apart: the rule of validate's winner stability);
- are untested when their winners differ and one has no interval (fewer than 2 reps): nothing
  is measured again;
- disagree otherwise, also when only one truth cannot tell them apart (on the H200's 512³ Triton
  matmul nsys held configs 5 and 7 within 0.4%, while ncu put 5 11% behind 7: a real difference
  between the two conditions, not noise). Then each winner is measured under the other truth ("+8.1% under nsys"),
  and the contenders (both winners and both tie sets) are measured again under the first truth
  with each condition in which the two differ set as the second truth has it (the L2 state, the
  clocks, both). A condition explains the disagreement when, with it changed, the first truth's
  winner becomes the second's (agree or tied).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nsprof.analysis.confidence import decide

__all__ = [
    "CrossTruth",
    "Explanation",
    "Pair",
    "Probe",
    "cause",
    "compare",
    "condition_words",
    "contenders",
    "differing",
    "erratic",
    "relative",
    "verdict",
    "winner",
]

AGREE, TIED, DISAGREE, UNKNOWN, UNTESTED = "agree", "tied", "disagree", "unknown", "untested"
# The conditions a truth's rows are labelled with.
CONDITIONS = ("cache_control", "clock_control")


def condition_words(labels: dict[str, str], mode: str | None = None) -> str:
    """The conditions of `labels` in words: "cold L2, clocks locked to base, CUDA-graph kernel nodes"."""
    cache = {"all": "cold L2 (caches flushed)", "none": "warm L2"}.get(
        labels.get("cache_control", ""), "L2 state unknown"
    )
    clock = {"base": "clocks locked to base", "none": "the card's own clocks"}.get(
        labels.get("clock_control", ""), "clocks unknown"
    )
    words = [cache, clock]
    if mode == "graph":
        words.append("in a CUDA graph")
    elif mode == "direct":
        words.append("direct launches")
    return ", ".join(words)


def winner(table, stat: str = "median") -> tuple[int | None, list[int]]:
    """The config fed back under a ranked table and its tie set (the winner alone without a tie;
    empty when the best is untested: fewer than 2 reps give no interval, so no tie set is known)."""
    decision = decide(table, stat)
    if decision.kind == "untested":
        return decision.config_id, []
    return decision.config_id, list(decision.members) or (
        [] if decision.config_id is None else [decision.config_id]
    )


def verdict(winner_a: int | None, ties_a: list[int], winner_b: int | None, ties_b: list[int]) -> str:
    """agree (same winner), tied (each one's winner in the other's tie set), disagree, unknown (one
    has none), untested (different winners, and one has no tie set: fewer than 2 reps, as in
    validate's winner stability)."""
    if winner_a is None or winner_b is None:
        return UNKNOWN
    if winner_a == winner_b:
        return AGREE
    if not ties_a or not ties_b:
        return UNTESTED
    if winner_a in ties_b and winner_b in ties_a:
        return TIED
    return DISAGREE


def relative(table, config_id: int | None, best_id: int | None) -> float:
    """How much slower `config_id` is than `best_id` by `table`'s values (0.081: 8.1% slower); NaN
    where either has no value there."""
    if config_id is None or best_id is None:
        return float("nan")
    measured = table[table["error"].isna() & table["value_ns"].notna()]
    values = dict(zip((int(c) for c in measured["config_id"]), (float(v) for v in measured["value_ns"])))
    if config_id not in values or best_id not in values or not values[best_id]:
        return float("nan")
    return values[config_id] / values[best_id] - 1.0


@dataclass
class Pair:
    """Two truths' winners compared."""

    a: str
    b: str
    winner_a: int | None
    winner_b: int | None
    ties_a: list[int]
    ties_b: list[int]
    verdict: str
    a_under_b: float  # a's winner measured under b, relative to b's winner (NaN: not measured there)
    b_under_a: float


def compare(a: str, table_a, b: str, table_b, stat: str = "median") -> Pair:
    """Truth `a`'s ranking against truth `b`'s."""
    winner_a, ties_a = winner(table_a, stat)
    winner_b, ties_b = winner(table_b, stat)
    return Pair(
        a,
        b,
        winner_a,
        winner_b,
        ties_a,
        ties_b,
        verdict(winner_a, ties_a, winner_b, ties_b),
        relative(table_b, winner_a, winner_b),
        relative(table_a, winner_b, winner_a),
    )


def differing(labels_a: dict[str, str], labels_b: dict[str, str]) -> list[str]:
    """The conditions (CONDITIONS) in which two truths' labels differ."""
    return [c for c in CONDITIONS if labels_a.get(c) != labels_b.get(c)]


def contenders(pair: Pair) -> list[int]:
    """Both winners and both tie sets, each config once, a's first."""
    out: list[int] = []
    for c in [pair.winner_a, *pair.ties_a, pair.winner_b, *pair.ties_b]:
        if c is not None and c not in out:
            out.append(c)
    return out


@dataclass
class Probe:
    """The contenders measured under `truth` (the first truth with `changed` set as the second has them)."""

    truth: str
    changed: list[str]  # CONDITIONS changed
    labels: dict[str, str]
    winner: int | None
    ties: list[int]
    verdict: str  # against the second truth's winner (agree | tied: it picks the second's winner)
    table: object = None  # its ranked table


@dataclass
class Explanation:
    """Why `pair.a` and `pair.b` disagree: `probed` (a truth of a's backend) under each changed condition."""

    pair: Pair
    probed: object  # the truth whose conditions were changed (a or b: nsprof.settings.Truth)
    target: str  # the other one, whose winner the probes are judged against
    contenders: list[int]
    probes: list[Probe] = field(default_factory=list)
    cause: str = "not probed"  # one of CAUSES' keys
    reason: str = ""  # why nothing was probed, when so
    warnings: list[str] = field(default_factory=list)  # probes whose numbers look erratic (see erratic())


@dataclass
class CrossTruth:
    """What tune --truth A,B found at one shape: each pair of truths compared (Pair, in --truth
    order), and for each pair that disagrees, what explains it (Explanation)."""

    pairs: list[Pair] = field(default_factory=list)
    explanations: list[Explanation] = field(default_factory=list)


CAUSES = ("cache_control", "clock_control", "either", "both", "neither", "not probed", "not measured")


def matches(probe: Probe) -> bool | None:
    """Whether the probe picks the target's winner (None: it measured nothing, or cannot tell: untested)."""
    if probe.verdict in (UNKNOWN, UNTESTED):
        return None
    return probe.verdict in (AGREE, TIED)


def cause(probes: list[Probe], other: list[str] | None = None) -> str:
    """Which condition explains a disagreement, from the probes (each with its `changed` conditions; `other`:
    the conditions whose change is the other truth itself, not measured again: it picks its own winner):
    one condition alone (its name), either one alone (`either`), only the two together (`both`),
    none (`neither`), or `not measured` when the probes measured nothing, or where a condition whose
    probe could not tell might explain it alone (no `both` or `neither` can be said then)."""
    single = {p.changed[0]: matches(p) for p in probes if len(p.changed) == 1}
    together = [matches(p) for p in probes if len(p.changed) > 1]
    if other and len(other) == 1:
        single[other[0]] = True
    elif other:
        together.append(True)
    alone = [c for c, m in single.items() if m]
    if len(alone) > 1:
        return "either"
    if len(alone) == 1:
        return alone[0]
    if not probes or None in single.values():
        return "not measured"
    if any(together):
        return "both"
    return "not measured" if None in together else "neither"


# ncu with --clock-control none once read µs kernels 35-80x too long on an H200. A probe whose
# median duration over the contenders is this many times the other truth's is flagged.
ERRATIC_RATIO = 3.0


def erratic(probe_table, target_table, limit: float = ERRATIC_RATIO) -> float | None:
    """The median ratio of a probe's values to the target truth's over the configs both measured,
    when it is above `limit` (the probe's numbers look erratic); None otherwise."""
    import statistics

    def values(table) -> dict[int, float]:
        ok = table[table["error"].isna() & table["value_ns"].notna()]
        return dict(zip((int(c) for c in ok["config_id"]), (float(v) for v in ok["value_ns"])))

    mine, theirs = values(probe_table), values(target_table)
    ratios = [mine[c] / theirs[c] for c in mine if c in theirs and theirs[c] > 0]
    if not ratios:
        return None
    ratio = statistics.median(ratios)
    return ratio if ratio > limit else None
