"""summarize groups a report's rows in plain Python (a small report costs a few ms, not tens):
its numbers must be pandas' groupby's to the last bit, whatever the rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from nsprof.analysis.summary import NO_RANGE, SUMMARY_COLUMNS, summarize
from nsprof.reports import read_report
from nsprof.schema import make_frame
from tests.conftest import FIXTURES


def pandas_summary(frame):
    """The summary by pandas' groupby (how summarize computed it before)."""
    grouped = frame.copy()
    has_cfg = grouped["config_id"].notna()
    group = grouped["range"].astype("string").fillna(NO_RANGE)
    shape = (".s" + grouped["shape"].astype("string")).fillna("")
    cfg = "cfg" + grouped["config_id"].astype("string") + shape + "." + grouped["mode"].astype("string")
    grouped["group"] = pd.Series(group.where(~has_cfg, cfg), index=grouped.index, dtype="string")
    grouped["kernel_full"] = grouped["kernel_full"].fillna(grouped["kernel"]).fillna("?")
    grouped["kernel"] = grouped["kernel"].fillna("?")
    by = grouped.groupby(["source", "group", "kernel_full"], sort=False, dropna=False)
    duration = by["duration_ns"]
    firsts = by[["kernel", "clock_control", "cache_control"]].first()
    medians = by[["cycles", "clock_hz"]].median()
    agg = pd.DataFrame(
        {
            "kernel": firsts["kernel"],
            "count": duration.count(),
            "median_ns": duration.median(),
            "min_ns": duration.min(),
            "max_ns": duration.max(),
            "total_ns": duration.sum(),
            "mean_ns": duration.mean(),
            "std_ns": duration.std(),
            "median_cycles": medians["cycles"],
            "median_clock_hz": medians["clock_hz"],
            "clock_control": firsts["clock_control"],
            "cache_control": firsts["cache_control"],
        }
    ).reset_index()
    agg["cv"] = agg["std_ns"] / agg["mean_ns"]
    agg["count"] = agg["count"].astype("int64")
    agg["total_ns"] = agg["total_ns"].where(agg["count"] > 0)
    agg["time_pct"] = 100 * agg["total_ns"] / agg.groupby("source", dropna=False)["total_ns"].transform("sum")
    agg["range"] = agg["group"]
    return pd.DataFrame(agg[SUMMARY_COLUMNS])


def random_report(seed: int):
    """Rows of a few kernels in a few ranges, durations spread over 9 orders of magnitude, some
    missing, repeated values, nsprof's ranges with and without shapes, kernels without a full name."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    ranges = ["cfg0.direct.r0", "cfg0.direct.r1", "cfg12.s3.graph.r0", "torch_push", None, "cfg2.graph.r4"]
    scale = 10.0 ** rng.integers(0, 9, n)
    durations = np.round(rng.lognormal(0, rng.uniform(0.01, 2), n) * scale, int(rng.integers(0, 7)))
    durations[rng.random(n) < 0.1] = np.nan
    if seed % 3 == 0:
        durations[: n // 2] = durations[0]  # ties and a constant group
    return make_frame(
        [
            {
                "source": ["ncu", "nsys"][int(rng.integers(0, 2))] if seed % 2 else "ncu",
                "range": ranges[int(rng.integers(0, len(ranges)))],
                "kernel": ["gemm", "relu", None][int(rng.integers(0, 3))],
                "kernel_full": [None, "void gemm<1>()", "void gemm<2>()"][int(rng.integers(0, 3))],
                "duration_ns": durations[i],
                "cycles": float(rng.integers(1, 10**7)) if rng.random() < 0.8 else None,
                "clock_hz": float(rng.uniform(1e9, 2e9)) if rng.random() < 0.8 else None,
                "clock_control": [None, "base", "none"][int(rng.integers(0, 3))],
                "cache_control": "all",
            }
            for i in range(n)
        ]
    )


@pytest.mark.parametrize("seed", range(60))
def test_summary_numbers_are_pandas_groupby_numbers(seed):
    frame = random_report(seed)
    assert_frame_equal(summarize(frame), pandas_summary(frame), check_exact=True)


@pytest.mark.parametrize(
    "name", ["fixture_node_raw.csv", "fixture_graph_raw.csv", "fixture_node_details.csv", "fixture.sqlite"]
)
def test_summary_of_each_fixture_is_pandas_groupby_summary(name):
    frame = read_report(FIXTURES / name)
    assert_frame_equal(summarize(frame), pandas_summary(frame), check_exact=True)


def test_summary_of_a_report_without_rows_has_the_columns():
    summary = summarize(make_frame([]))
    assert list(summary.columns) == SUMMARY_COLUMNS and summary.empty


@pytest.mark.parametrize("seed", range(8))
def test_group_sums_are_pandas_groupby_sums_and_means(seed):
    """group_sums adds as pandas' groupby does, on both of its paths (rows of each group together
    and no NaN: numpy's reduceat; else the Kahan-compensated kernel), infinities and NaN included."""
    import warnings

    from nsprof.analysis.groups import group_sums

    rng = np.random.default_rng(seed)
    for trial in range(300):
        n = int(rng.integers(1, 700))
        values = (10 ** rng.uniform(-1, 9, n) * rng.choice([1, -1], n)).tolist()
        if trial % 4 == 0:
            values = [v if rng.random() < 0.9 else float("nan") for v in values]
        if trial % 7 == 0:
            values = [v if rng.random() < 0.97 else float(rng.choice([np.inf, -np.inf])) for v in values]
        drawn = rng.integers(0, int(rng.integers(1, 6)), n).tolist()
        numbering: dict = {}
        codes = [numbering.setdefault(c, len(numbering)) for c in (sorted(drawn) if trial % 2 else drawn)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf in numpy's reduceat
            by = pd.Series(values, dtype="float64").groupby(np.array(codes, dtype="intp"), sort=False)
            expected_sums, expected_means = by.sum().to_numpy(), by.mean().to_numpy()
        sums, counts = group_sums(values, codes, len(numbering))
        means = [total / count if count else float("nan") for total, count in zip(sums, counts)]
        np.testing.assert_array_equal(np.array(sums), expected_sums)
        np.testing.assert_array_equal(np.array(means), expected_means)
        assert counts == by.count().tolist()
