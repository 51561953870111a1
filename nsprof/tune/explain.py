"""Why truths disagree: cross_truth compares every pair of a tune's truths at each shape, and explains
a disagreement by probes (the contenders measured again under one truth with each condition in which
the two differ set as the other has it); CrossTruth holds what it found."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from nsprof.analysis import crosstruth
from nsprof.analysis.crosstruth import CrossTruth
from nsprof.errors import NsprofError, TargetChanged
from nsprof.reports.checks import one_line
from nsprof.settings import Truth, TuneSettings
from nsprof.tune.measure import truth_labels
from nsprof.tune.rankings import rank_truth, worker_ahead

__all__ = ["cross_truth"]


def _probes(
    probed: Truth, other: Truth, results: dict, settings: TuneSettings
) -> list[tuple[list[str], Truth]] | None:
    """The truths that measure like `probed` with each condition in which it differs from `other`
    set as `other` has it (one at a time, then all together: that may be `other` itself):
    [(conditions changed, truth)]; None when `probed`'s driver cannot change one of them (nsys:
    neither clocks nor caches)."""
    labels, goal = results[probed.name].labels, results[other.name].labels
    conditions = crosstruth.differing(labels, goal)
    subsets = [[c] for c in conditions] + ([list(conditions)] if len(conditions) > 1 else [])
    out = []
    for changed in subsets:
        wanted = {**labels, **{c: goal[c] for c in changed}}
        probe = Truth.of_labels(probed.backend, wanted)
        got = truth_labels(probe, settings)
        if any(got.get(c) != wanted.get(c) for c in crosstruth.CONDITIONS):
            return None
        out.append((changed, probe))
    return out


def _explain(
    target: str, space, a: Truth, b: Truth, pairs: dict, rankings: dict, settings: TuneSettings, stage
) -> dict:
    """Why truths `a` and `b` disagree, at each shape in `pairs` ({shape: crosstruth.Pair} of a and b):
    the contenders (both winners, both tie sets) measured again under one truth's backend with each
    condition in which the two differ set as the other has it, every shape's contenders in the same
    session per probe. `rankings`: {shape: {truth name: Ranking}}. {shape: Explanation}."""
    some = rankings[next(iter(pairs))]
    contenders = {shape: crosstruth.contenders(p) for shape, p in pairs.items()}

    def unexplained(reason: str) -> dict:
        return {
            shape: crosstruth.Explanation(p, a, b.name, contenders[shape], reason=reason)
            for shape, p in pairs.items()
        }

    if not crosstruth.differing(some[a.name].labels, some[b.name].labels):
        return unexplained(
            f"{a.name} and {b.name} measure under the same clock and cache conditions: the tools themselves differ"
        )
    for probed, other in ((a, b), (b, a)):
        variants = _probes(probed, other, some, settings)
        if variants is not None:
            break
    else:
        return unexplained(
            f"neither {a.backend} nor {b.backend} can change the conditions in which they differ"
        )
    explanations = {
        shape: crosstruth.Explanation(p, probed, other.name, contenders[shape]) for shape, p in pairs.items()
    }
    layout = space.points
    points = [layout.id(c, shape) for shape, configs in contenders.items() for c in configs]
    goals = {shape: rankings[shape][other.name] for shape in explanations}
    # every condition changed may be the other truth itself: not measured again, it picks its own winner
    measured = [v for v in variants if v[1] != other]
    _probe(target, space, measured, points, explanations, goals, settings, stage)
    for explanation in explanations.values():
        explanation.cause = crosstruth.cause(
            explanation.probes, next((c for c, t in variants if t == other), None)
        )
    return explanations


def _probe(target, space, variants, points, explanations, goals, settings, stage) -> None:
    """Each probe of `variants` ranked at every shape and judged into `explanations` against the other
    truth's ranking there (`goals`: {shape: Ranking}). Each in a worker started ahead: the first's now,
    each next one's as the probe before it begins, so that it imports while that probe runs."""
    with contextlib.ExitStack() as held:

        def started(index: int):
            return worker_ahead(target, variants[index][1], settings, held) if index < len(variants) else None

        ahead = started(0)
        for index, (changed, probe) in enumerate(variants):
            following = started(index + 1)
            try:
                progress = stage(probe.name, len(points))
                probing = replace(settings, ranks=False)  # its runs record no points of the tune's
                ranked = rank_truth(target, space, probe, probing, points, progress, [], ahead=ahead)
            except TargetChanged:
                raise  # no probe of the target as read can be measured any more
            except NsprofError as exc:  # measured nothing there: say so, keep the others
                _unmeasured(explanations, probe, changed, settings, exc)
            else:
                for shape, explanation in explanations.items():
                    _judge(explanation, probe, changed, ranked[shape], goals[shape], settings.stat)
            ahead = following


def _unmeasured(explanations: dict, probe: Truth, changed: list[str], settings: TuneSettings, exc) -> None:
    """A probe that measured nothing: each explanation says so."""
    labels = truth_labels(probe, settings)
    for explanation in explanations.values():
        explanation.probes.append(crosstruth.Probe(probe.name, changed, labels, None, [], crosstruth.UNKNOWN))
        explanation.reason = one_line(str(exc), 200)


def _judge(explanation, probe: Truth, changed: list[str], ranked, goal, stat: str) -> None:
    """One probe's ranking `ranked` at one shape, judged against the other truth's ranking `goal`:
    its winner and tie set, its verdict, and a warning when its numbers look erratic."""
    goal_winner, goal_ties = crosstruth.winner(goal.table, stat)
    won, ties = crosstruth.winner(ranked.table, stat)
    verdict = crosstruth.verdict(won, ties, goal_winner, goal_ties)
    explanation.probes.append(
        crosstruth.Probe(probe.name, changed, ranked.labels, won, ties, verdict, ranked.table)
    )
    ratio = crosstruth.erratic(ranked.table, goal.table)
    if ratio is not None:
        explanation.warnings.append(
            f"{probe.name} measured the contenders {ratio:.1f}x as long as {goal.truth} did: its "
            "numbers look erratic on this machine, so its pick says little"
        )


def cross_truth(target: str, space, rankings: dict, settings: TuneSettings, stage) -> dict:
    """Every pair of settings' truths compared at each shape, in --truth order; each disagreeing pair
    explained (settings.explain) by probes of its contenders (_explain). `rankings`: {shape: {truth
    name: Ranking}}; returns {shape: CrossTruth}."""
    crosses = {shape: CrossTruth() for shape in rankings}
    truths = settings.ranked_truths
    for i, a in enumerate(truths):
        for b in truths[i + 1 :]:
            disagree = {}
            for shape, results in rankings.items():
                pair = crosstruth.compare(
                    a.name, results[a.name].table, b.name, results[b.name].table, settings.stat
                )
                crosses[shape].pairs.append(pair)
                if pair.verdict == crosstruth.DISAGREE and settings.explain:
                    disagree[shape] = pair
            if disagree:
                explained = _explain(target, space, a, b, disagree, rankings, settings, stage)
                for shape, explanation in explained.items():
                    crosses[shape].explanations.append(explanation)
    return crosses
