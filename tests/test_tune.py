"""Ranking for `nsprof tune`, on the real per-config summaries of the seed space (H200 fixtures)."""

from __future__ import annotations

import csv
import statistics

import pandas as pd
import pytest
from conftest import FIXTURES

from nsprof.errors import NsprofError
from nsprof.profile import config_summary
from nsprof.schema import make_frame
from nsprof.tune import TuneResult, TuneSettings, format_ranked, rank


def summary(name, mode):
    frame = make_frame(pd.read_csv(FIXTURES / name).to_dict("list"))
    table = config_summary(frame)
    return table[table["mode"].isna() | (table["mode"] == mode)]


def independent_order(name, mode):
    reps = {}
    with open(FIXTURES / name, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["error"] or row["mode"] != mode:
                continue
            key = (int(row["config_id"]), int(row["rep"]))
            reps[key] = reps.get(key, 0.0) + float(row["duration_ns"])
    medians = {}
    for (cfg, _), value in reps.items():
        medians.setdefault(cfg, []).append(value)
    medians = {cfg: statistics.median(v) for cfg, v in medians.items()}
    return sorted(medians, key=lambda c: (medians[c], c)), medians


@pytest.mark.parametrize("name", ["profile_ncu.csv", "profile_nsys.csv"])
def test_rank_orders_configs_by_median_and_puts_failures_last(name):
    table = rank(summary(name, "graph"), "median")
    order, medians = independent_order(name, "graph")
    measured = table[table["error"].isna()]
    assert measured["config_id"].tolist() == order
    assert measured["rank"].tolist() == list(range(1, len(order) + 1))
    best = medians[order[0]]
    assert measured["vs_best"].tolist() == pytest.approx([medians[c] / best - 1 for c in order])
    failed = table[table["error"].notna()]
    assert sorted(failed["config_id"]) == list(range(8)) + [31]
    assert failed["rank"].isna().all()


def test_rank_by_min():
    table = rank(summary("profile_ncu.csv", "direct"), "min")
    measured = table[table["error"].isna()]
    assert list(measured["value_ns"]) == sorted(measured["min_ns"])


def test_format_names_best_and_label():
    table = rank(summary("profile_nsys.csv", "graph"), "median")
    table.insert(2, "config", ["c"] * len(table))
    configs = [{"id": i} for i in range(32)]
    result = TuneResult(table, configs, "nsys", "nsys, mode graph")
    text = format_ranked(result)
    order, _ = independent_order("profile_nsys.csv", "graph")
    assert text.splitlines()[0] == "ranked by nsys, mode graph"
    assert f"best: config {order[0]} (id={order[0]})" in text
    assert result.best_config == {"id": order[0]}


@pytest.mark.parametrize("kwargs", [{"backend": "perf"}, {"mode": "both"}, {"stat": "mean"},
                                    {"prescreen": "ncu"}, {"prescreen_top": 0}])
def test_settings_are_validated(kwargs):
    with pytest.raises(NsprofError):
        TuneSettings(**kwargs)
