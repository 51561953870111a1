"""What `nsprof validate` concludes per truth: the recommended timer (`recommend`) and the
`Verdict`, judged against the truth's own floor (`floor_map`: a noise_floor/mode_floor frame as
truth -> floor τ)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsprof.analysis.stats import is_missing

if TYPE_CHECKING:
    import pandas as pd

# A timer whose τ is this close to the truth's own repeatability τ cannot be told apart from
# re-running the truth: the remaining disagreement is the truth's noise, not the timer's fault.
FLOOR_MARGIN = 0.03
# τ values equal at the precision the tables show (two decimals in the verdict) count as a tie.
TAU_TIE = 0.005
# Below this the recommended timer still "tracks best" but should not be trusted for ranking.
WEAK_TAU = 0.5


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


def floor_against(floors: pd.DataFrame | Mapping[str, float] | None) -> dict[str, str]:
    if floors is None or isinstance(floors, Mapping) or "against" not in floors.columns:
        return {}
    out: dict[str, str] = {}
    for truth, against in zip(floors["truth"], floors["against"]):
        out.setdefault(str(truth), str(against))
    return out


# --------------------------------------------------------------------------- recommendation


def _candidates(rows: pd.DataFrame, floor: float | None) -> pd.DataFrame:
    """The timers whose τ cannot be separated from the best one's."""
    rows = rows[rows["kendall_tau"].notna()]
    if rows.empty:
        return rows
    band = rows["kendall_tau"].max() - TAU_TIE
    if floor is not None:
        # The truth's two runs disagree by 1 - floor in τ: timers closer to the best than that
        # cannot be ordered by τ beyond the truth's own noise. Everyone within FLOOR_MARGIN of the
        # floor is as good as re-running the truth. Among them all, regret decides.
        band = min(rows["kendall_tau"].max() - max(TAU_TIE, 1.0 - floor), floor - FLOOR_MARGIN)
    return rows[rows["kendall_tau"] >= band]


def recommend(
    agreement_df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None
) -> dict[str, str]:
    """truth -> the timer that ranks configs most like it: highest τ; a tie (τ within 0.005 of the
    best, or where the truth's floor is given within 1 - floor of the best or within 0.03 of the
    floor) goes to lower regret (against the truth's best of every config it measured), then to a timer
    that measured as many configs as any of them, then higher τ, then the order timers were listed.
    Truths no timer could be compared with are left out."""
    fmap = floor_map(floors)
    out: dict[str, str] = {}
    for truth in dict.fromkeys(agreement_df["truth"]):
        rows = agreement_df[agreement_df["truth"] == truth].reset_index(drop=True)
        cands = _candidates(rows, fmap.get(str(truth)))
        if cands.empty:
            continue
        most = cands["n"].max()  # configs a timer did not measure it could not pick
        ranked = sorted(
            cands.itertuples(),
            key=lambda r: (
                float("inf") if is_missing(r.regret) else r.regret,
                r.n < most,
                -r.kendall_tau,
                r.Index,
            ),
        )
        out[str(truth)] = str(ranked[0].timer)
    return out


@dataclass(frozen=True)
class Verdict:
    """What `nsprof validate` concludes about one truth.

    `timer` is the recommended timer (None: no timer could be compared with this truth), with
    its τ and regret; `floor` the truth's own floor τ where given, measured `against` a repeated
    run ("repeat") or a sibling mode; `near_floor` every timer within FLOOR_MARGIN of that floor;
    `ranks_well` every timer with τ ≥ WEAK_TAU (regret may pick another within the truth's noise).
    """

    truth: str
    timer: str | None = None
    kendall_tau: float = float("nan")
    regret: float = float("nan")
    floor: float | None = None
    against: str = "repeat"
    near_floor: tuple[str, ...] = ()
    ranks_well: tuple[str, ...] = ()

    @property
    def reliable(self) -> bool:
        """Whether the recommended timer ranks configs well enough to be trusted (τ ≥ WEAK_TAU)."""
        return self.kendall_tau >= WEAK_TAU


def verdicts(
    agreement_df: pd.DataFrame, floors: pd.DataFrame | Mapping[str, float] | None = None
) -> list[Verdict]:
    """One Verdict per truth, in the order truths first appear in the agreement table."""
    fmap = floor_map(floors)
    against = floor_against(floors)
    picks = recommend(agreement_df, floors)
    out = []
    for truth in dict.fromkeys(agreement_df["truth"]):
        truth = str(truth)
        if truth not in picks:
            out.append(Verdict(truth))
            continue
        rows = agreement_df[agreement_df["truth"] == truth]
        rec = rows[rows["timer"] == picks[truth]].iloc[0]
        floor = fmap.get(truth)
        near = (
            ()
            if floor is None
            else tuple(
                str(r.timer)
                for r in rows.itertuples()
                if not is_missing(r.kendall_tau) and r.kendall_tau >= floor - FLOOR_MARGIN
            )
        )
        well = tuple(
            str(r.timer)
            for r in rows.itertuples()
            if not is_missing(r.kendall_tau) and r.kendall_tau >= WEAK_TAU
        )
        out.append(
            Verdict(
                truth,
                str(rec["timer"]),
                float(rec["kendall_tau"]),
                float(rec["regret"]),
                floor,
                against.get(truth, "repeat"),
                near,
                well,
            )
        )
    return out
