"""Adaptive reps for the contenders only: pure decisions over recorded reps.

After tune's first pass, the configs still tied with the best (nsprof.analysis.confidence) are
measured again, interleaved in one profiled session (A B C A B C ...), until the best is
separated or a budget runs out. This module holds the parts that need no process: which configs
contend, whether to go on (and why not), and how many rounds the next session does.

The cost model: a session costs a profiler start-up (`startup_s`, ~9-11 s for ncu or nsys on the
H200) plus `visit_s` per visit (one config's warm-up and one rep). Both come from the first pass
(`first_pass_cost`), from the times its configs finished: the gap between two configs measured
one after the other is one config's work (build from cache, warm-up, reps), so a visit costs that
gap scaled by (warmup + 1) / (warmup + reps), an overestimate (the build is in the gap); a failed
config's gaps are its fault's cost and say nothing of a visit; the start-up is what comes before
the first config's work and after the last, less what a worker started ahead has done before its
session (started_ahead).

Rounds per session ("ski rental"): when the rest of the reps up to --max-reps costs no more
than one more start-up, a session does them all (a second session would cost more than the
rounds it could save); otherwise it doubles the contenders' reps, so that the rounds done beyond
need are at most about the rounds needed, and sessions stay few (log2(max_reps / reps)). A
session that the budget left cannot pay (start-up and one round) is not started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# What stopped the adaptive reps (Ranking.adaptive.stopped, tune --json "adaptive.stopped").
SEPARATED = "separated"  # the best's interval overlaps no other's: a winner
MAX_REPS = "max_reps"  # every contender has --max-reps reps: a tie
BUDGET = "budget"  # the budget left cannot pay another session: a tie
OFF = "off"  # --budget-s 0: no adaptive session
UNTESTED = "untested"  # no interval (fewer than 2 reps): nothing to separate
FAST_TIMER = "fast_timer"  # a fast timer gives one number per config: no reps to add
FAILED = "failed"  # an adaptive session measured nothing: the ranking stands on the reps before it
# every contender's interval lies within --equivalence of the best's value: more reps could only
# separate configs whose difference does not matter in practice (a memory-bound kernel's configs)
EQUIVALENT = "equivalent"
# every contender's interval lies within one step of the tool's clock (clock_step_ns) of the best's
# value: the whole uncertainty is below what one measurement can state (the equivalence margin is
# never finer than the clock; --equivalence 0 turns both off)
CLOCK_STEP = "clock_step"
STOP_REASONS = (SEPARATED, MAX_REPS, BUDGET, OFF, UNTESTED, FAST_TIMER, FAILED, EQUIVALENT, CLOCK_STEP)

STARTUP_S = 10.0  # a profiler's start-up and tear-down where the first pass could not say (H200: 9-11 s)
VISIT_S = 0.25  # one visit where the first pass could not say (ncu: 40-85 ms per profiled kernel)


@dataclass(frozen=True)
class Cost:
    startup_s: float  # one session's fixed cost
    visit_s: float  # one config's warm-up and one rep, in a session
    measured: bool = True  # False: the defaults above (nothing was timed)


def first_pass_cost(wall_s: float, finished: list[tuple[float, bool]], reps: int, warmup: int) -> Cost:
    """The cost model from a first pass that took `wall_s` and whose configs finished at the times
    in `finished` ((seconds from its start, measured or failed), in order). A config's work is the
    median gap between two configs measured one after the other: a gap that ends or starts at a
    failed config holds its fault's cost (a timeout, the worker's restart), not a config's work.
    Needs one such pair to say; else the defaults. The start-up is the time before the first config
    finished, less one config's work, plus the time after the last."""
    times = [(t, ok) for t, ok in finished if t == t]
    gaps = sorted(b - a for (a, a_ok), (b, b_ok) in zip(times, times[1:]) if a_ok and b_ok)
    if not gaps or wall_s <= 0:
        return Cost(STARTUP_S, VISIT_S, measured=False)
    middle = len(gaps) // 2
    per_config = gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2
    visit = per_config * (warmup + 1) / max(1, warmup + reps)
    startup = max(0.0, times[0][0] - per_config) + max(0.0, wall_s - times[-1][0])
    return Cost(startup, max(visit, 1e-6))


# A first pass's phases (nsprof.worker.phases) that a worker started ahead has done before its session
# begins: the profiler's start, Python's, the target's import. (A first pass's compile_wait is summed over
# its configs, most of it inside their gaps: not taken off.)
DONE_AHEAD = ("tool_start", "worker_start", "target_import")


def started_ahead(cost: Cost, phases: dict[str, float] | None, compiled_in_worker: bool = False) -> Cost:
    """The cost model of sessions whose workers are started ahead (nsprof.session.ahead): the first
    pass's start-up less what such a worker has done before its session (DONE_AHEAD, from the first
    pass's `phases`; unchanged where it recorded none). With `compiled_in_worker` (the first pass ran in
    such a worker, which compiled all its points before its first window) its compile_wait too: a
    session compiles only its contenders."""
    if not phases:
        return cost
    done = sum(phases.get(name, 0.0) for name in DONE_AHEAD)
    done += phases.get("compile_wait", 0.0) if compiled_in_worker else 0.0
    return Cost(max(cost.startup_s - done, 0.0), cost.visit_s, cost.measured)


def updated_cost(cost: Cost, wall_s: float, visits: int) -> Cost:
    """The cost model after a session of `visits` visits that took `wall_s`: the start-up is kept, the
    visit cost is what the session's wall time says beyond it. A session that took no longer than the
    start-up alone says the start-up is less than thought, not that visits cost nothing (planned as free,
    the next session would take every rep up to --max-reps): the visit cost is kept, the start-up is the
    rest of the wall (or, where the visits alone fill it, nothing, and the wall is all visits)."""
    if visits <= 0 or wall_s <= 0:
        return cost
    beyond = wall_s - cost.startup_s
    if beyond > 0:
        return Cost(cost.startup_s, beyond / visits, measured=True)
    startup = wall_s - visits * cost.visit_s
    if startup > 0:
        return Cost(startup, cost.visit_s, measured=True)
    return Cost(0.0, wall_s / visits, measured=True)


def contenders(decision) -> list[int]:
    """The configs to measure again: the tie set (nsprof.analysis.confidence.Decision.members, in
    rank order) when the decision is a tie; a winner and its nearest rival (to_confirm); else none."""
    if decision.kind == "winner":
        return [decision.config_id, decision.second] if decision.second is not None else []
    return list(decision.members) if decision.kind == "tie" else []


def one_process(decision, processes: dict[int, int]) -> list[int]:
    """The contenders of `decision` (contenders) that one process only has measured: `processes`
    says how many processes (first passes, adaptive sessions, of this run or stored) measured each."""
    return [c for c in contenders(decision) if processes.get(c, 0) < 2]


def to_confirm(decision, processes: dict[int, int] | None, equivalence: float) -> bool:
    """Whether a winner stands on one process's reps only (one_process: the winner or its nearest
    rival; `processes` None: it is not to be checked again) and beats that rival by less than the
    practical-equivalence margin. Reps within one process agree more closely than the process shifts
    a config (nsys on the H200: winners 0.5-0.6 % clear of the runner-up's interval, picked second by
    the next runs), so such a winner is measured again beside its rival in a second process,
    interleaved, and decided over both processes' reps. Processes are counted, not reps: a resume's
    --reps need not be those its stored first pass was measured with."""
    margin = decision.margin
    return (
        decision.kind == "winner"
        and processes is not None
        and equivalence > 0
        and decision.second is not None
        and 0 <= margin < equivalence  # (below 0 under --stat min: the medians' intervals overlap)
        and bool(one_process(decision, processes))
    )


def check_rounds(decision, reps: dict[int, int], processes: dict[int, int]) -> int:
    """The rounds of a check of `decision`'s winner in a second process (to_confirm): as many as the
    most reps a contender measured in one process only holds, so that neither process's reps outweigh
    the other's (0: no such contender)."""
    return max((reps.get(c, 0) for c in one_process(decision, processes)), default=0)


def clock_step_ns(durations) -> int:
    """The step of the tool's clock in `durations` (ns; NaN skipped): the largest power of two up to
    1024 ns that divides every one of them (the H200's GPU timer ticks every 32 ns, and nsys's and
    ncu's durations are its multiples); 1 where fewer than 6 distinct durations say (6 values off
    any grid all fall on a 32 ns one by chance once in 10⁹), or no step fits."""
    values = {float(d) for d in durations if d == d}
    # whole ns, to well under one: a duration read in µs or ms carries a rounding error once in ns
    if len(values) < 6 or any(abs(v - round(v)) > 1e-3 for v in values):
        return 1
    whole = {round(v) for v in values}
    step = 1024
    while step > 1 and any(v % step for v in whole):
        step //= 2
    return step


def stop_reason(
    decision,
    reps: dict[int, int],
    max_reps: int,
    equivalence: float = 0.0,
    processes: dict[int, int] | None = None,
    step_ns: int = 1,
) -> str | None:
    """Why no further adaptive session is needed, or None to go on: `decision` over all reps so
    far, `reps` each config's rep count, `equivalence` the practical-equivalence margin (relative;
    0: none), `processes` how many processes measured each config (to_confirm; None: a winner is
    not checked again), `step_ns` the step of the tool's clock (clock_step_ns)."""
    if decision.kind == "winner":  # checked only where --max-reps leaves room for the check's rounds
        rounds = check_rounds(decision, reps, processes or {})
        room = all(reps.get(c, 0) + rounds <= max_reps for c in contenders(decision))
        return None if room and to_confirm(decision, processes, equivalence) else SEPARATED
    if decision.kind != "tie":
        return UNTESTED
    if equivalence > 0 and decision.tie_spread <= equivalence:
        return EQUIVALENT
    if equivalence > 0 and step_ns > 1 and decision.tie_spread_ns <= step_ns:
        return CLOCK_STEP
    if all(reps.get(c, 0) >= max_reps for c in decision.members):
        return MAX_REPS
    return None


@dataclass(frozen=True)
class Plan:
    """One adaptive session: `rounds` rounds over `configs` (in this order each round), config c's
    reps numbered from first_rep[c]."""

    configs: tuple[int, ...]
    rounds: int
    first_rep: dict[int, int]
    expected_s: float  # what the cost model says it takes

    @property
    def visits(self) -> int:
        return self.rounds * len(self.configs)

    def order(self) -> list[tuple[int, int]]:
        """(config_id, rep) of every visit, in the order they run: A B C A B C ..."""
        return [(c, self.first_rep[c] + r) for r in range(self.rounds) for c in self.configs]


def session_configs(decision, reps: dict[int, int], max_reps: int) -> list[int]:
    """The contenders that the next session measures: those below max_reps, in rank order."""
    return [c for c in contenders(decision) if reps.get(c, 0) < max_reps]


def plan_session(
    configs: list[int],
    reps: dict[int, int],
    next_rep: dict[int, int],
    max_reps: int,
    budget_left_s: float,
    cost: Cost,
    confirm: int = 0,
) -> Plan | None:
    """The next session over `configs` (session_configs: each below max_reps), or None where the
    budget left cannot pay a start-up and one round. reps: each config's rep count so far;
    next_rep: the first free rep number of each (reps continue after the ones they have, so range
    names stay unique per config). confirm: the rounds of a session that checks winners in a second
    process (to_confirm, check_rounds), which does exactly that many (0: not such a session)."""
    if not configs:
        raise ValueError("a session needs a config to measure")
    have = max(reps.get(c, 0) for c in configs)
    left = max_reps - have
    if left < 1:
        raise ValueError(f"a config of {configs} has max_reps ({max_reps}) reps already")
    round_s = cost.visit_s * len(configs)
    if confirm > left:
        raise ValueError(f"a check of {confirm} reps does not fit under max_reps ({max_reps})")
    rounds = confirm or (left if left * round_s <= cost.startup_s else min(left, max(1, have)))
    # rounds the budget pays: all of them for free visits, or a budget past counting (--budget-s inf, 1e308)
    paid = (
        math.inf if round_s <= 0 or math.isinf(budget_left_s) else (budget_left_s - cost.startup_s) / round_s
    )
    affordable = left if paid >= left else math.floor(paid)
    if affordable < max(1, confirm):  # a check of fewer reps than the one process's is none: not started
        return None
    rounds = min(rounds, affordable)
    return Plan(
        tuple(configs),
        rounds,
        {c: int(next_rep.get(c, reps.get(c, 0))) for c in configs},
        cost.startup_s + rounds * round_s,
    )


@dataclass
class AdaptiveSummary:
    """What the adaptive reps did (Ranking.adaptive, tune --json "adaptive")."""

    stopped: str  # one of STOP_REASONS
    max_reps: int
    budget_s: float
    sessions: int = 0
    reps: int = 0  # adaptive reps measured and kept, over all contenders
    wall_s: float = 0.0
    # one per session: {"configs": [...], "rounds": n, "first_rep": {id: rep}, "wall_s": s, "kept": n,
    # "confirm": whether it checked a close winner in a second process (to_confirm), and for such a
    # check "second_process": whether it reached one (False: its session ran in the worker process of
    # the reps before it, as every session through nsprof serve does; absent: it failed)}
    history: list[dict] = field(default_factory=list)
    reps_per_config: dict[int, int] = field(default_factory=dict)  # the contenders' rep counts at the end
    note: str = ""  # why a session was not started or what failed, in words
    equivalence: float = 0.0  # the practical-equivalence margin (relative; 0: none)
    clock_step_ns: int = 1  # the step of the tool's clock in the durations (clock_step_ns)

    def describe(self) -> str:
        words = {
            SEPARATED: "the best is separated"
            + (" in a second process too" if any(_second_process(h) for h in self.history) else ""),
            MAX_REPS: f"every contender reached --max-reps {self.max_reps}",
            BUDGET: f"the budget (--budget-s {self.budget_s:g}) cannot pay another session",
            OFF: "off (--budget-s 0)",
            UNTESTED: "no interval to separate (the best has fewer than 2 reps)",
            FAST_TIMER: "not done for a fast timer (one number per config)",
            FAILED: "an adaptive session failed",
            EQUIVALENT: f"every contender lies within ±{self.equivalence:.1%} of the best (--equivalence)",
            CLOCK_STEP: "every contender's interval lies within one step of the tool's clock "
            f"({self.clock_step_ns} ns) of the best",
        }[self.stopped]
        if self.stopped in (OFF, FAST_TIMER, UNTESTED):
            return f"adaptive reps: {words}"
        if self.sessions == 0 and self.stopped == SEPARATED and self.note:
            return f"adaptive reps: none run; {self.note}"
        if self.sessions == 0 and self.stopped in (SEPARATED, EQUIVALENT, CLOCK_STEP):
            why = "the first pass separated the best" if self.stopped == SEPARATED else words
            return f"adaptive reps: none needed ({why})"
        done = (
            f"{self.reps} reps in {self.sessions} interleaved session{'s' * (self.sessions != 1)} "
            f"({self.wall_s:.1f} s)"
        )
        line = f"adaptive reps: {done}; stopped: {words}"
        return line + (f"; {self.note}" if self.note else "")

    def as_json(self) -> dict:
        return {
            "stopped": self.stopped,
            "sessions": self.sessions,
            "reps": self.reps,
            "wall_s": self.wall_s,
            "max_reps": self.max_reps,
            "budget_s": self.budget_s,
            "equivalence": self.equivalence,
            "clock_step_ns": self.clock_step_ns,
            "history": self.history,
            "reps_per_config": {str(k): v for k, v in self.reps_per_config.items()},
            "note": self.note,
            "words": self.describe(),
        }


def _second_process(entry: dict) -> bool:
    """Whether a session's history entry checked a close winner in a second process (a tune saved before
    "second_process" was recorded: every check did)."""
    return bool(entry.get("confirm")) and entry.get("second_process", True) is not False
