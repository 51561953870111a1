"""Regression, found in review: with one rep per config no truth has an interval, so two truths' different winners are
'untested' by validate's winner stability (confidence.stability), yet tune --truth calls them
'disagree' and spends probes explaining noise."""

from __future__ import annotations

from test_crosstruth import settings, truths  # noqa: F401

from nsprof.analysis.confidence import Pick, stability


def test_one_rep_truths_are_not_said_to_disagree(truths, tmp_path):  # noqa: F811
    from nsprof.tune import tune

    # lab picks 0, field picks 1 by 1%: with 1 rep nothing can be told apart
    table = {0: {"base-all": 1000, "none-none": 1010}, 1: {"base-all": 1010, "none-none": 1000}}
    result = tune(truths(table), settings(tmp_path, truths=("lab", "field"), reps=1, budget_s=0))
    (pair,) = result.shapes[0].cross.pairs
    assert stability(Pick(pair.winner_a), Pick(pair.winner_b)) == "untested"  # validate's rule
    assert pair.verdict != "disagree", (
        pair.verdict,
        [p.truth for e in result.shapes[0].cross.explanations for p in e.probes],
    )
