"""What a tune found, as data: TuneReport (the run) holds one ShapeReport per shape (a target without
shapes is one shape, shape None), each holding every truth's Ranking at that shape and how the
truths' winners compare (nsprof.analysis.crosstruth.CrossTruth). No object refers back to one that
holds it, so a report saves to JSON and loads back (nsprof.render.json: tune_document, load_tune)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nsprof.analysis.adaptive import AdaptiveSummary
from nsprof.analysis.confidence import Decision, decide

__all__ = ["Ranking", "ShapeReport", "TuneReport", "check_ranked"]


@dataclass(frozen=True)
class Ranking:
    """One truth's ranking at one shape."""

    # ranked DataFrame (nsprof.analysis.ranking.rank): rank, config_id, config, value_ns, spread,
    # cycles, clock, vs_best, ci_low_ns, ci_high_ns, ci_coverage, tied_with_best
    table: Any
    truth: str  # its name: a backend, or a variant such as ncu@base-warm
    backend: str
    label: str  # how the numbers were taken, in words
    stat: str = "median"  # the statistic ranked by
    labels: dict = field(default_factory=dict)  # the conditions its rows were taken under (key_labels)
    notes: list[str] = field(default_factory=list)
    # What the adaptive reps did: sessions, reps, why they stopped (nsprof.adaptive); None: not tried
    adaptive: AdaptiveSummary | None = None
    first_pass_wall_s: float | None = None  # the first pass's wall time (measuring, through the store)
    # Where the first pass's session time went (nsprof.session.timing_record); None: nothing ran
    first_pass_phases: dict | None = None

    @property
    def decision(self) -> Decision:
        """A winner, a tie (its members, in rank order), or an untested best (fewer than 2 reps):
        nsprof.analysis.confidence.decide over the ranked table."""
        return decide(self.table, self.stat)

    @property
    def tie_set(self) -> list[int]:
        """The best and every config tied with it, in rank order."""
        return list(self.decision.members)

    @property
    def best_config_id(self) -> int | None:
        """The config fed back: the decision's (out of a tie, by its stated rule)."""
        return self.decision.config_id


@dataclass(frozen=True)
class ShapeReport:
    """One shape's findings: every truth's ranking in --truth order, the deploy truth's name, how
    their winners compare (None with one truth), the prescreen's ranked table, and what the
    target's own autotuner picks with its own timer (when its Space can say)."""

    truths: dict[str, Ranking]
    deploy: str
    shape: int | None = None  # its index in the Space's shapes; None: a target without shapes
    shape_value: Any = None
    cross: Any = None  # nsprof.analysis.crosstruth.CrossTruth
    prescreen: Any = None  # the prescreen's ranked table, when used
    tuner_pick: dict | None = None

    @property
    def ranking(self) -> Ranking:
        """The deploy truth's ranking: the one fed back, its notes those of the whole shape."""
        return self.truths[self.deploy]


@dataclass(frozen=True)
class TuneReport:
    """A tune of `target`: its configs (as JSON values), each shape's findings in order, the settings
    it ran with (TuneSettings.record), the steps after ranking that failed (the tuner's own pick, the
    feed-back: the rankings stand, and the command exits non-zero after printing them), and the wall
    seconds each step took, in order ({"start": nsprof's start and the target's listing, "prescreen",
    a truth's name: its first pass and adaptive reps, "compare": the truths compared, "pick",
    "feed_back"}; {} where not timed)."""

    target: str
    configs: list
    shapes: list[ShapeReport]
    settings: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def shaped(self) -> bool:
        return self.shapes[0].shape is not None

    @property
    def ranking(self) -> Ranking:
        """The first shape's deploy ranking (a target without shapes: its ranking)."""
        return self.shapes[0].ranking


def check_ranked(report: TuneReport) -> None:
    """An NsprofError where `report`, read again (a saved tune, the results store's), ranks no config
    under any truth at any shape: it has nothing to show (a tune stops there: nothing measured). A truth
    or a shape with nothing ranked beside ranked ones stands (a run cut short leaves one): its table, and
    the comparison of the truths, say so."""
    from nsprof.errors import NsprofError
    from nsprof.reports.checks import nothing_measured

    rankings = [ranking for shape in report.shapes for ranking in shape.truths.values()]
    if not rankings or any(ranking.best_config_id is not None for ranking in rankings):
        return
    names = " or ".join(dict.fromkeys(name for shape in report.shapes for name in shape.truths))
    failed: dict[int, str] = {}
    for config, error in sorted(
        (int(config), str(error))
        for table in (ranking.table for ranking in rankings if "error" in ranking.table)
        for config, error in zip(table["config_id"], table["error"])
        if isinstance(error, str) and error
    ):
        failed.setdefault(config, error)
    if failed:  # in tune's words (nsprof.profile.check_measured)
        why = nothing_measured(failed)
    elif all(ranking.table.empty for ranking in rankings):
        why = f"no config was measured (its ranked list{'s are' if len(rankings) > 1 else ' is'} empty)"
    else:
        why = "no config was measured (no config in it has a rank)"
    raise NsprofError(f"nothing ranked under {names}: {why}")
