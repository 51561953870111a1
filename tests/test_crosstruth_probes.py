"""Regression, found in review: for two truths of one backend (lab vs lab@free-warm) the 'both conditions changed' probe
is the other truth itself, so cause 'both' is a re-measurement of the target (under --resume:
its own stored rows, nothing measured) rather than an explanation."""

from __future__ import annotations

from test_crosstruth import CLOCKS_EXPLAIN, settings, truths  # noqa: F401


def test_a_probe_is_never_the_truth_it_is_judged_against(truths, tmp_path):  # noqa: F811
    from nsprof.tune import tune

    # lab (base-all) picks 0; lab@free-warm (none-none) picks 1; warm L2 alone keeps 0 and free clocks
    # alone give 1 in CLOCKS_EXPLAIN, so change the target to one where neither single change flips it:
    table = {
        0: {"base-all": 1000, "base-none": 950, "none-all": 900, "none-none": 700},
        1: {"base-all": 1100, "base-none": 1050, "none-all": 950, "none-none": 600},
    }
    target = truths(table)
    first = tune(target, settings(tmp_path, truths=("lab", "lab@free-warm"), budget_s=0))
    (explanation,) = first.shapes[0].cross.explanations
    probes = [p.truth for p in explanation.probes]
    resumed = tune(target, settings(tmp_path, truths=("lab", "lab@free-warm"), budget_s=0, resume=True))
    (again,) = resumed.shapes[0].cross.explanations
    assert explanation.target not in probes, (probes, explanation.cause)
    assert again.target not in [p.truth for p in again.probes]  # nor under --resume, from its stored rows
