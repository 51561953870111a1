"""The cold-L2 check's reading (`nsprof validate --l2-check`, run by nsprof.l2check): which timers claim
a cold L2, the finalists it measures, and per finalist and mode the median L2 hit rate after ncu's
flush, after the cold timers' flush and with none, and whether the timers' flush was cold: within
COLD_MARGIN points of ncu's (None where the kernel hits L2 about as often unflushed, or a rate is missing)."""

from __future__ import annotations

COLD_MARGIN = 5.0  # percentage points of L2 hit rate
FINALISTS = 3
CONDITIONS = ("ncu's flush", "timers' flush", "no flush")
CHECK_COLUMNS = ["config_id", "mode", *CONDITIONS, "cold"]


def cold_timers(timers: list[str]) -> list[str]:
    """The timers among `timers` that claim to measure with L2 flushed before each call."""
    from nsprof.timers.specs import l2_state

    return [t for t in timers if l2_state(t) == "cold"]


def finalists(rows: list[dict], truth_method: str, timers: list[str], shape: int | None) -> list[int]:
    """At `shape`: the FINALISTS configs fastest by `truth_method`, then each of `timers`' own pick."""
    out: list[int] = []
    for method, count in ((truth_method, FINALISTS), *((t, 1) for t in timers)):
        measured = [
            r
            for r in rows
            if r["method"] == method and r["shape"] == shape and r["value_ns"] == r["value_ns"]
        ]
        out += [r["config_id"] for r in sorted(measured, key=lambda r: r["value_ns"])[:count]]
    return list(dict.fromkeys(out))


def check_table(rows: list[dict]):
    """Per finalist and mode: the median hit rate under each condition, and whether the timers' flush
    was cold (True / False; None where no flush and ncu's alike tell cold from warm, or one is missing)."""
    import pandas as pd

    if not rows:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    wide = (
        pd.DataFrame(rows)
        .pivot_table(index=["config_id", "mode"], columns="condition", values="l2_hit_pct", aggfunc="median")
        .reindex(columns=list(CONDITIONS))
        .reset_index()
    )
    cold, timers, warm = (wide[c] for c in CONDITIONS)
    verdict = (timers <= cold + COLD_MARGIN).astype(object)
    verdict[(warm - cold).abs() < COLD_MARGIN] = None  # this kernel cannot tell
    verdict[cold.isna() | timers.isna()] = None
    wide["cold"] = verdict
    wide.columns.name = None
    return wide[CHECK_COLUMNS]
