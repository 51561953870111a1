"""Ranking configs by a measured statistic: the table `nsprof tune` prints and hands to a tuner."""

from __future__ import annotations

from nsprof.analysis.confidence import tied_with

INTERVAL_COLUMNS = ("ci_low_ns", "ci_high_ns", "ci_coverage")


def rank(per_config, stat: str = "median"):
    """Sort measured configs by `stat` (ties: lower config id); failures last. Adds rank, vs_best
    and tied_with_best: whether a config's interval of the median (ci_low_ns..ci_high_ns, from
    nsprof.analysis.confidence; NaN where it has fewer than 2 reps) overlaps the best's. The best
    is always tied with itself; failed configs never are.

    With stat "min" the interval and the tie test are still the median's: a sample's minimum
    has no distribution-free interval of its own (it is the edge of the sample), so two configs
    count as tied when the middles of their reps cannot be told apart."""
    import pandas as pd

    value = "median_ns" if stat == "median" else "min_ns"
    table = per_config.copy()
    for column in INTERVAL_COLUMNS:
        if column not in table:
            table[column] = float("nan")
    table["value_ns"] = table[value]
    ok = table["error"].isna() & table["value_ns"].notna()
    measured = table[ok].sort_values(["value_ns", "config_id"], kind="stable")
    failed = table[~ok].sort_values("config_id", kind="stable")
    best = measured["value_ns"].iloc[0] if len(measured) else float("nan")
    measured = measured.assign(rank=range(1, len(measured) + 1), vs_best=measured["value_ns"] / best - 1)
    tied = tied_with(measured, measured.iloc[0]) if len(measured) else []
    measured = measured.assign(tied_with_best=[bool(t) or i == 0 for i, t in enumerate(tied)])
    failed = failed.assign(rank=pd.NA, vs_best=float("nan"), tied_with_best=False)
    out = pd.concat([measured, failed], ignore_index=True)
    out["rank"] = out["rank"].astype("Int64")
    out["tied_with_best"] = out["tied_with_best"].astype(bool)
    return out
