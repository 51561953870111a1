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


def test_a_long_label_is_wrapped_between_two_keys_never_cut():
    from nsprof.render.tune_plot import LABEL_WIDTH, config_tick

    a = "block_M=128,block_N=128,block_K=32,tile=(64, 128, 256),num_stages=3,policy=Square"
    b = a.replace("(64, 128, 256)", "(64, 256, 256)")
    tick_a, tick_b = config_tick(7, a), config_tick(7, b)
    assert tick_a != tick_b  # configs that differ never read alike
    lines = tick_a.removeprefix("7: ").split("\n")
    assert len(lines) > 1 and all(len(line) <= LABEL_WIDTH + 1 for line in lines)
    assert "".join(lines) == a  # whole: wrapped only after a comma that starts a key
    assert "tile=(64, 128, 256)," in lines[1]  # the tuple's commas are not a place to wrap


def test_a_tuple_valued_config_is_labelled_alike_live_and_read_back():
    """A saved run holds configs as JSON (a tuple as a list): the table's labels, made from the
    live configs, must still match them, or every cell falls back to the whole label."""
    import json

    from nsprof.render.configs import config_cell, split_configs
    from nsprof.space import config_label

    live = [{"a": 1, "tile": (64, 64 * (c + 1))} for c in range(3)]
    saved = json.loads(json.dumps(live))
    assert [config_label(c) for c in live] == [config_label(c) for c in saved]
    varying = split_configs(saved)[1]
    assert [config_cell(saved[c], config_label(live[c]), varying) for c in range(3)] == [
        "tile=[64, 64]",
        "tile=[64, 128]",
        "tile=[64, 192]",
    ]
