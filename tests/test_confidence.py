"""Confidence in the ranking: an interval per ranked config, the configs
tied with the best, and the stated rule by which one of a tie is fed back.

Expected values are computed here independently: coverages by enumerating every sign pattern of
n reps around the median (no binomial formula), intervals by sorting the reps by hand, tie sets
from the real H200 reps of the seed space (tests/fixtures/profile_*.csv) summed per rep by csv.
"""

from __future__ import annotations

import csv
import itertools
import json
import textwrap

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, report_of

from nsprof.analysis.confidence import LEVEL, METHOD, decide, median_coverage, median_interval
from nsprof.analysis.ranking import rank
from nsprof.profile import config_summary
from nsprof.render.json import tune_document
from nsprof.render.tune_tables import format_ranked
from nsprof.schema import make_frame
from nsprof.tune import Ranking

# --------------------------------------------------------------------------- the interval


def brute_coverage(n: int, k: int) -> float:
    """P(x(k) ≤ median ≤ x(n+1-k)): the interval holds the median exactly when at least k reps
    fall below it and at least k above; each rep is below with probability ½. Counted over all
    2^n patterns."""
    hits = sum(1 for signs in itertools.product((0, 1), repeat=n) if k <= sum(signs) <= n - k)
    return hits / 2**n


def brute_interval(reps, level=0.95):
    ordered = sorted(reps)
    n = len(ordered)
    ks = [k for k in range(1, (n + 1) // 2 + 1) if brute_coverage(n, k) >= level]
    k = max(ks) if ks else 1
    return ordered[k - 1], ordered[n - k], brute_coverage(n, k)


@pytest.mark.parametrize("n", range(1, 16))
def test_coverage_matches_counting_sign_patterns(n):
    for k in range(1, (n + 1) // 2 + 1):
        assert median_coverage(n, k) == pytest.approx(brute_coverage(n, k), abs=1e-12)


def test_five_reps_give_min_max_at_93_75_percent_not_95():
    interval = median_interval([5210.0, 4990.0, 5440.0, 5216.0, 5300.0])
    assert (interval.low, interval.high) == (4990.0, 5440.0)
    assert interval.coverage == pytest.approx(1 - 2 / 32)  # 0.9375: below the 95% asked, and said so
    assert interval.coverage < LEVEL and interval.k == 1 and interval.n == 5


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n", [2, 3, 6, 7, 10, 13])
def test_interval_matches_sorting_by_hand(n, seed):
    reps = np.random.default_rng(seed).lognormal(8.5, 0.05, size=n).tolist()
    interval = median_interval(reps)
    low, high, coverage = brute_interval(reps)
    assert (interval.low, interval.high) == (low, high)
    assert interval.coverage == pytest.approx(coverage)
    if n >= 6:
        assert interval.coverage >= LEVEL  # enough reps: the level asked is reached
    assert low <= float(np.median(reps)) <= high


def test_one_rep_or_none_has_no_interval_and_nan_reps_are_dropped():
    for reps in ([], [1000.0], [float("nan"), 1000.0]):
        interval = median_interval(reps)
        assert (
            interval.low != interval.low
            and interval.high != interval.high
            and interval.coverage != interval.coverage
        )
    assert (
        median_interval([3.0, float("nan"), 1.0, 2.0]).low,
        median_interval([3.0, float("nan"), 1.0]).high,
    ) == (1.0, 3.0)


def test_the_stated_coverage_is_what_one_gets():
    # 20,000 draws of 7 reps from a skewed distribution (median 1): the share of intervals that
    # hold the median is the coverage stated, within Monte-Carlo error.
    rng = np.random.default_rng(0)
    reps = rng.lognormal(0.0, 0.3, size=(20_000, 7))
    stated = median_interval(reps[0]).coverage
    held = np.mean([median_interval(r).low <= 1.0 <= median_interval(r).high for r in reps[:4000]])
    assert stated == pytest.approx(brute_coverage(7, 1))
    assert abs(held - stated) < 0.015


# --------------------------------------------------------------------------- ties on the real seed-space reps


def fixture_reps(name, mode):
    """{config_id: [per-rep summed duration_ns]} read straight from the csv."""
    sums = {}
    with open(FIXTURES / name, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["error"] or row["mode"] != mode:
                continue
            key = (int(row["config_id"]), int(row["rep"]))
            sums[key] = sums.get(key, 0.0) + float(row["duration_ns"])
    reps = {}
    for (config_id, _), value in sorted(sums.items()):
        reps.setdefault(config_id, []).append(value)
    return reps


CONFIGS = [{"id": i} for i in range(32)]


def ranked_fixture(name, mode, stat="median"):
    frame = make_frame(pd.read_csv(FIXTURES / name).to_dict("list"))
    summary = config_summary(frame)
    table = rank(summary[summary["mode"].isna() | (summary["mode"] == mode)], stat)
    table.insert(2, "config", [f"c{c}" for c in table["config_id"]])
    return Ranking(table, name, name, f"{name}, mode {mode}", stat=stat)


def independent_ties(name, mode):
    reps = fixture_reps(name, mode)
    medians = {c: float(np.median(v)) for c, v in reps.items()}
    order = sorted(reps, key=lambda c: (medians[c], c))
    intervals = {c: brute_interval(reps[c])[:2] for c in reps}
    best_low, best_high = intervals[order[0]]
    return (
        order,
        intervals,
        [c for c in order if intervals[c][0] <= best_high and best_low <= intervals[c][1]],
    )


@pytest.mark.parametrize(
    "name,mode,expected",
    [
        ("profile_ncu.csv", "graph", [15, 13]),  # 15's reps 4992..5440 ns, 13's 5440..5696: touching ends
        ("profile_ncu.csv", "direct", [15]),  # 15's 5152..5280, 13's 5312..5696: apart
        ("profile_nsys.csv", "graph", [15, 13]),
        ("profile_nsys.csv", "direct", [15, 13]),
    ],
)
def test_tie_set_on_the_recorded_seed_space(name, mode, expected):
    result = ranked_fixture(name, mode)
    order, intervals, tie_set = independent_ties(name, mode)
    assert tie_set == expected
    assert result.tie_set == tie_set
    measured = result.table[result.table["rank"].notna()]
    for row in measured.itertuples():
        assert (row.ci_low_ns, row.ci_high_ns) == intervals[row.config_id]
        assert row.ci_coverage == pytest.approx(brute_coverage(5, 1))
        assert row.tied_with_best == (row.config_id in tie_set)
    assert not result.table.loc[result.table["rank"].isna(), "tied_with_best"].any()  # failures never tie
    decision = result.decision
    assert decision.kind == ("tie" if len(expected) > 1 else "winner")
    assert decision.config_id == result.best_config_id == order[0]  # the lowest median, as before


def test_table_and_json_show_the_interval_and_the_tie():
    result = ranked_fixture("profile_ncu.csv", "graph")
    text = format_ranked(result, CONFIGS)
    lines = text.splitlines()
    assert lines[0] == "ranked by profile_ncu.csv, mode graph"
    assert lines[1].split() == [
        "rank",
        "id",
        "config",
        "µs",
        "low",
        "µs",
        "high",
        "µs",
        "spread",
        "%",
        "cycles",
        "clock",
        "GHz",
        "vs",
        "best",
        "tie",
        "error",
    ]
    first, second, third = lines[3].split(), lines[4].split(), lines[5].split()
    assert first[:6] == ["1", "15", "c15", "5.216", "4.992", "5.440"] and "tie" in first
    assert second[:6] == ["2", "13", "c13", "5.504", "5.440", "5.696"] and "tie" in second
    assert "tie" not in third
    assert (
        "note: these 2 configs are indistinguishable here (±4.3%): 15, 13 (none is told slower: no one's "
        "interval lies wholly above the best's); the pick is 15, by the lowest median, then the lower config id"
    ) in lines
    assert any(line.startswith(f"note: intervals: {METHOD}, 95% asked, 93.8% achieved") for line in lines)

    doc = json.loads(tune_document(report_of(result, CONFIGS)))
    assert doc["interval"] == {"method": METHOD, "level": 0.95, "achieved": 0.9375, "of": "median"}
    assert doc["tie_set"] == [15, 13] and doc["best_config_id"] == 15
    assert doc["decision"]["kind"] == "tie" and doc["decision"]["members"] == [15, 13]
    assert doc["decision"]["config_id"] == 15
    assert doc["decision"]["rule"] == "the lowest median, then the lower config id"
    assert doc["decision"]["half_width"] == pytest.approx((5440 - 4992) / 2 / 5216)
    assert "indistinguishable" in doc["decision"]["words"]
    rows = {r["config_id"]: r for r in doc["ranked"]}
    assert (rows[15]["ci_low_ns"], rows[15]["ci_high_ns"], rows[15]["tied_with_best"]) == (
        4992.0,
        5440.0,
        True,
    )
    assert (
        rows[14]["tied_with_best"] is False
        and rows[31]["ci_low_ns"] is None
        and rows[31]["tied_with_best"] is False
    )


def test_a_clear_winner_is_named_winner():
    result = ranked_fixture("profile_ncu.csv", "direct")
    decision = result.decision
    assert decision.kind == "winner" and decision.members == [15] and decision.second == 13
    assert decision.margin == pytest.approx((5312 - 5280) / 5280)
    text = format_ranked(result, CONFIGS)
    assert (
        "note: config 15 is the winner: its interval (±1.2%) does not overlap #2's (config 13, 0.6% between the intervals)"
        in text
    )
    assert not any(line.split()[-2:-1] == ["tie"] for line in text.splitlines()[3:])
    doc = json.loads(tune_document(report_of(result, CONFIGS)))
    assert doc["tie_set"] == [15] and doc["decision"]["kind"] == "winner" and "members" not in doc["decision"]


def test_stat_min_ranks_by_min_and_ties_by_the_median_interval():
    result = ranked_fixture("profile_ncu.csv", "direct", stat="min")
    measured = result.table[result.table["rank"].notna()]
    assert list(measured["value_ns"]) == sorted(measured["min_ns"])
    _, intervals, _ = independent_ties("profile_ncu.csv", "direct")
    assert all((r.ci_low_ns, r.ci_high_ns) == intervals[r.config_id] for r in measured.itertuples())
    assert result.decision.rule == "the lowest min, then the lower config id"
    assert "ranked by the min, but the interval and the tie test are the median's" in format_ranked(
        result, CONFIGS
    )


# --------------------------------------------------------------------------- the rule: stable, stated


def synthetic(reps_by_config):
    rows = [
        {"source": "ncu", "config_id": c, "mode": "graph", "rep": r, "kernel": "k", "duration_ns": float(v)}
        for c, reps in reps_by_config.items()
        for r, v in enumerate(reps)
    ]
    return make_frame(pd.DataFrame(rows).to_dict("list"))


TIED = {  # 3 and 1 share a median; 0 overlaps them; 2 is clearly slower
    0: [1010, 1030, 1020, 1060, 1000],
    1: [990, 1000, 1005, 1040, 1010],
    2: [1500, 1510, 1490, 1520, 1505],
    3: [995, 1000, 1005, 1020, 1015],
}


@pytest.mark.parametrize("seed", range(8))
def test_the_fed_back_member_does_not_depend_on_row_order(seed):
    frame = synthetic(TIED)
    shuffled = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    summary = config_summary(shuffled).sample(frac=1.0, random_state=seed + 100).reset_index(drop=True)
    table = rank(summary, "median")
    decision = decide(table)
    # 1 and 3: median 1005 both; the lower config id comes first. 0's reps overlap theirs.
    assert decision.kind == "tie"
    assert decision.members == [1, 3, 0]
    assert decision.config_id == 1
    assert table["config_id"].tolist()[:4] == [1, 3, 0, 2]


def test_one_rep_per_config_is_untested_and_keeps_the_lowest():
    table = rank(config_summary(synthetic({0: [1200], 1: [1100], 2: [1300]})), "median")
    decision = decide(table)
    assert decision.kind == "untested" and decision.config_id == 1 and decision.members == [1]
    assert table["ci_low_ns"].isna().all() and table["tied_with_best"].tolist() == [True, False, False]
    result = Ranking(table.assign(config="c"), "event", "event", "fast timer event")
    assert result.best_config_id == 1
    text = format_ranked(result, [{}, {}, {}])
    assert "untested against the noise" in text and "intervals: none (fewer than 2 reps" in text
    doc = json.loads(tune_document(report_of(result, [{}, {}, {}])))
    assert (
        doc["tie_set"] == [1]
        and doc["decision"]["kind"] == "untested"
        and doc["interval"]["achieved"] is None
    )


def test_rank_without_interval_columns_still_ranks():
    per_config = pd.DataFrame(
        {"config_id": [0, 1], "median_ns": [2.0, 1.0], "min_ns": [2.0, 1.0], "error": [None, None]}
    )
    table = rank(per_config, "median")
    assert table["config_id"].tolist() == [1, 0] and decide(table).kind == "untested"


# --------------------------------------------------------------------------- end to end: nsprof tune --json

CPU_TARGET = textwrap.dedent("""
    from nsprof.space import Space
    configs = [
        {"name": "a", "ns_reps": [1010, 1030, 1020, 1060, 1000]},
        {"name": "b", "ns_reps": [1500, 1510, 1490, 1520, 1505]},
        {"name": "c", "ns_reps": [990, 1000, 1005, 1040, 1010]},
        {"name": "d", "ns_reps": [3000, 3010, 2990, 3020, 3005]},
    ]
    space = Space(name="noisy", configs=configs, build=lambda c: (lambda: None), device="cpu")
""")


def test_cli_tune_json_shows_intervals_tie_set_and_decision(tmp_path):
    from conftest import run_nsprof

    (tmp_path / "noisy.py").write_text(CPU_TARGET)
    base = ["tune", "noisy.py:space", "--backend", "ncu", "--mode", "direct", "--no-store"]
    base += ["--timeout", "120"]
    base += ["--budget-s", "0"]  # the first pass's intervals: no adaptive reps

    def cli(*more):
        env = {"NSPROF_LOCK_DIR": str(tmp_path / "locks")}
        return run_nsprof(*base, *more, cwd=tmp_path, env=env, standins=True, in_process=True)

    done = cli("--json", "--work-dir", "wd1")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["interval"]["method"] == METHOD and doc["interval"]["level"] == 0.95
    assert doc["interval"]["achieved"] == pytest.approx(0.9375)  # 5 reps: [min, max]
    assert doc["tie_set"] == [2, 0]
    assert doc["decision"]["kind"] == "tie" and doc["decision"]["members"] == [2, 0]
    assert doc["best_config_id"] == doc["decision"]["config_id"] == 2
    rows = {r["config_id"]: r for r in doc["ranked"]}
    assert (rows[2]["ci_low_ns"], rows[2]["ci_high_ns"]) == (990.0, 1040.0)
    assert (rows[0]["ci_low_ns"], rows[0]["ci_high_ns"]) == (1000.0, 1060.0)
    assert [rows[c]["tied_with_best"] for c in range(4)] == [True, False, True, False]

    text = cli("--configs", "1,2,3", "--work-dir", "wd2")
    assert text.returncode == 0, text.stderr
    assert "note: config 2 is the winner: its interval (±2.5%) does not overlap #2's (config 1" in text.stdout
    assert "best: config 2 (name=c,ns_reps=[990, 1000, 1005, 1040, 1010])" in text.stdout
