"""nsprof.analysis (stats, agreement) and nsprof.render (tables, json, plot): rank statistics, agreement table, noise floor, verdict and output, all on
hand-worked numbers (the arithmetic is in the comments)."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest

from nsprof.analysis.agreement import agreement, mode_floor, noise_floor
from nsprof.analysis.stats import average_ranks, kendall_tau_b, spearman_rho
from nsprof.analysis.verdict import recommend
from nsprof.errors import NsprofError
from nsprof.render.json import agreement_record, validate_document
from nsprof.render.plot import plot
from nsprof.render.validate_tables import format_agreement, format_per_config
from nsprof.render.validate_tables import format_verdict as verdict

NAN = float("nan")


def to_json(*args, **kwargs) -> str:
    return validate_document([agreement_record(*args, **kwargs)])


def long(columns: dict[str, list[float]], scale_ns: float = 1e3) -> pd.DataFrame:
    """{method: [value per config id 0..]} in µs -> the long per_config table in ns."""
    rows = [(cid, method, v * scale_ns) for method, values in columns.items() for cid, v in enumerate(values)]
    return pd.DataFrame(rows, columns=["config_id", "method", "value_ns"])


# --------------------------------------------------------------------------- Kendall τ-b


def test_tau_one_swapped_pair():
    # 4 items -> 6 pairs; only (2,3) vs (3,2) is discordant: τ = (5 − 1) / 6
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)


def test_tau_extremes():
    assert kendall_tau_b([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)


def test_tau_b_ties_no_discordance():
    # x=[1,2,2,3], y=[1,2,3,3]; pairs (i<j):
    # (0,1) C  (0,2) C  (0,3) C  (1,2) tie in x  (1,3) C  (2,3) tie in y
    # C=4, D=0, 6 pairs, 1 tied in x, 1 tied in y: τb = 4 / sqrt((6−1)·(6−1)) = 0.8
    assert kendall_tau_b([1, 2, 2, 3], [1, 2, 3, 3]) == pytest.approx(0.8)


def test_tau_b_ties_with_discordance():
    # x=[1,1,2,3], y=[2,1,1,3]:
    # (0,1) tie in x  (0,2) dx+ dy− D  (0,3) C  (1,2) tie in y  (1,3) C  (2,3) C
    # C=3, D=1: τb = (3 − 1) / sqrt(5·5) = 0.4
    assert kendall_tau_b([1, 1, 2, 3], [2, 1, 1, 3]) == pytest.approx(0.4)


def test_tau_drops_nan_pairs():
    # pairs with a NaN on either side go: left (1,1), (2,3), (3,2) -> one swap of 3 pairs:
    # C=2, D=1: τ = 1/3
    x = [1, 2, NAN, 3, 4]
    y = [1, 3, 5, 2, NAN]
    assert kendall_tau_b(x, y) == pytest.approx(1 / 3)


def test_tau_undefined():
    assert math.isnan(kendall_tau_b([], []))
    assert math.isnan(kendall_tau_b([1.0], [2.0]))
    assert math.isnan(kendall_tau_b([1, NAN, 3], [NAN, 2, NAN]))  # no usable pair
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))  # constant x: nothing to rank
    with pytest.raises(ValueError):
        kendall_tau_b([1, 2], [1, 2, 3])


# --------------------------------------------------------------------------- Spearman ρ


def test_average_ranks():
    # 10 is smallest -> 1; the two 20s share ranks 2 and 3 -> 2.5; 40 -> 4
    assert average_ranks([20, 10, 40, 20]).tolist() == [2.5, 1.0, 4.0, 2.5]


def test_spearman_no_ties():
    # ranks x=[1,2,3,4,5], y=[2,1,4,3,5]; d=[−1,1,−1,1,0], Σd²=4:
    # ρ = 1 − 6·4 / (5·(25−1)) = 1 − 24/120 = 0.8
    assert spearman_rho([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)


def test_spearman_ties_average_ranks():
    # x=[1,2,2,3] -> ranks [1,2.5,2.5,4], centred [−1.5,0,0,1.5], Σ² = 4.5
    # y=[1,2,3,4] -> ranks [1,2,3,4],     centred [−1.5,−.5,.5,1.5], Σ² = 5
    # Σ product = 2.25 + 0 + 0 + 2.25 = 4.5: ρ = 4.5 / sqrt(4.5·5) = sqrt(0.9)
    assert spearman_rho([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))


def test_spearman_nan_and_undefined():
    # NaN pairs dropped, as for τ: left x=[1,2,3], y=[1,3,2]; d=[0,−1,1], Σd²=2: ρ = 1 − 12/24 = 0.5
    assert spearman_rho([1, 2, NAN, 3, 4], [1, 3, 5, 2, NAN]) == pytest.approx(0.5)
    assert math.isnan(spearman_rho([1.0], [1.0]))
    assert math.isnan(spearman_rho([2, 2, 2], [1, 2, 3]))


@pytest.mark.filterwarnings("ignore")  # scipy warns on the constant/short samples drawn on purpose
def test_against_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for n in (2, 3, 10, 57, 200):
        for _ in range(5):
            # a small integer range forces many ties on both sides
            x = rng.integers(0, 6, n).astype(float)
            y = (x + rng.integers(-3, 4, n)).astype(float)
            x[rng.random(n) < 0.1] = np.nan
            keep = ~np.isnan(x)
            want_tau = stats.kendalltau(x[keep], y[keep]).statistic
            want_rho = stats.spearmanr(x[keep], y[keep]).statistic
            got_tau, got_rho = kendall_tau_b(x, y), spearman_rho(x, y)
            if math.isnan(want_tau):
                assert math.isnan(got_tau)
            else:
                assert got_tau == pytest.approx(want_tau, abs=1e-12)
            if math.isnan(want_rho):
                assert math.isnan(got_rho)
            else:
                assert got_rho == pytest.approx(want_rho, abs=1e-12)


# --------------------------------------------------------------------------- agreement

# Five configs (µs). ncu:direct's best is config 0 (10); nsys:graph's best is config 1 (3).
#   cupti      = ncu/2 exactly
#   event      picks config 1 (20)
#   graph_warm failed on config 1 and picks config 4 (3)
#   triton     measured nothing
TABLE = {
    "ncu:direct": [10, 12, 11, 20, 15],
    "nsys:graph": [4, 3, 5, 8, 6],
    "cupti": [5, 6, 5.5, 10, 7.5],
    "event": [30, 20, 25, 40, 35],
    "graph_warm": [9.5, NAN, 6, 9, 3],
    "triton_do_bench": [NAN] * 5,
}
TIMERS = ["cupti", "event", "graph_warm", "triton_do_bench"]
TRUTHS = ["ncu:direct", "nsys:graph"]


@pytest.fixture
def per_config() -> pd.DataFrame:
    return long(TABLE)


@pytest.fixture
def agree(per_config) -> pd.DataFrame:
    return agreement(per_config, TIMERS, TRUTHS)


def row(df: pd.DataFrame, timer: str, truth: str) -> pd.Series:
    sel = df[(df["timer"] == timer) & (df["truth"] == truth)]
    assert len(sel) == 1
    return sel.iloc[0]


def test_agreement_shape(agree):
    assert list(agree.columns) == [
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
    # truths outer, timers inner, in the order given
    assert list(zip(agree["truth"], agree["timer"])) == [(g, t) for g in TRUTHS for t in TIMERS]
    assert agree.attrs["k"] == 3


def test_agreement_perfect_timer(agree):
    r = row(agree, "cupti", "ncu:direct")
    # cupti = ncu/2 on every config: ratio 0.5 everywhere, identical ranking
    assert r["n"] == 5
    assert r["bias"] == pytest.approx(0.5)
    assert r["kendall_tau"] == pytest.approx(1.0)
    assert r["spearman_rho"] == pytest.approx(1.0)
    assert r["same_best"] and r["top_k_hit"]
    assert r["timer_pick"] == 0 and r["truth_best"] == 0
    assert r["regret"] == 0.0


def test_agreement_wrong_pick(agree):
    r = row(agree, "event", "ncu:direct")
    # event/ncu per config: 30/10=3, 20/12=1.667, 25/11=2.273, 40/20=2, 35/15=2.333 -> median 25/11
    assert r["bias"] == pytest.approx(25 / 11)
    # pairs: (0,1) D (0,2) D (1,2) D, the other 7 C: τ = (7 − 3)/10
    assert r["kendall_tau"] == pytest.approx(0.4)
    # ranks ncu [1,3,2,5,4], event [3,1,2,5,4]; d=[−2,2,0,0,0], Σd²=8: ρ = 1 − 48/120
    assert r["spearman_rho"] == pytest.approx(0.6)
    # event picks config 1 (20 µs); by ncu that config takes 12 against the best 10: regret 20%
    assert r["timer_pick"] == 1 and r["truth_best"] == 0
    assert not r["same_best"]
    assert r["regret"] == pytest.approx(12 / 10 - 1)
    # event's 3 fastest: 1 (20), 2 (25), 0 (30) — holds ncu's best
    assert r["top_k_hit"]


def test_agreement_missing_values(agree):
    r = row(agree, "graph_warm", "ncu:direct")
    # config 1 unmeasured: common configs 0,2,3,4 (ncu 10,11,20,15; graph 9.5,6,9,3)
    assert r["n"] == 4
    # ratios 0.95, 6/11, 0.45, 0.2 -> median (0.45 + 6/11) / 2
    assert r["bias"] == pytest.approx((0.45 + 6 / 11) / 2)
    # pairs (0,2) D (0,3) D (0,4) D (2,3) C (2,4) D (3,4) C: τ = (2 − 4)/6
    assert r["kendall_tau"] == pytest.approx(-1 / 3)
    # pick: config 4 (3 µs), by ncu 15 against 10: regret 50%
    assert r["timer_pick"] == 4 and r["regret"] == pytest.approx(0.5)
    # 3 fastest: 4 (3), 2 (6), 3 (9); config 0 (9.5) is 4th: miss
    assert not r["top_k_hit"]


def test_agreement_second_truth(agree):
    # vs nsys [4,3,5,8,6] (best: config 1): event's pick is config 1 -> same best, regret 0
    r = row(agree, "event", "nsys:graph")
    assert r["same_best"] and r["regret"] == 0.0 and r["truth_best"] == 1
    # ranks nsys [2,1,3,5,4] vs event [3,1,2,5,4]: only (0,2) discordant: τ = 8/10
    assert r["kendall_tau"] == pytest.approx(0.8)
    # cupti picks config 0: nsys 4 against 3: regret 1/3; ranks cupti [1,3,2,5,4]: (0,1), (1,2) D: τ = 6/10
    r = row(agree, "cupti", "nsys:graph")
    assert r["regret"] == pytest.approx(1 / 3)
    assert r["kendall_tau"] == pytest.approx(0.6)


def test_agreement_nothing_measured(agree):
    r = row(agree, "triton_do_bench", "ncu:direct")
    assert r["n"] == 0
    assert math.isnan(r["bias"]) and math.isnan(r["kendall_tau"]) and math.isnan(r["regret"])
    assert pd.isna(r["same_best"]) and pd.isna(r["timer_pick"]) and pd.isna(r["top_k_hit"])


def test_agreement_method_absent_entirely(per_config):
    df = agreement(per_config, ["cupti", "not_run"], ["ncu:direct", "ncu:graph"])
    assert row(df, "not_run", "ncu:direct")["n"] == 0
    assert row(df, "cupti", "ncu:graph")["n"] == 0


def test_ties_in_truth_do_not_count_against_the_timer():
    # truth: configs 0 and 2 tie for best (5). The timer picks 2; a plain argmin of the truth says 0,
    # but the pick costs nothing, so it counts as the same best.
    pc = long({"truth": [5, 7, 5, 9], "timer": [2, 3, 1, 4]})
    r = agreement(pc, ["timer"], ["truth"]).iloc[0]
    assert r["timer_pick"] == 2 and r["truth_best"] == 0
    assert r["same_best"] and r["regret"] == 0.0 and r["top_k_hit"]


def test_top_k_parameter(per_config):
    # graph_warm vs ncu: config 0 is its 4th fastest: missed at k=3, hit at k=4
    df = agreement(per_config, ["graph_warm"], ["ncu:direct"], k=4)
    assert df.attrs["k"] == 4
    assert df.iloc[0]["top_k_hit"]
    assert "top-4" in format_agreement(df)


def test_duplicate_rows_pool_by_median():
    pc = pd.DataFrame(
        {"config_id": [0, 0, 0, 1], "method": ["t", "t", "t", "t"], "value_ns": [1.0, 5.0, 3.0, 9.0]}
    )
    pc = pd.concat([pc, long({"g": [3e-3, 9e-3]})])
    r = agreement(pc, ["t"], ["g"]).iloc[0]
    assert r["bias"] == pytest.approx(1.0)  # median of 1,5,3 = 3 against 3


# --------------------------------------------------------------------------- noise floor


def test_noise_floor_two_runs():
    run_a = long({"ncu:direct": [10, 12, 11, 20], "nsys:graph": [3, 4, 5, 6], "event": [1, 2, 3, 4]})
    run_b = long({"ncu:direct": [11.2, 12, 10.8, 20], "event": [1, 2, 3, 4]})
    floors = noise_floor(run_a, run_b, truths=["ncu:direct", "nsys:graph"])
    # nsys:graph is only in run_a: no floor for it
    assert floors["truth"].tolist() == ["ncu:direct"]
    r = floors.iloc[0]
    assert r["against"] == "repeat" and r["n"] == 4
    # ranks a [1,3,2,4], b [2,3,1,4] (10.8 < 11.2): only (0,2) discordant: τ = (5 − 1)/6
    assert r["kendall_tau"] == pytest.approx(4 / 6)
    # |b/a − 1| = 0.12, 0, 0.2/11 = 0.01818, 0 -> median (0 + 0.01818)/2, max 0.12
    assert r["median_rel_change"] == pytest.approx(0.1 / 11)
    assert r["max_rel_change"] == pytest.approx(0.12)
    # without `truths`: every method in both runs, event included
    assert noise_floor(run_a, run_b)["truth"].tolist() == ["ncu:direct", "event"]


def test_noise_floor_unmatched_configs():
    # run_b lacks config 3 and failed on config 0: only configs 1 and 2 count
    run_a = long({"ncu:direct": [10, 12, 11, 20]})
    run_b = long({"ncu:direct": [NAN, 13.2, 11]})
    r = noise_floor(run_a, run_b).iloc[0]
    assert r["n"] == 2
    assert r["kendall_tau"] == pytest.approx(1.0)  # 12 > 11 and 13.2 > 11
    assert r["max_rel_change"] == pytest.approx(0.1)


def test_mode_floor():
    pc = long(
        {"ncu:direct": [10, 12, 11, 20], "ncu:graph": [11.2, 12, 10.8, 20], "nsys:direct": [1, 2, 3, 4]}
    )
    floors = mode_floor(pc, ["ncu:direct", "ncu:graph", "nsys:direct"])
    # nsys has no sibling mode: no row
    assert floors["truth"].tolist() == ["ncu:direct", "ncu:graph"]
    assert floors["against"].tolist() == ["ncu:graph", "ncu:direct"]
    assert floors["kendall_tau"].tolist() == pytest.approx([4 / 6, 4 / 6])


# --------------------------------------------------------------------------- recommend / verdict


def test_recommend(agree):
    # vs ncu: cupti τ 1.0; vs nsys: event τ 0.8 beats cupti 0.6 and graph_warm −1/3
    assert recommend(agree) == {"ncu:direct": "cupti", "nsys:graph": "event"}


def test_recommend_tie_goes_to_lower_regret():
    # both timers reverse exactly one adjacent pair (τ = 4/6 each) but "late" swaps the two slowest
    # configs and so still picks the best; "early" swaps the two fastest: regret 11/10 − 1
    pc = long({"g": [10, 11, 12, 13], "early": [2, 1, 3, 4], "late": [1, 2, 4, 3]})
    df = agreement(pc, ["early", "late"], ["g"])
    assert df["kendall_tau"].tolist() == pytest.approx([4 / 6, 4 / 6])
    assert recommend(df) == {"g": "late"}


def _two_timers(timers, taus, regrets, n: int):
    """Two timers' agreement rows against one truth "g"."""
    return pd.DataFrame(
        {
            "timer": list(timers),
            "truth": ["g", "g"],
            "n": [n, n],
            "kendall_tau": list(taus),
            "regret": list(regrets),
        }
    )


def test_recommend_floor_widens_the_tie():
    # "sharp": τ 0.87, regret 5%; "close": τ 0.80, regret 0. Without a floor τ decides (0.87).
    # With the truth's own floor at 0.82, both are ≥ 0.82 − 0.03 = 0.79: τ cannot tell them apart
    # beyond the truth's noise, so regret decides. A floor of 0.95 (band 0.92) takes neither in.
    df = _two_timers(("sharp", "close"), taus=(0.87, 0.80), regrets=(0.05, 0.0), n=10)
    assert recommend(df) == {"g": "sharp"}
    assert recommend(df, {"g": 0.82}) == {"g": "close"}
    assert recommend(df, {"g": 0.95}) == {"g": "sharp"}


def test_recommend_ties_taus_closer_than_the_truth_disagrees_with_itself():
    # Shaped like the Triton matmul's third shape against nsys on the H200: no timer near the floor
    # (0.96); "high" τ 0.791 picks a config 2.8% slower, "low" τ 0.778 nsys's own winner. The truth's
    # two runs disagree on 1 − 0.96 = 0.04 of τ: a gap of 0.013 is inside its own noise, so regret
    # decides. A truth that repeats to 0.99 (noise 0.01) separates them: τ decides.
    df = _two_timers(("high", "low"), taus=(0.791, 0.778), regrets=(0.028, 0.0), n=18)
    assert recommend(df, {"g": 0.96}) == {"g": "low"}
    assert recommend(df, {"g": 0.99}) == {"g": "high"}
    assert recommend(df) == {"g": "high"}


def test_recommend_skips_truth_without_comparison():
    df = agreement(long({"g": [1, 2, 3], "t": [NAN, NAN, 1]}), ["t"], ["g"])
    assert recommend(df) == {}
    assert "no timer could be compared" in verdict(df)


def test_verdict_text(agree):
    text = verdict(agree, {"ncu:direct": 0.95, "nsys:graph": 0.99})
    lines = text.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("vs ncu:direct: cupti tracks best (τ 1.00, regret 0.0%")
    assert "repeatability τ 0.95" in lines[0]
    # cupti's 1.00 ≥ 0.95 − 0.03: as good as re-running ncu
    assert "as good as the ground truth's own repeatability" in lines[0]
    assert lines[1].startswith("vs nsys:graph: event tracks best (τ 0.80, regret 0.0%")
    assert "as good as" not in lines[1]  # 0.80 is far below 0.99 − 0.03


def test_verdict_without_floors(agree):
    assert verdict(agree) == (
        "vs ncu:direct: cupti tracks best (τ 1.00, regret 0.0%).\n"
        "vs nsys:graph: event tracks best (τ 0.80, regret 0.0%)."
    )


def test_verdict_weak_and_mode_floor():
    # every timer ranks against the truth badly: say so rather than "tracks best"
    pc = long({"g": [1, 2, 3, 4], "t": [4, 3, 1, 2]})
    df = agreement(pc, ["t"], ["g"])
    assert "no timer ranks configs reliably; best is t" in verdict(df)
    floors = pd.DataFrame(
        {
            "truth": ["g"],
            "against": ["g2"],
            "n": [4],
            "kendall_tau": [0.9],
            "median_rel_change": [0.0],
            "max_rel_change": [0.0],
        }
    )
    assert "g's agreement with g2 τ 0.90" in verdict(df, floors)


def test_design_seed_shape():
    # Shaped like the seed GEMM's numbers on the H200 (µs): cold-L2 timers track ncu (which flushes caches),
    # warm-L2 timers track nsys, events sit on a ~7.5 µs launch floor and track neither.
    cold = [5.3, 5.5, 5.2, 6.0, 5.8, 5.4, 6.3, 5.6]
    warm = [3.0, 2.9, 3.2, 3.1, 2.95, 3.3, 3.05, 3.15]
    pc = long(
        {
            "ncu:direct": cold,
            "nsys:direct": warm,
            "tilelang_cupti": [c * 0.76 for c in cold],
            "graph_warm": [w * 1.2 for w in warm],
            "event": [7.6, 7.4, 7.5, 7.45, 7.55, 7.52, 7.48, 7.58],
        }
    )
    df = agreement(pc, ["event", "tilelang_cupti", "graph_warm"], ["ncu:direct", "nsys:direct"])
    assert recommend(df) == {"ncu:direct": "tilelang_cupti", "nsys:direct": "graph_warm"}
    text = verdict(df, {"ncu:direct": 0.95, "nsys:direct": 0.99})
    assert "vs ncu:direct: tilelang_cupti tracks best" in text
    assert "vs nsys:direct: graph_warm tracks best" in text
    assert "event" not in text
    # the event timer is ~1.4× ncu's level (7.5 against 5.5)
    assert row(df, "event", "ncu:direct")["bias"] == pytest.approx(1.36, abs=0.03)


# --------------------------------------------------------------------------- rendering


def test_format_agreement(agree):
    text = format_agreement(agree, {"ncu:direct": 0.95})
    lines = text.splitlines()
    assert lines[0].split() == [
        "timer",
        "truth",
        "n",
        "bias",
        "×",
        "τ",
        "ρ",
        "same",
        "best",
        "regret",
        "%",
        "top-3",
        "floor",
        "τ",
    ]
    assert len(lines) == 2 + len(TIMERS) * len(TRUTHS)
    assert lines[3].split() == [
        "event",
        "ncu:direct",
        "5",
        "2.273",
        "0.400",
        "0.600",
        "no",
        "20.0",
        "yes",
        "0.950",
    ]
    # the unmeasured timer shows dashes, and nsys has no floor
    assert lines[-1].split() == ["triton_do_bench", "nsys:graph", "0", "-", "-", "-", "-", "-", "-", "-"]
    assert "floor" not in format_agreement(agree)


def test_format_per_config(per_config):
    configs = [{"block_N": 64, "stages": s} for s in range(5)]
    lines = format_per_config(per_config, configs).splitlines()
    assert lines[0].split()[:3] == ["id", "config", "ncu:direct"]
    assert len(lines) == 2 + 5
    # config 1: ncu 12 µs, nsys 3, cupti 6, event 20, graph_warm missing, triton missing
    assert lines[3].split() == ["1", "block_N=64,stages=1", "12.000", "3.000", "6.000", "20.000", "-", "-"]
    plain = format_per_config(per_config, None, methods=["event", "ncu:direct"]).splitlines()
    assert plain[0].split() == ["id", "event", "µs", "ncu:direct", "µs"]
    assert plain[2].split() == ["0", "30.000", "10.000"]


def test_to_json_round_trip(agree, per_config):
    floors = noise_floor(per_config, per_config.assign(value_ns=per_config["value_ns"] * 1.01), TRUTHS)
    text = to_json(agree, per_config, floors, verdict(agree, floors))
    doc = json.loads(text)
    assert set(doc) == {"agreement", "per_config", "noise_floor", "verdict"}
    assert "NaN" not in text
    assert len(doc["agreement"]) == len(agree)
    first = doc["agreement"][0]
    assert first == {
        "timer": "cupti",
        "truth": "ncu:direct",
        "n": 5,
        "bias": 0.5,
        "kendall_tau": 1.0,
        "spearman_rho": 1.0,
        "same_best": True,
        "timer_pick": 0,
        "truth_best": 0,
        "regret": 0.0,
        "top_k_hit": True,
    }
    empty = next(r for r in doc["agreement"] if r["timer"] == "triton_do_bench")
    assert empty["n"] == 0
    assert all(
        empty[k] is None for k in ("bias", "kendall_tau", "same_best", "timer_pick", "regret", "top_k_hit")
    )
    missing = [r for r in doc["per_config"] if r["method"] == "graph_warm" and r["config_id"] == 1]
    assert missing == [{"config_id": 1, "method": "graph_warm", "value_ns": None}]
    # a uniform 1% shift keeps the ranking: τ 1, every change 1%
    assert [f["truth"] for f in doc["noise_floor"]] == TRUTHS
    assert doc["noise_floor"][0]["kendall_tau"] == pytest.approx(1.0)
    assert doc["noise_floor"][0]["max_rel_change"] == pytest.approx(0.01)
    assert doc["verdict"].startswith("vs ncu:direct: cupti")


def test_to_json_floor_mapping_and_none(agree, per_config):
    assert json.loads(to_json(agree, per_config, None, ""))["noise_floor"] == []
    doc = json.loads(to_json(agree, per_config, {"ncu:direct": 0.95, "nsys:graph": NAN}, "v"))
    assert doc["noise_floor"] == [{"truth": "ncu:direct", "kendall_tau": 0.95}]


# --------------------------------------------------------------------------- plot


def test_plot_png(tmp_path, agree, per_config):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sub" / "validate.png"
    plot(per_config, agree, TIMERS, TRUTHS, str(out), floors={"ncu:direct": 0.95})
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plot_svg(tmp_path, agree, per_config):
    pytest.importorskip("matplotlib")
    out = tmp_path / "validate.svg"
    plot(per_config, agree, TIMERS, TRUTHS, str(out))
    assert b"<svg" in out.read_bytes()[:2000]


def test_plot_bad_suffix(tmp_path, agree, per_config):
    pytest.importorskip("matplotlib")
    with pytest.raises(NsprofError, match=r"\.png"):
        plot(per_config, agree, TIMERS, TRUTHS, str(tmp_path / "validate.jpg"))


def test_plot_without_matplotlib(tmp_path, agree, per_config, monkeypatch):
    # a None entry in sys.modules makes `import matplotlib` raise ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(NsprofError, match=r"pip install 'nsprof\[plot\]'"):
        plot(per_config, agree, TIMERS, TRUTHS, str(tmp_path / "x.png"))


def test_a_timer_that_failed_on_the_truths_best_config_has_that_regret_and_is_not_recommended():
    """cupti measured only configs 8 and 9 (it saw no kernel on the others): its pick, config 8, is 80%
    slower than the truth's best, config 0, which it never measured. Against the best of every config the
    truth measured, not only those both measured; and a timer that measured every config goes first."""
    from nsprof.render.validate_tables import format_verdict

    truth = [1000.0 + 100 * c for c in range(10)]
    rows = []
    for c, g in enumerate(truth):
        rows.append({"config_id": c, "method": "ncu:direct", "value_ns": g})
        rows.append({"config_id": c, "method": "cupti", "value_ns": g if c >= 8 else float("nan")})
        rows.append({"config_id": c, "method": "graph_warm", "value_ns": truth[13 - c] if c in (6, 7) else g})
    table = agreement(pd.DataFrame(rows), ["cupti", "graph_warm"], ["ncu:direct"])
    cupti = table[table["timer"] == "cupti"].iloc[0]
    assert (cupti["n"], cupti["timer_pick"], cupti["truth_best"]) == (2, 8, 0)
    assert cupti["regret"] == pytest.approx(1800.0 / 1000.0 - 1) and not cupti["same_best"]
    assert not cupti["top_k_hit"]
    assert recommend(table, {"ncu:direct": 0.97}) == {"ncu:direct": "graph_warm"}
    assert "graph_warm" in format_verdict(table, {"ncu:direct": 0.97}).splitlines()[0]


def test_a_timer_as_good_as_the_truths_own_repeatability_is_not_called_unreliable():
    """Below the weak-τ line, but within FLOOR_MARGIN of a noisy truth's own floor: the recommended timer is
    as reliable as the truth itself, and the line must not say that no timer is (another one names τ 0.87)."""
    from nsprof.analysis.agreement import agreement
    from nsprof.analysis.stats import kendall_tau_b
    from nsprof.render.validate_tables import format_verdict

    truth = [100, 101, 200, 300, 400, 500]
    near = [102, 100, 200, 300, 400, 500]  # only the first two swapped: τ 0.87, a 1% regret
    coarse = [50, 101, 300, 500, 400, 200]  # the best first, the rest shuffled: τ 0.47, no regret
    assert 0.45 < kendall_tau_b(coarse, truth) < 0.5 < kendall_tau_b(near, truth)
    rows = [
        {"config_id": i, "method": method, "value_ns": float(values[i])}
        for i in range(6)
        for method, values in (("ncu:direct", truth), ("near", near), ("coarse", coarse))
    ]
    floors = pd.DataFrame(
        [{"truth": "ncu:direct", "against": "repeat", "n": 6, "kendall_tau": 0.5, "median_rel_change": 0.1,
          "max_rel_change": 0.2}]
    )  # fmt: skip
    line = format_verdict(agreement(pd.DataFrame(rows), ["near", "coarse"], ["ncu:direct"]), floors)
    assert "no timer ranks configs reliably" not in line, line
    assert line.startswith("vs ncu:direct: coarse tracks best by regret"), line
    assert "near rank them reliably" in line, line
