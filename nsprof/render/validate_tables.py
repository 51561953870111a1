"""What `nsprof validate` prints: the agreement of each timer with each truth (format_agreement),
the per-config values (format_per_config), the truths' own floors and winner stability
(format_floors, describe_winners), the matched-conditions table (format_matched,
MATCHED_HEADERS), how each number was taken (format_conditions) and the verdict
(format_verdict).

Each takes what nsprof.analysis.agreement computed and returns text; nothing here measures or
prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nsprof.analysis.agreement import FLOOR_MARGIN, floor_map, verdicts, wide
from nsprof.analysis.stats import is_missing
from nsprof.render.configs import config_name
from nsprof.render.text import (
    num,
    pct,
    render_table,
    text,
    yes_no,
)

if TYPE_CHECKING:
    import pandas as pd


def _winners_by_truth(floors) -> dict[str, str]:
    if floors is None or isinstance(floors, Mapping) or "winners" not in floors:
        return {}
    out: dict[str, str] = {}
    for truth, winners in zip(floors["truth"], floors["winners"]):
        if isinstance(winners, str):
            out.setdefault(str(truth), winners)
    return out


def _ids(ids) -> str:
    return "{" + ", ".join(str(c) for c in ids) + "}"


def describe_winners(row: Mapping) -> str:
    """Words for one floor row's winner stability (analysis.agreement.winner_stability's columns)."""
    kind, a, b = row.get("winners"), row.get("winner"), row.get("winner_against")
    side = "the repeat" if row.get("against") == "repeat" else str(row.get("against"))
    if not isinstance(kind, str):
        return "-"
    if kind == "same":
        return f"same winner: config {a}"
    tie_a, tie_b = row.get("tie_set"), row.get("tie_set_against")
    if kind == "tied":
        return (
            f"tied: config {a} vs {b} in {side}, each inside the other's tie set "
            f"({_ids(tie_a)} / {_ids(tie_b)})"
        )
    if kind == "untested":
        return f"different: config {a} vs {b} in {side}, no interval to test a tie (fewer than 2 reps)"
    outside = []
    if b not in (tie_a or []):
        outside.append(f"{b} outside this run's tie set {_ids(tie_a or [])}")
    if a not in (tie_b or []):
        outside.append(f"{a} outside {side}'s tie set {_ids(tie_b or [])}")
    return f"different: config {a} vs {b} in {side}; " + "; ".join(outside)


def format_floors(floors) -> str:
    """Each truth's own floor (τ against its repeat, or its sibling mode), how far per-config
    values moved, and whether the two sides' winners were the same config, tied or neither."""
    if floors is None or isinstance(floors, Mapping) or not len(floors):
        return ""
    headers = ["truth", "against", "n", "floor τ", "median change %", "max change %", "winners"]
    rows = []
    for r in floors.to_dict("records"):
        rows.append(
            [
                str(r["truth"]),
                str(r["against"]),
                str(r["n"]),
                num(r["kendall_tau"], ".3f"),
                num(None if is_missing(r["median_rel_change"]) else r["median_rel_change"] * 100, ".1f"),
                num(None if is_missing(r["max_rel_change"]) else r["max_rel_change"] * 100, ".1f"),
                describe_winners(r),
            ]
        )
    return render_table(headers, rows, right={2, 3, 4, 5})


# The columns of a matched-conditions table (validate), in the terminal and on the page.
MATCHED_HEADERS = (
    "timer",
    "L2",
    "mode",
    "matched truth",
    "τ",
    "floor τ",
    "at floor",
    "unmatched truth",
    "τ",
    "floor τ",
    "at floor",
)


def matched_rows(matched) -> list[list[str]]:
    """The cells of the matched-conditions table, one row per timer and matched truth (the
    terminal's and the page's)."""
    return [
        [
            str(r["timer"]),
            text(r["l2"]),
            text(r["mode"]),
            text(r["matched_truth"]),
            num(r["matched_tau"], ".3f"),
            num(r["matched_floor"], ".3f"),
            yes_no(r["matched_at_floor"]),
            text(r["unmatched_truth"]),
            num(r["unmatched_tau"], ".3f"),
            num(r["unmatched_floor"], ".3f"),
            yes_no(r["unmatched_at_floor"]),
        ]
        for r in matched.to_dict("records")
    ]


def format_matched(matched) -> str:
    """Each timer against the truth taken under its own conditions (clocks free, its L2 state)
    beside that truth's floor, and against the unmatched truth beside its floor
    (analysis.agreement.matched_agreement's table); then, per matched truth, the best timer."""
    if matched is None or not len(matched):
        return ""
    headers, rows = list(MATCHED_HEADERS), matched_rows(matched)
    lines = [
        "matched conditions: each timer against the truth run with clocks free (--clock-control none), as the "
        "timers run, and in the timer's own L2 state (cold: --cache-control all, warm: --cache-control none), "
        "beside the unmatched truth (the tool's defaults: base clocks, L2 flushed)",
        render_table(headers, rows, right={4, 5, 8, 9}),
    ]
    for truth, group in matched.groupby("matched_truth", sort=False):
        scored = group[group["matched_tau"].notna()]
        if scored.empty:
            continue
        best = scored.loc[scored["matched_tau"].idxmax()]
        line = f"vs {truth}: best {best['timer']} τ {best['matched_tau']:.2f}"
        if not is_missing(best["matched_floor"]):
            reach = "reaches" if bool(best["matched_at_floor"]) else "stays below"
            line += f", {reach} that truth's floor τ {best['matched_floor']:.2f}"
        if not is_missing(best["unmatched_tau"]):
            line += f" (against {best['unmatched_truth']}: τ {best['unmatched_tau']:.2f}"
            line += "" if is_missing(best["unmatched_floor"]) else f", floor {best['unmatched_floor']:.2f}"
            line += ")"
        lines.append(line)
    return "\n".join(lines)


def format_conditions(conditions: Mapping[str, str]) -> str:
    """How each number was taken: one line per timer and truth."""
    if not conditions:
        return ""
    width = max(len(m) for m in conditions)
    return "\n".join(
        ["how each was taken:"] + [f"  {m:<{width}}  {words}" for m, words in conditions.items()]
    )


def format_agreement(df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None) -> str:
    """A plain fixed-width table, one row per timer × truth; `floor τ` (and `floor winners`:
    same | tied | different between the floor's two runs) when floors are given."""
    fmap = floor_map(floors)
    winners = _winners_by_truth(floors)
    k = df.attrs.get("k", 3)
    headers = ["timer", "truth", "n", "bias ×", "τ", "ρ", "same best", "regret %", f"top-{k}"]
    if fmap:
        headers.append("floor τ")
    if winners:
        headers.append("floor winners")
    rows = []
    for rec in df.itertuples(index=False):
        row = [
            str(rec.timer),
            str(rec.truth),
            str(rec.n),
            num(rec.bias, ".3f"),
            num(rec.kendall_tau, ".3f"),
            num(rec.spearman_rho, ".3f"),
            yes_no(rec.same_best),
            num(None if is_missing(rec.regret) else rec.regret * 100, ".1f"),
            yes_no(rec.top_k_hit),
        ]
        if fmap:
            row.append(num(fmap.get(str(rec.truth)), ".3f"))
        if winners:
            row.append(winners.get(str(rec.truth), "-"))
        rows.append(row)
    return render_table(
        headers,
        rows,
        right=set(range(2, len(headers))) - {len(headers) - 1} if winners else set(range(2, len(headers))),
    )


def format_per_config(
    per_config: pd.DataFrame, configs: list[dict] | None = None, methods: Sequence[str] | None = None
) -> str:
    """Configs as rows, methods as columns, µs with 3 decimals; `configs[config_id]` labels a row."""
    table = wide(per_config, methods)
    headers = ["id"] + (["config"] if configs is not None else []) + [f"{m} µs" for m in table.columns]
    rows = []
    for cid, values in table.iterrows():
        row = [str(cid)]
        if configs is not None:
            row.append(config_name(configs, cid))
        row += [num(None if is_missing(v) else v / 1e3, ",.3f") for v in values]
        rows.append(row)
    first_number = 2 if configs is not None else 1
    return render_table(headers, rows, right={0, *range(first_number, len(headers))})


def format_verdict(
    agreement_df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None
) -> str:
    """One line per truth: which timer tracks it best, its τ and regret, and the truth's own floor
    (the words for analysis.agreement.verdicts)."""
    lines = []
    for v in verdicts(agreement_df, floors):
        if v.timer is None:
            lines.append(f"vs {v.truth}: no timer could be compared (fewer than 2 configs measured by both).")
            continue
        if v.reliable:
            head = f"vs {v.truth}: {v.timer} tracks best"
        elif v.ranks_well:  # regret picked it within the truth's own noise
            head = (
                f"vs {v.truth}: {v.timer} tracks best by regret, though it ranks configs weakly "
                f"({', '.join(v.ranks_well)} rank them reliably)"
            )
        else:
            head = f"vs {v.truth}: no timer ranks configs reliably; best is {v.timer}"
        stats = f"τ {v.kendall_tau:.2f}, regret {pct(v.regret)}"
        if v.floor is None:
            lines.append(f"{head} ({stats}).")
            continue
        what = "own repeatability" if v.against == "repeat" else f"agreement with {v.against}"
        stats += f"; {v.truth}'s {what} τ {v.floor:.2f}"
        if not v.near_floor:
            lines.append(f"{head} ({stats}).")
        elif v.near_floor == (v.timer,):
            lines.append(f"{head} ({stats}), as good as the ground truth's own repeatability.")
        else:
            lines.append(
                f"{head} ({stats}); {', '.join(v.near_floor)} within {FLOOR_MARGIN:.2f} of that τ: "
                "as good as the ground truth's own repeatability."
            )
    return "\n".join(lines)


def format_l2_check(table, timers: Sequence[str]) -> str:
    """validate --l2-check's table (nsprof.analysis.l2.check_table: each finalist's L2 hit rate after
    ncu's flush, the cold timers' flush and none) and what it says of the timers claiming a cold L2."""
    from nsprof.analysis.l2 import COLD_MARGIN, CONDITIONS, VERDICTS, cold_timers

    if table is None:
        return ""
    claim = ", ".join(cold_timers(list(timers)))
    if not len(table):
        if claim:
            return f"L2 check of {claim}: no finalist's hit rate was measured (the failures above say why)"
        return "L2 check: no timer measured here claims a cold L2: nothing checked"
    records = table.to_dict("records")
    rows = [
        [_id(r["config_id"]), text(r["mode"]), *(_rate(r[c]) for c in CONDITIONS), text(r["cold"])]
        for r in records
    ]
    lines = [
        "L2 check: the finalists' L2 hit rate under ncu (lts__t_sector_hit_rate.pct, median of the reps)",
        render_table(["config", "mode", *CONDITIONS, "cold"], rows, right={2, 3, 4}),
    ]
    said = {
        verdict: sorted({_id(r["config_id"]) for r in records if r["cold"] == verdict})
        for verdict in VERDICTS
    }
    cold, warm, unclear, missing = (said[v] for v in VERDICTS)
    if warm:
        lines.append(
            f"the cold timers ({claim}) did NOT measure cold: on config(s) {_ids(warm)} their flush "
            f"left the hit rate over {COLD_MARGIN:g} points above ncu's own flush"
        )
    elif cold:
        lines.append(
            f"the cold timers ({claim}) measured cold: their flush left the hit rate within "
            f"{COLD_MARGIN:g} points of ncu's own flush on config(s) {_ids(cold)}"
        )
    elif unclear:
        lines.append(
            f"cannot tell whether {claim} measured cold: these kernels hit L2 about as often unflushed as flushed"
        )
    if missing:
        lines.append(
            f"not measured under every condition: config(s) {_ids(missing)} (the failures above say why)"
        )
    return "\n".join(lines)


def _id(value) -> str:
    """A config id as written: an integer where it is one."""
    return (
        str(int(value))
        if isinstance(value, (int, float)) and value == value and value == int(value)
        else text(value)
    )


def _rate(value) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if number != number else f"{number:.1f}%"
