"""The cold-L2 check's reading (`nsprof validate --l2-check`, run by nsprof.l2check): which timers claim
a cold L2, the finalists it measures, and per finalist and mode the median L2 hit rate after ncu's
flush, after the cold timers' flush and with none, and whether the timers' flush was cold: within
COLD_MARGIN points of ncu's: a word of VERDICTS (words survive a save and its read back as they are)."""

from __future__ import annotations

COLD_MARGIN = 5.0  # percentage points of L2 hit rate
FINALISTS = 3
CONDITIONS = ("ncu's flush", "timers' flush", "no flush")
CHECK_COLUMNS = ["config_id", "mode", *CONDITIONS, "cold"]
# "cold": the timers' flush left the hit rate within COLD_MARGIN of ncu's flush, "NOT cold": above it;
# "cannot tell": unflushed the kernel hits L2 about as often as after ncu's flush (its data does not
# stay there); "not measured": a session measured no hit rate of it (its failure is validate's too).
VERDICTS = ("cold", "NOT cold", "cannot tell", "not measured")


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
    """Per finalist and mode: the median hit rate under each condition, and the word of VERDICTS for
    whether the timers' flush was cold."""
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
    verdict = (timers <= cold + COLD_MARGIN).map({True: VERDICTS[0], False: VERDICTS[1]})
    verdict[(warm - cold).abs() < COLD_MARGIN] = VERDICTS[2]
    verdict[cold.isna() | timers.isna() | warm.isna()] = VERDICTS[3]
    wide["cold"] = verdict
    wide.columns.name = None
    return wide[CHECK_COLUMNS]
