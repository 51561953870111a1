"""How sure a ranking is: a distribution-free interval for each config's median, and which
configs are tied with the best.

The interval is the classical order-statistic (binomial) interval for the median: of n reps
sorted x(1) ≤ … ≤ x(n), [x(k), x(n+1-k)] covers the true median with probability
1 - 2·P(Bin(n, ½) ≤ k-1), whatever the distribution of the reps (only that they are
independent draws of one config's duration). k is the largest whose coverage reaches the level
asked for; with too few reps for that level (fewer than 6 for 95%) it is [min, max], whose
coverage is less than asked (93.75% for 5 reps, 87.5% for 4) and is reported as achieved.

Two configs are tied when their intervals overlap (touching ends count: ncu's durations come
in steps of one clock period, and equal ends cannot be told apart); the tie set is the best and every config
tied with it. The config fed back out of a tie is the best-ranked one (the lowest value of the
ranking's statistic, then the lower config id): a rule that depends only on the measured values,
not on the order the rows came in, and that leaves a clear winner as it was.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

METHOD = "order-statistic (binomial) interval for the median"
LEVEL = 0.95


def tie_rule(stat: str = "median") -> str:
    """The rule, in words, by which one member of a tie is fed back."""
    return f"the lowest {stat}, then the lower config id"


@dataclass(frozen=True)
class Interval:
    low: float  # NaN with fewer than 2 reps
    high: float
    coverage: float  # the achieved probability that [low, high] holds the median (NaN: no interval)
    k: int  # [x(k), x(n+1-k)] of the n sorted reps (0: no interval)
    n: int


def median_coverage(n: int, k: int) -> float:
    """P(x(k) ≤ median ≤ x(n+1-k)) for n independent reps of any continuous distribution:
    1 - 2·P(Bin(n, ½) ≤ k-1)."""
    if n < 1 or not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"k must be in 1..{(n + 1) // 2} for n={n}, not {k}")
    below = sum(math.comb(n, i) for i in range(k)) / 2.0**n
    return 1.0 - 2.0 * below


def median_interval(values: Sequence[float] | np.ndarray) -> Interval:
    """The order-statistic interval for the median of `values` (NaNs dropped) at LEVEL, or
    [min, max] at its own, lower coverage when there are too few values to reach it."""
    import numpy as np

    a = np.sort(np.asarray(values, dtype=float).ravel())
    a = a[~np.isnan(a)]
    n = int(a.size)
    if n < 2:
        return Interval(float("nan"), float("nan"), float("nan"), 0, n)
    k = 1
    while k + 1 <= (n + 1) // 2 and median_coverage(n, k + 1) >= LEVEL:
        k += 1
    return Interval(float(a[k - 1]), float(a[n - k]), median_coverage(n, k), k, n)


def not_slower(low: float, value: float, best_low: float, best_high: float) -> bool:
    """Whether a config whose interval starts at `low` (its value `value`) cannot be told slower than the
    best, whose interval is [best_low, best_high]: its interval overlaps the best's, or lies below it (a
    best by the minimum), or, with too few reps for one, its value lies within the best's reach. False
    where the best has no interval."""
    if best_low != best_low or best_high != best_high:
        return False
    return (low if low == low else value) <= best_high


def tied_with(table, best_row) -> list[bool]:
    """For each row of `table` (ci_low_ns, value_ns), whether it cannot be told slower than `best_row`
    (not_slower)."""
    lo, hi = float(best_row["ci_low_ns"]), float(best_row["ci_high_ns"])
    return [not_slower(float(a), float(v), lo, hi) for a, v in zip(table["ci_low_ns"], table["value_ns"])]


@dataclass
class Decision:
    """What the ranking decides: a winner, a tie, or (no interval, fewer than 2 reps) an untested best."""

    kind: str  # "winner" | "tie" | "untested"
    config_id: int | None  # the config fed back
    members: list[int] = field(default_factory=list)  # the tie set in rank order (the winner alone otherwise)
    rule: str = field(default_factory=tie_rule)
    half_width: float = float("nan")  # the best's interval half-width, relative to its value
    margin: float = float("nan")  # #2's low end above the best's high end, relative to the best (winner)
    second: int | None = None  # the next-ranked config
    # A tie's members' intervals: how far their farthest end lies from the best's value, relative
    # to it (practical equivalence: nsprof.analysis.adaptive.stop_reason)
    tie_spread: float = float("nan")
    tie_spread_ns: float = float("nan")  # tie_spread in ns (the clock's step: stop_reason)

    def as_json(self) -> dict:
        doc: dict = {"kind": self.kind, "config_id": self.config_id}
        if self.kind == "tie":
            doc["members"] = list(self.members)
        doc["rule"] = self.rule
        doc["half_width"] = None if self.half_width != self.half_width else self.half_width
        if self.kind == "tie":
            doc["tie_spread"] = None if self.tie_spread != self.tie_spread else self.tie_spread
        if self.kind == "winner":
            doc["second"] = self.second
            doc["margin"] = None if self.margin != self.margin else self.margin
        return doc


def decide(ranked, stat: str = "median") -> Decision:
    """The decision over `ranked` (analysis.ranking.rank's table by `stat`: measured rows first,
    in rank order, with ci_low_ns, ci_high_ns and tied_with_best). Out of a tie the best-ranked
    member is fed back (tie_rule): rank's order is by value, then config id, so the pick does not
    depend on the order the rows came in."""
    rule = tie_rule(stat)
    measured = ranked[ranked["rank"].notna()]
    if measured.empty:
        return Decision("untested", None, rule=rule)
    best = measured.iloc[0]
    best_id = int(best["config_id"])
    low, high, value = float(best["ci_low_ns"]), float(best["ci_high_ns"]), float(best["value_ns"])
    if low != low or high != high:
        return Decision("untested", best_id, [best_id], rule=rule)
    half = (high - low) / 2.0 / value if value else float("nan")
    members = [int(c) for c, tied in zip(measured["config_id"], measured["tied_with_best"]) if bool(tied)]
    second = int(measured.iloc[1]["config_id"]) if len(measured) > 1 else None
    if len(members) > 1:
        # The rank order is the rule's order: members[0] is the best.
        tied = measured[measured["config_id"].isin(members)]
        ends = [float(e) for e in (*tied["ci_low_ns"], *tied["ci_high_ns"], *tied["value_ns"]) if e == e]
        far = max((abs(e - value) for e in ends), default=float("nan"))
        spread = far / value if value else float("nan")
        return Decision(
            "tie",
            members[0],
            members,
            rule=rule,
            half_width=half,
            second=second,
            tie_spread=spread,
            tie_spread_ns=far,
        )
    margin = float("nan")
    if second is not None:
        second_low = float(measured.iloc[1]["ci_low_ns"])
        if second_low == second_low and value:
            margin = (second_low - high) / value
    return Decision("winner", best_id, [best_id], rule=rule, half_width=half, margin=margin, second=second)


# --------------------------------------------------------------------------- winner stability


@dataclass(frozen=True)
class Pick:
    """One run's winner (the lowest value, then the lower config id) and its tie set: the
    configs whose interval overlaps the winner's, in rank order (None: the winner has no
    interval, fewer than 2 reps)."""

    winner: int | None
    tie_set: tuple[int, ...] | None = None


def pick(rows) -> Pick:
    """The Pick over `rows` (columns config_id, value_ns, ci_low_ns, ci_high_ns; NaN values skipped)."""
    measured = []
    for cid, value, low, high in zip(
        rows["config_id"], rows["value_ns"], rows["ci_low_ns"], rows["ci_high_ns"]
    ):
        value = float(value)
        if value == value:
            measured.append((value, int(cid), float(low), float(high)))
    if not measured:
        return Pick(None)
    measured.sort()
    _, best, low, high = measured[0]
    if low != low or high != high:
        return Pick(best)
    return Pick(best, tuple(cid for v, cid, lo, _ in measured if cid == best or not_slower(lo, v, low, high)))


def stability(a: Pick, b: Pick) -> str | None:
    """How run b's winner relates to run a's (STABILITY; None when either run measured nothing).
    "tied" needs both ways: each winner inside the other run's tie set."""
    if a.winner is None or b.winner is None:
        return None
    if a.winner == b.winner:
        return "same"
    if a.tie_set is None or b.tie_set is None:
        return "untested"
    return "tied" if b.winner in a.tie_set and a.winner in b.tie_set else "different"
