"""Configs on tune's page and plot as in its terminal table: the keys that vary across the space,
the ones all configs share said once, and never a value cut in the middle (realistic TileLang
configs of five keys otherwise read alike once cut)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import report_of

pytest.importorskip("matplotlib")

# five keys, two of them the same in every config; labels longer than a plot's tick
CONFIGS = [
    {"block_M": 64, "block_N": 16 * (c + 1), "block_K": 128, "num_stages": c % 3 + 2, "thread_num": 128}
    for c in range(4)
]


def _ranking():
    from nsprof.analysis.ranking import rank
    from nsprof.analysis.tune_report import Ranking
    from nsprof.space import config_label

    table = rank(
        pd.DataFrame(
            {
                "config_id": [0, 1, 2, 3],
                "median_ns": [3000.0, 1000.0, 2000.0, 1040.0],
                "min_ns": [2900.0, 990.0, 1950.0, 1000.0],
                "spread": [0.02, 0.01, 0.03, 0.05],
                "error": [None, None, None, None],
            }
        )
    )
    table.insert(2, "config", [config_label(CONFIGS[int(c)]) for c in table["config_id"]])
    return Ranking(table, "ncu", "ncu", "ncu, mode graph, median of 5 reps")


def test_the_page_shows_the_varying_keys_and_the_shared_ones_once():
    from nsprof.render.html import tune_page

    page = tune_page(report_of(_ranking(), CONFIGS))
    assert page.count("all configs: block_M=64, block_K=128, thread_num=128") == 1
    table = page.split('<table id="ranked">')[1].split("</table>")[0]
    for c in CONFIGS:
        assert f"<td>block_N={c['block_N']},num_stages={c['num_stages']}</td>" in table
    assert "block_M=" not in table and "thread_num=" not in table


def test_the_plot_labels_each_config_by_the_keys_that_vary():
    from nsprof.render.tune_plot import tune_figure

    fig = tune_figure(_ranking().table, "ranked by ncu", CONFIGS)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ticks == [
        "1: block_N=32,num_stages=3",
        "3: block_N=64,num_stages=2",
        "2: block_N=48,num_stages=4",
        "0: block_N=16,num_stages=2",
    ]
    assert "all configs: block_M=64, block_K=128, thread_num=128" in fig._suptitle.get_text()


def test_a_long_label_is_cut_between_two_keys_never_inside_a_value():
    from nsprof.render.tune_plot import LABEL_WIDTH, config_tick
    from nsprof.space import config_label

    label = config_label(
        {
            "block_M": 128,
            "block_N": 256,
            "block_K": 64,
            "num_stages": 3,
            "thread_num": 256,
            "policy": "Square",
        }
    )
    tick = config_tick(7, label)
    assert len(label) > LABEL_WIDTH and tick.endswith(",…")
    kept = tick.removeprefix("7: ").removesuffix(",…").split(",")
    assert kept == label.split(",")[: len(kept)]  # whole k=v items, in order
    assert len(tick.removeprefix("7: ")) <= LABEL_WIDTH + 2
