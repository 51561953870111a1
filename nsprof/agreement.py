"""How well each fast timer ranks configs the way a ground truth does: the statistics of `nsprof validate`.

Input is one long table, `per_config`: columns `config_id`, `method`, `value_ns` (that method's
per-config median; NaN = not measured). Methods are fast timers ("event", "cupti", "graph_warm",
"tilelang_event", ...) or ground truths ("ncu:direct", "nsys:graph", ...); which is which is the
caller's to say. A tuner only needs the *ranking* right, so the headline figure is Kendall τ;
bias (the level) and regret (what picking by the timer costs) sit beside it, and the truth's own
repeatability (the noise floor) says how much τ any timer could reach.

Nothing here measures, reads files or prints; pandas/numpy/matplotlib are imported inside functions
so that `import nsprof.agreement` stays cheap for the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nsprof.errors import NsprofError
from nsprof.space import config_label

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

AGREEMENT_COLUMNS = [
    "timer", "truth", "n", "bias", "kendall_tau", "spearman_rho", "same_best", "timer_pick",
    "truth_best", "regret", "top_k_hit",
]
FLOOR_COLUMNS = ["truth", "against", "n", "kendall_tau", "median_rel_change", "max_rel_change"]
# A timer whose τ is this close to the truth's own repeatability τ cannot be told apart from
# re-running the truth: the remaining disagreement is the truth's noise, not the timer's fault.
FLOOR_MARGIN = 0.03
# τ values equal at the precision the tables show (two decimals in the verdict) count as a tie.
TAU_TIE = 0.005
# Below this the recommended timer still "tracks best" but should not be trusted for ranking.
WEAK_TAU = 0.5
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


# --------------------------------------------------------------------------- rank statistics

def _paired(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both as float arrays with every pair that has a NaN on either side dropped."""
    import numpy as np

    xa = np.asarray(x, dtype=float).ravel()
    ya = np.asarray(y, dtype=float).ravel()
    if xa.shape != ya.shape:
        raise ValueError(f"x and y differ in length ({xa.size} vs {ya.size})")
    keep = ~(np.isnan(xa) | np.isnan(ya))
    return xa[keep], ya[keep]


def kendall_tau_b(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Kendall's τ-b (ties in x or y shrink the denominator); NaN pairs dropped; NaN if undefined.

    τ-b = (concordant − discordant) / sqrt((pairs − ties_x) · (pairs − ties_y)). Built on an n×n
    sign matrix: O(n²) time and memory, fine for the ≤ 2000 configs of a tuning space (2000² int8
    = 4 MB per matrix) and free of scipy.
    """
    import numpy as np

    xa, ya = _paired(x, y)
    if xa.size < 2:
        return float("nan")
    sx = np.sign(xa[:, None] - xa[None, :]).astype(np.int8)
    sy = np.sign(ya[:, None] - ya[None, :]).astype(np.int8)
    # The matrices are antisymmetric with a zero diagonal, so every unordered pair is counted
    # twice; the factor cancels in the ratio.
    s = float(np.sum(sx.astype(np.int64) * sy))
    untied_x = float(np.count_nonzero(sx))
    untied_y = float(np.count_nonzero(sy))
    if untied_x == 0 or untied_y == 0:
        return float("nan")  # one side is constant: no ranking to agree with
    return s / float(np.sqrt(untied_x * untied_y))


def average_ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of the ranks they span (scipy's "average")."""
    import numpy as np

    a = np.asarray(values, dtype=float).ravel()
    n = a.size
    order = np.argsort(a, kind="mergesort")
    ordered = a[order]
    starts_group = np.r_[True, ordered[1:] != ordered[:-1]] if n else np.zeros(0, dtype=bool)
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    ends = np.r_[starts[1:], n]  # exclusive
    mean_rank = (starts + ends - 1) / 2.0 + 1.0
    ranks = np.empty(n, dtype=float)
    ranks[order] = mean_rank[group]
    return ranks


def spearman_rho(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's ρ: Pearson correlation of average ranks; NaN pairs dropped; NaN if undefined."""
    import numpy as np

    xa, ya = _paired(x, y)
    if xa.size < 2:
        return float("nan")
    rx = average_ranks(xa)
    ry = average_ranks(ya)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = float(np.sqrt(np.dot(rx, rx) * np.dot(ry, ry)))
    if denom == 0.0:
        return float("nan")
    return float(np.dot(rx, ry)) / denom


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
        "n": int(both.sum()), "bias": float("nan"), "kendall_tau": float("nan"),
        "spearman_rho": float("nan"), "same_best": None, "timer_pick": None, "truth_best": None,
        "regret": float("nan"), "top_k_hit": None,
    }
    if out["n"] == 0:
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        out["bias"] = float(np.median(t / g))
    out["kendall_tau"] = kendall_tau_b(t, g)
    out["spearman_rho"] = spearman_rho(t, g)
    # Picks are made among the common configs only, so timer and truth choose from the same set;
    # a config the truth failed on would otherwise give an undefined regret. Ties go to the
    # lower config id (stable sort on id-ordered rows).
    by_timer = np.argsort(t, kind="mergesort")
    pick = by_timer[0]
    best = int(np.argmin(g))
    truth_min = g[best]
    out["timer_pick"] = int(cid[pick])
    out["truth_best"] = int(cid[best])
    # "Same best" means the timer's pick is *a* truth-best config, so a tie in the truth does not
    # count against the timer (and same_best ⇔ regret == 0 holds exactly).
    out["same_best"] = bool(g[pick] == truth_min)
    out["regret"] = float(g[pick] / truth_min - 1.0) if truth_min != 0 else float("nan")
    out["top_k_hit"] = bool(np.any(g[by_timer[:k]] == truth_min))
    return out


def agreement(per_config: pd.DataFrame, timers: Sequence[str], truths: Sequence[str], k: int = 3) -> pd.DataFrame:
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
        df[col] = pd.array([None if _is_nan(v) else bool(v) for v in df[col]], dtype="boolean")
    for col in ("timer_pick", "truth_best"):
        df[col] = pd.array([None if _is_nan(v) else int(v) for v in df[col]], dtype="Int64")
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
        "truth": truth, "against": against, "n": int(both.sum()), "kendall_tau": kendall_tau_b(a, b),
        "median_rel_change": float(np.median(rel)) if rel.size else float("nan"),
        "max_rel_change": float(np.max(rel)) if rel.size else float("nan"),
    }


def _floor_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rows, columns=FLOOR_COLUMNS)
    df["n"] = df["n"].astype("int64")
    return df


def noise_floor(run_a: pd.DataFrame, run_b: pd.DataFrame, truths: Sequence[str] | None = None) -> pd.DataFrame:
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
                rows.append(_floor_row(truth, other, table[truth].to_numpy(float), table[other].to_numpy(float)))
                break
    return _floor_frame(rows)


def floor_map(floors: pd.DataFrame | Mapping[str, float] | None) -> dict[str, float]:
    """truth -> floor τ, from a noise_floor/mode_floor frame or a plain mapping (None -> {})."""
    import math

    if floors is None:
        return {}
    if isinstance(floors, Mapping):
        return {str(k): float(v) for k, v in floors.items() if v is not None and not math.isnan(float(v))}
    out: dict[str, float] = {}
    for truth, tau in zip(floors["truth"], floors["kendall_tau"]):
        # a truth may have several floors (repeat run and sibling mode): keep the first given
        if truth not in out and tau == tau:
            out[str(truth)] = float(tau)
    return out


def _floor_against(floors: pd.DataFrame | Mapping[str, float] | None) -> dict[str, str]:
    if floors is None or isinstance(floors, Mapping) or "against" not in floors.columns:
        return {}
    out: dict[str, str] = {}
    for truth, against in zip(floors["truth"], floors["against"]):
        out.setdefault(str(truth), str(against))
    return out


# --------------------------------------------------------------------------- recommendation

def _is_nan(value: Any) -> bool:
    import pandas as pd

    return value is None or bool(pd.isna(value))


def _candidates(rows: pd.DataFrame, floor: float | None) -> pd.DataFrame:
    """The timers whose τ cannot be separated from the best one's."""
    rows = rows[rows["kendall_tau"].notna()]
    if rows.empty:
        return rows
    band = rows["kendall_tau"].max() - TAU_TIE
    if floor is not None:
        # everyone within FLOOR_MARGIN of the truth's own repeatability is as good as re-running
        # the truth; τ cannot rank them, so regret decides among them
        band = min(band, floor - FLOOR_MARGIN)
    return rows[rows["kendall_tau"] >= band]


def recommend(
    agreement_df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None
) -> dict[str, str]:
    """truth -> the timer that ranks configs most like it: highest τ; a tie (τ within 0.005, or
    both within 0.03 of the truth's noise floor where given) goes to lower regret, then higher τ,
    then the order timers were listed. Truths no timer could be compared with are left out."""
    fmap = floor_map(floors)
    out: dict[str, str] = {}
    for truth in dict.fromkeys(agreement_df["truth"]):
        rows = agreement_df[agreement_df["truth"] == truth].reset_index(drop=True)
        cands = _candidates(rows, fmap.get(str(truth)))
        if cands.empty:
            continue
        ranked = sorted(
            cands.itertuples(),
            key=lambda r: (
                float("inf") if _is_nan(r.regret) else r.regret,
                -r.kendall_tau,
                r.Index,
            ),
        )
        out[str(truth)] = str(ranked[0].timer)
    return out


def _pct(value: float) -> str:
    return "n/a" if _is_nan(value) else f"{value * 100:.1f}%"


def verdict(agreement_df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None) -> str:
    """One line per truth: which timer tracks it best, its τ and regret, and the truth's own floor."""
    fmap = floor_map(floors)
    against = _floor_against(floors)
    picks = recommend(agreement_df, floors)
    lines = []
    for truth in dict.fromkeys(agreement_df["truth"]):
        truth = str(truth)
        rows = agreement_df[agreement_df["truth"] == truth]
        if truth not in picks:
            lines.append(f"vs {truth}: no timer could be compared (fewer than 2 configs measured by both).")
            continue
        rec = rows[rows["timer"] == picks[truth]].iloc[0]
        tau = float(rec["kendall_tau"])
        head = f"vs {truth}: {rec['timer']} tracks best" if tau >= WEAK_TAU else (
            f"vs {truth}: no timer ranks configs reliably; best is {rec['timer']}"
        )
        stats = f"τ {tau:.2f}, regret {_pct(rec['regret'])}"
        floor = fmap.get(truth)
        if floor is None:
            lines.append(f"{head} ({stats}).")
            continue
        source = against.get(truth, "repeat")
        what = "own repeatability" if source == "repeat" else f"agreement with {source}"
        stats += f"; {truth}'s {what} τ {floor:.2f}"
        near = [str(r.timer) for r in rows.itertuples() if not _is_nan(r.kendall_tau)
                and r.kendall_tau >= floor - FLOOR_MARGIN]
        if not near:
            lines.append(f"{head} ({stats}).")
        elif near == [str(rec["timer"])]:
            lines.append(f"{head} ({stats}), as good as the ground truth's own repeatability.")
        else:
            lines.append(f"{head} ({stats}); {', '.join(near)} within {FLOOR_MARGIN:.2f} of that τ: "
                         "as good as the ground truth's own repeatability.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- rendering

def _num(value: Any, fmt: str) -> str:
    return "-" if _is_nan(value) else format(value, fmt)


def _yes_no(value: Any) -> str:
    return "-" if _is_nan(value) else ("yes" if bool(value) else "no")


def format_agreement(df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None) -> str:
    """A plain fixed-width table, one row per timer × truth; a `floor τ` column when floors are given."""
    from nsprof.analysis import render_table

    fmap = floor_map(floors)
    k = df.attrs.get("k", 3)
    headers = ["timer", "truth", "n", "bias ×", "τ", "ρ", "same best", "regret %", f"top-{k}"]
    if fmap:
        headers.append("floor τ")
    rows = []
    for rec in df.itertuples(index=False):
        row = [
            str(rec.timer), str(rec.truth), str(rec.n), _num(rec.bias, ".3f"), _num(rec.kendall_tau, ".3f"),
            _num(rec.spearman_rho, ".3f"), _yes_no(rec.same_best),
            _num(None if _is_nan(rec.regret) else rec.regret * 100, ".1f"), _yes_no(rec.top_k_hit),
        ]
        if fmap:
            row.append(_num(fmap.get(str(rec.truth)), ".3f"))
        rows.append(row)
    return render_table(headers, rows, right=set(range(2, len(headers))))




def format_per_config(
    per_config: pd.DataFrame, configs: list[dict] | None = None, methods: Sequence[str] | None = None
) -> str:
    """Configs as rows, methods as columns, µs with 3 decimals; `configs[config_id]` labels a row."""
    from nsprof.analysis import render_table

    table = wide(per_config, methods)
    headers = ["id"] + (["config"] if configs is not None else []) + [f"{m} µs" for m in table.columns]
    rows = []
    for cid, values in table.iterrows():
        row = [str(cid)]
        if configs is not None:
            i = int(cid)
            row.append(config_label(configs[i]) if 0 <= i < len(configs) else "?")
        row += [_num(None if _is_nan(v) else v / 1e3, ",.3f") for v in values]
        rows.append(row)
    first_number = 2 if configs is not None else 1
    return render_table(headers, rows, right={0, *range(first_number, len(headers))})


def _jsonable(value: Any) -> Any:
    """Plain Python for json: numpy scalars unwrapped, NaN/NA/None -> None (JSON null)."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, (bool, int, str)):
        return value
    if _is_nan(value):
        return None
    return str(value)


def _records(df: pd.DataFrame | None) -> list[dict[str, Any]]:
    if df is None:
        return []
    return [_jsonable(dict(zip(df.columns, row))) for row in df.itertuples(index=False, name=None)]


def to_json(
    agreement_df: pd.DataFrame,
    per_config: pd.DataFrame,
    floors: pd.DataFrame | Mapping[str, float] | None,
    verdict: str,
) -> str:
    """A JSON object: agreement (rows), per_config (long rows as given), noise_floor, verdict; NaN -> null."""
    import json

    if floors is None or isinstance(floors, Mapping):
        floor_rows = [{"truth": t, "kendall_tau": tau} for t, tau in floor_map(floors).items()]
    else:
        floor_rows = _records(floors)
    doc = {
        "agreement": _records(agreement_df),
        "per_config": _records(per_config),
        "noise_floor": floor_rows,
        "verdict": verdict,
    }
    # allow_nan=False: a NaN that slipped through would make invalid JSON; fail here instead
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)


# --------------------------------------------------------------------------- plot

def plot(
    per_config: pd.DataFrame,
    agreement_df: pd.DataFrame,
    timers: Sequence[str],
    truths: Sequence[str],
    path: str,
    floors: pd.DataFrame | Mapping[str, float] | None = None,
) -> None:
    """One log–log scatter per truth (timer µs against truth µs, y = x drawn) and a bar panel of τ
    per timer × truth with each truth's noise floor as a horizontal tick. Format from the suffix."""
    from pathlib import Path

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NsprofError("--plot needs matplotlib: pip install 'nsprof[plot]'") from None
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    out = Path(path)
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise NsprofError(f"--plot: {out.name}: use a .png, .svg or .pdf file name")
    timers, truths = list(timers), list(truths)
    table = wide(per_config, list(dict.fromkeys([*timers, *truths])))
    fmap = floor_map(floors)
    colors = {t: f"C{i % 10}" for i, t in enumerate(timers)}

    panels = len(truths) + 1
    # Figure + FigureCanvasAgg rather than pyplot: no global backend switch, nothing left open in
    # a caller's interactive session; savefig still picks the svg/pdf canvas by suffix.
    fig = Figure(figsize=(4.2 * panels, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]

    for ax, truth in zip(axes, truths):
        g = table[truth].to_numpy(float) / 1e3
        lo, hi = np.inf, -np.inf
        for timer in timers:
            t = table[timer].to_numpy(float) / 1e3
            ok = np.isfinite(t) & np.isfinite(g) & (t > 0) & (g > 0)  # log axes need positives
            if not ok.any():
                continue
            ax.scatter(g[ok], t[ok], s=18, color=colors[timer], label=timer, alpha=0.8)
            lo = min(lo, g[ok].min(), t[ok].min())
            hi = max(hi, g[ok].max(), t[ok].max())
        if np.isfinite(lo):
            span = np.array([lo / 1.1, hi * 1.1])
            ax.plot(span, span, color="0.5", linestyle="--", linewidth=1, label="y = x")
            ax.set_xscale("log")
            ax.set_yscale("log")
            # µs ranges of a tuning space often span less than a decade, where default log axes
            # label one tick or collide in 3×10^0 form; plain 1-2-5 labels read better
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
                axis.set_minor_formatter(NullFormatter())
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "nothing measured by both", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(f"{truth} µs")
        ax.set_ylabel("timer µs")
        ax.set_title(f"timers vs {truth}")

    ax = axes[-1]
    width = 0.8 / max(len(timers), 1)
    x = np.arange(len(truths))
    for i, timer in enumerate(timers):
        taus = []
        for truth in truths:
            sel = agreement_df[(agreement_df["timer"] == timer) & (agreement_df["truth"] == truth)]
            taus.append(float(sel["kendall_tau"].iloc[0]) if len(sel) else float("nan"))
        ax.bar(x - 0.4 + width * (i + 0.5), np.nan_to_num(np.array(taus), nan=0.0), width,
               color=colors[timer], label=timer)
    labelled = False
    for j, truth in enumerate(truths):
        if truth in fmap:
            ax.hlines(fmap[truth], j - 0.45, j + 0.45, color="black", linewidth=2,
                      label=None if labelled else "truth's noise floor")
            labelled = True
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_xticks(x, truths, rotation=20, ha="right")
    lowest = np.nanmin(agreement_df["kendall_tau"].to_numpy(float)) if agreement_df["kendall_tau"].notna().any() else 0
    ax.set_ylim(min(0.0, float(lowest)) - 0.05, 1.05)
    ax.set_ylabel("Kendall τ")
    ax.set_title("ranking agreement")
    # below the axes: τ bars reach 1.0 and any spot inside would cover one
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=2, frameon=False)

    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
