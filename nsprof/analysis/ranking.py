"""Ranking configs by a measured statistic: the table `nsprof tune` prints and hands to a tuner."""

from __future__ import annotations


def rank(per_config, stat: str = "median"):
    """Sort measured configs by `stat` (ties: lower config id); failures last. Adds rank and vs_best."""
    import pandas as pd

    value = "median_ns" if stat == "median" else "min_ns"
    table = per_config.copy()
    table["value_ns"] = table[value]
    ok = table["error"].isna() & table["value_ns"].notna()
    measured = table[ok].sort_values(["value_ns", "config_id"], kind="stable")
    failed = table[~ok].sort_values("config_id", kind="stable")
    best = measured["value_ns"].iloc[0] if len(measured) else float("nan")
    measured = measured.assign(rank=range(1, len(measured) + 1), vs_best=measured["value_ns"] / best - 1)
    failed = failed.assign(rank=pd.NA, vs_best=float("nan"))
    out = pd.concat([measured, failed], ignore_index=True)
    out["rank"] = out["rank"].astype("Int64")
    return out
