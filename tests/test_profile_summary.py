"""Per-config summaries of real `nsprof profile` output (seed GEMM space on the H200).

tests/fixtures/profile_{ncu,nsys}.csv are the `--csv` rows of `nsprof profile
examples/gemm_tilelang.py:space --backend ncu|nsys --mode both` (scripts/gpu_checks.sh,
2026-11-30). Expected values are recomputed here with the csv module.
"""

from __future__ import annotations

import csv
import statistics
import sys

import pandas as pd
import pytest
from conftest import FIXTURES

from nsprof.profile import config_summary
from nsprof.render.run_tables import format_config_summary
from nsprof.schema import COLUMNS, make_frame

sys.path.insert(0, str(FIXTURES.parents[1] / "examples"))


def load(name):
    return make_frame(pd.read_csv(FIXTURES / name).to_dict("list"))


def independent(name):
    """{(config, mode): [per-rep summed duration]} and {config: error} by the csv module."""
    reps, errors = {}, {}
    with open(FIXTURES / name, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["error"]:
                errors[int(row["config_id"])] = row["error"]
                continue
            key = (int(row["config_id"]), row["mode"], int(row["rep"]))
            reps[key] = reps.get(key, 0.0) + float(row["duration_ns"])
    per_mode = {}
    for (cfg, mode, _), value in reps.items():
        per_mode.setdefault((cfg, mode), []).append(value)
    return per_mode, errors


@pytest.mark.parametrize("name", ["profile_ncu.csv", "profile_nsys.csv"])
def test_config_summary_matches_independent_medians(name):
    frame = load(name)
    assert list(frame.columns) == COLUMNS
    summary = config_summary(frame)
    per_mode, errors = independent(name)
    measured = summary[summary["error"].isna()]
    assert len(measured) == len(per_mode) == 2 * 23  # 23 of 32 configs built and ran, both modes
    for rec in measured.itertuples():
        values = per_mode[(rec.config_id, rec.mode)]
        assert rec.reps == len(values) == 5
        assert rec.median_ns == pytest.approx(statistics.median(values))
        assert rec.min_ns == pytest.approx(min(values))
    failed = summary[summary["error"].notna()]
    assert dict(zip(failed["config_id"], failed["error"])) == errors
    assert set(errors) == set(range(8)) | {31}  # block_N=16 never compiles; 31 exceeds shared memory


def test_seed_config_in_design_ranges():
    ncu = config_summary(load("profile_ncu.csv")).set_index(["config_id", "mode"])
    nsys = config_summary(load("profile_nsys.csv")).set_index(["config_id", "mode"])
    for mode in ("direct", "graph"):  # config 13 is the seed request's block_N=32, block_K=128, 4 stages
        assert 5.19e3 <= ncu.loc[(13, mode), "median_ns"] <= 5.73e3
        assert 2.88e3 <= nsys.loc[(13, mode), "median_ns"] <= 3.23e3
    assert nsys["median_cycles"].isna().all()  # nsys has no cycles: NaN, not 0


def test_config_summary_table_names_the_best():
    from gemm_tilelang import CONFIGS

    frame = load("profile_nsys.csv")
    text = format_config_summary(config_summary(frame, CONFIGS))
    per_mode, _ = independent("profile_nsys.csv")
    best = min(per_mode, key=lambda k: (statistics.median(per_mode[k]), k))
    assert text.splitlines()[-1].startswith(f"best: config {best[0]} (")
    assert "compile failed" in text and text.count("\n") == 2 + 46 + 9
