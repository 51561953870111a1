"""How well each fast timer ranks configs the way a ground truth does: the statistics of `nsprof validate`.

Input is one long table, `per_config`: columns `config_id`, `method`, `value_ns` (that method's
per-config median; NaN = not measured). Methods are fast timers ("event", "cupti", "graph_warm",
"tilelang_event", ...) or ground truths ("ncu:direct", "nsys:graph", ...); which is which is the
caller's to say. A tuner only needs the *ranking* right, so the headline figure is Kendall τ;
bias (the level) and regret (what picking by the timer costs) sit beside it, and the truth's own
repeatability (the noise floor) says how much τ any timer could reach.

The verdict is data (one `Verdict` per truth, nsprof.analysis.verdict); nsprof.render words,
tabulates, plots and serialises it. Nothing here measures, reads files or prints; pandas/numpy
are imported inside functions so that importing this module stays cheap for the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nsprof.analysis.confidence import pick, stability
from nsprof.analysis.stats import is_missing, kendall_tau_b, spearman_rho
from nsprof.analysis.verdict import FLOOR_MARGIN, floor_map, verdicts
from nsprof.errors import NsprofError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# What callers import from here, though verdicts lives in nsprof.analysis.verdict.
__all__ = [
    "FLOOR_MARGIN",
    "agreement",
    "floor_map",
    "matched_agreement",
    "mode_floor",
    "noise_floor",
    "verdicts",
    "wide",
    "winner_stability",
]

AGREEMENT_COLUMNS = [
    "timer",
    "truth",
    "n",
    "bias",
    "kendall_tau",
    "spearman_rho",
    "same_best",
    "timer_pick",
    "truth_best",
    "regret",
    "top_k_hit",
]
FLOOR_COLUMNS = ["truth", "against", "n", "kendall_tau", "median_rel_change", "max_rel_change"]
# winner_stability's columns, added beside a floor's
STABILITY_COLUMNS = ["winner", "winner_against", "tie_set", "tie_set_against", "winners"]
MATCHED_COLUMNS = [
    "timer",
    "l2",
    "mode",
    "matched_truth",
    "matched_tau",
    "matched_floor",
    "matched_at_floor",
    "matched_regret",
    "unmatched_truth",
    "unmatched_tau",
    "unmatched_floor",
    "unmatched_at_floor",
]


# --------------------------------------------------------------------------- agreement


def wide(per_config: pd.DataFrame, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """configs × methods of `value_ns` (duplicates pooled by median); `methods` fixes the columns."""
    import pandas as pd

    missing = {"config_id", "method", "value_ns"} - set(per_config.columns)
    if missing:
        raise NsprofError(f"per-config table lacks column(s): {', '.join(sorted(missing))}")
    values = pd.to_numeric(per_config["value_ns"], errors="coerce")
    frame = per_config.assign(value_ns=values)
    table = frame.groupby(["config_id", "method"], sort=True)["value_ns"].median().unstack("method")
    if methods is None:
        # keep the order methods first appear in, which is the order the caller measured them
        methods = list(dict.fromkeys(per_config["method"].tolist()))
    table = table.reindex(columns=list(methods))
    table.columns.name = None
    return table.astype(float)


def _pair_stats(timer: np.ndarray, truth: np.ndarray, ids: np.ndarray, k: int) -> dict[str, Any]:
    """Agreement of one timer with one truth over the configs where both measured."""
    import numpy as np

    both = np.isfinite(timer) & np.isfinite(truth)
    t, g, cid = timer[both], truth[both], ids[both]
    out: dict[str, Any] = {
        "n": int(both.sum()),
        "bias": float("nan"),
        "kendall_tau": float("nan"),
        "spearman_rho": float("nan"),
        "same_best": None,
        "timer_pick": None,
        "truth_best": None,
        "regret": float("nan"),
        "top_k_hit": None,
    }
    if out["n"] == 0:
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        out["bias"] = float(np.median(t / g))
    out["kendall_tau"] = kendall_tau_b(t, g)
    out["spearman_rho"] = spearman_rho(t, g)
    # The timer picks among the configs both measured (one the truth failed on has no regret); the
    # truth's best is over every config it measured, so that a timer that failed on it has that regret.
    # Ties go to the lower config id (stable sort on id-ordered rows).
    by_timer = np.argsort(t, kind="mergesort")
    pick = by_timer[0]
    measured = np.isfinite(truth)
    best = int(np.argmin(np.where(measured, truth, np.inf)))
    truth_min = truth[best]
    out["timer_pick"] = int(cid[pick])
    out["truth_best"] = int(ids[best])
    # "Same best" means the timer's pick is *a* truth-best config, so a tie in the truth does not
    # count against the timer (and same_best ⇔ regret == 0 holds exactly).
    out["same_best"] = bool(g[pick] == truth_min)
    out["regret"] = float(g[pick] / truth_min - 1.0) if truth_min != 0 else float("nan")
    out["top_k_hit"] = bool(np.any(g[by_timer[:k]] == truth_min))
    return out


def agreement(
    per_config: pd.DataFrame, timers: Sequence[str], truths: Sequence[str], k: int = 3
) -> pd.DataFrame:
    """One row per truth × timer (truths outer, so each truth's timers sit together).

    Columns: timer, truth, n (configs both measured), bias (median of timer/truth), kendall_tau,
    spearman_rho, same_best, timer_pick, truth_best (config ids), regret (truth[pick]/truth[best] − 1),
    top_k_hit (is a truth-best config among the timer's k fastest). `df.attrs["k"]` holds k.
    Methods absent from `per_config` give rows with n = 0 and NaN/None statistics.
    """
    import pandas as pd

    if k < 1:
        raise ValueError("k must be at least 1")
    table = wide(per_config, list(dict.fromkeys([*timers, *truths])))
    ids = table.index.to_numpy()
    rows = []
    for truth in truths:
        g = table[truth].to_numpy(dtype=float)
        for timer in timers:
            t = table[timer].to_numpy(dtype=float)
            rows.append({"timer": timer, "truth": truth, **_pair_stats(t, g, ids, k)})
    df = pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)
    df["n"] = df["n"].astype("int64")
    for col in ("bias", "kendall_tau", "spearman_rho", "regret"):
        df[col] = df[col].astype(float)
    # nullable dtypes: a pair with no common config has no pick, and that is not "False" or 0
    for col in ("same_best", "top_k_hit"):
        df[col] = pd.array([None if is_missing(v) else bool(v) for v in df[col]], dtype="boolean")
    for col in ("timer_pick", "truth_best"):
        df[col] = pd.array([None if is_missing(v) else int(v) for v in df[col]], dtype="Int64")
    df.attrs["k"] = k
    return df


# --------------------------------------------------------------------------- noise floor


def _floor_row(truth: str, against: str, a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    import numpy as np

    both = np.isfinite(a) & np.isfinite(b)
    a, b = a[both], b[both]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(b / a - 1.0)
    rel = rel[np.isfinite(rel)]
    return {
        "truth": truth,
        "against": against,
        "n": int(both.sum()),
        "kendall_tau": kendall_tau_b(a, b),
        "median_rel_change": float(np.median(rel)) if rel.size else float("nan"),
        "max_rel_change": float(np.max(rel)) if rel.size else float("nan"),
    }


def _floor_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rows, columns=FLOOR_COLUMNS)
    df["n"] = df["n"].astype("int64")
    return df


def noise_floor(
    run_a: pd.DataFrame, run_b: pd.DataFrame, truths: Sequence[str] | None = None
) -> pd.DataFrame:
    """The truth's repeatability: per method found in both runs, τ between the runs and how far
    per-config values moved (|b/a − 1|: median and max over configs both runs measured).

    `truths` limits (and orders) the methods; by default every method present in both runs.
    Columns: truth, against ("repeat"), n, kendall_tau, median_rel_change, max_rel_change.
    """
    wa, wb = wide(run_a), wide(run_b)
    if truths is None:
        truths = [m for m in wa.columns if m in wb.columns]
    truths = [m for m in truths if m in wa.columns and m in wb.columns]
    ids = wa.index.union(wb.index)
    wa, wb = wa.reindex(ids), wb.reindex(ids)
    rows = [_floor_row(m, "repeat", wa[m].to_numpy(float), wb[m].to_numpy(float)) for m in truths]
    return _floor_frame(rows)


def mode_floor(per_config: pd.DataFrame, truths: Sequence[str]) -> pd.DataFrame:
    """A floor from one run: τ between a tool's direct and graph modes (e.g. ncu:direct vs ncu:graph).

    Both modes are meant to time the same kernel, so their disagreement is the tool's own noise;
    nsprof uses it as the floor when no repeated run exists. One row per truth that has a
    sibling mode in `truths`, with `against` naming that sibling. Same columns as noise_floor.
    """
    table = wide(per_config, list(truths))
    rows = []
    for truth in truths:
        tool, _, mode = truth.partition(":")
        for other in truths:
            other_tool, _, other_mode = other.partition(":")
            if other != truth and other_tool == tool and other_mode != mode:
                rows.append(
                    _floor_row(truth, other, table[truth].to_numpy(float), table[other].to_numpy(float))
                )
                break
    return _floor_frame(rows)


def _runs_rows(frame: pd.DataFrame, method: str, configs) -> pd.DataFrame:
    rows = frame[(frame["method"] == method) & frame["config_id"].isin(configs)]
    out = rows[["config_id", "value_ns"]].copy()
    for column in ("ci_low_ns", "ci_high_ns"):
        out[column] = rows[column] if column in rows else float("nan")
    return out


def winner_stability(
    floors: pd.DataFrame, first: pd.DataFrame, repeat: pd.DataFrame | None = None
) -> pd.DataFrame:
    """`floors` with, beside each floor, whether its two sides picked the same winner.

    A floor row compares a truth's run (`first`, method = truth) with its repeat (`repeat`,
    against "repeat") or with a sibling mode of the same run (`first`, method = against). Both
    frames are long per-config tables with value_ns and the median's interval (ci_low_ns,
    ci_high_ns; missing: no interval). Over the configs both sides measured, each side's winner
    and tie set (nsprof.analysis.confidence.pick) and how they relate (confidence.stability:
    same | tied | different | untested). Adds STABILITY_COLUMNS; tie sets are lists, None
    without an interval.
    """
    import pandas as pd

    out = floors.copy()
    cells: dict[str, list] = {c: [] for c in STABILITY_COLUMNS}
    for r in floors.itertuples(index=False):
        other_frame, other = (repeat, r.truth) if r.against == "repeat" else (first, r.against)
        if other_frame is None:
            for column in STABILITY_COLUMNS:
                cells[column].append(None)
            continue
        common = _measured(first, r.truth) & _measured(other_frame, other)
        a = pick(_runs_rows(first, r.truth, common))
        b = pick(_runs_rows(other_frame, other, common))
        cells["winner"].append(a.winner)
        cells["winner_against"].append(b.winner)
        cells["tie_set"].append(None if a.tie_set is None else list(a.tie_set))
        cells["tie_set_against"].append(None if b.tie_set is None else list(b.tie_set))
        cells["winners"].append(stability(a, b))
    for column in STABILITY_COLUMNS:
        # object: a config id stays a whole number beside a row with none (None), never 1.0 beside NaN
        out[column] = pd.Series(cells[column], index=out.index, dtype=object)
    return out


def _measured(frame: pd.DataFrame, method: str) -> set:
    """The configs `method` has a value for in `frame`."""
    import numpy as np
    import pandas as pd

    rows = frame[frame["method"] == method]
    values = pd.to_numeric(rows["value_ns"], errors="coerce").to_numpy(dtype=float)
    return set(rows.loc[np.isfinite(values), "config_id"])


def matched_agreement(
    agreement_df: pd.DataFrame,
    floors: pd.DataFrame | Mapping[str, float] | None,
    pairs: Sequence[Mapping[str, Any]],
) -> pd.DataFrame:
    """Each timer against the truth measured under its own conditions, beside that truth's floor,
    and against the unmatched truth beside its floor.

    `pairs`: one mapping per row with timer, l2, mode, matched_truth and unmatched_truth (None:
    no such truth measured). A τ is "at the floor" when it is within FLOOR_MARGIN of the truth's
    own floor τ (None where either is missing). Columns: MATCHED_COLUMNS.
    """
    import math

    import pandas as pd

    fmap = floor_map(floors)
    stats = {(str(r.timer), str(r.truth)): r for r in agreement_df.itertuples(index=False)}

    def side(truth: str | None) -> tuple[float, float, bool | None, float]:
        row = stats.get((timer, truth)) if truth else None
        tau = float("nan") if row is None or is_missing(row.kendall_tau) else float(row.kendall_tau)
        regret = float("nan") if row is None or is_missing(row.regret) else float(row.regret)
        floor = fmap.get(str(truth), float("nan")) if truth else float("nan")
        at = None if math.isnan(tau) or math.isnan(floor) else bool(tau >= floor - FLOOR_MARGIN)
        return tau, floor, at, regret

    rows = []
    for p in pairs:
        timer = str(p["timer"])
        m_tau, m_floor, m_at, m_regret = side(p.get("matched_truth"))
        u_tau, u_floor, u_at, _ = side(p.get("unmatched_truth"))
        rows.append(
            {
                "timer": timer,
                "l2": p.get("l2"),
                "mode": p.get("mode"),
                "matched_truth": p.get("matched_truth"),
                "matched_tau": m_tau,
                "matched_floor": m_floor,
                "matched_at_floor": m_at,
                "matched_regret": m_regret,
                "unmatched_truth": p.get("unmatched_truth"),
                "unmatched_tau": u_tau,
                "unmatched_floor": u_floor,
                "unmatched_at_floor": u_at,
            }
        )
    return pd.DataFrame(rows, columns=MATCHED_COLUMNS)
