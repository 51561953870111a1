"""Numbers stay with their config and shape: `nsprof results --target` numbers each shape as the run it
re-reads did and ranks no config an id named before (each first pass records the configs' and shapes'
JSON in the target's order), tune --json's first-pass phases are per config of each shape, and the
tables' "all configs" line tells 1, 1.0 and True apart. Real nsprof runs under the stand-in profilers
(tests/standins.py: a config's "ns_shapes"[s] is what it measures at shape index s)."""

from __future__ import annotations

import json
from functools import partial

from conftest import run_nsprof

_nsprof = partial(run_nsprof, in_process=True)  # nothing here crosses a process: no interpreter to start

TUNE = ["--backend", "ncu", "--mode", "direct", "--reps", "3", "--budget-s", "0", "--no-explain"]
TUNE += ["--no-feed-back", "--no-tuner-pick", "--store", "s.sqlite", "--json"]

# The target's configs and shapes come from data.json beside it (an edit of it keeps the source's
# fingerprint, as a project that lists its shapes in a file does).
TARGET = """
import json, os
import nsprof.space
with open(os.path.join(os.path.dirname(__file__), "data.json")) as file:
    data = json.load(file)
space = nsprof.space.Space(configs=data["configs"], shapes=data["shapes"],
                           build=lambda config, shape: (lambda: None), device="cpu")
"""


def _write(tmp_path, configs, shapes):
    (tmp_path / "data.json").write_text(json.dumps({"configs": configs, "shapes": shapes}))


def _by_index(done) -> dict[int, tuple]:
    """{shape index: (shape value, winner, its value_ns)} of a tune --json / results --json."""
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    return {
        s["shape"]: (s["shape_value"], s["best_config_id"], s["ranked"][0]["value_ns"])
        for s in document["shapes"]
    }


def test_results_numbers_each_shape_as_the_resumed_tune_did(tmp_path):
    """A tune at shapes [M=1, M=16]; the target then lists [M=16, M=1, M=128] and `tune --resume`
    measures only M=128. That tune says shape 0 is M=16 and shape 1 is M=1; `results --target`
    ("the target's latest stored tune again") must give each shape the same index, since the index
    is what a consumer of the JSON keys a shape by (TunerHook.feed_back_shapes, pick_shapes)."""
    (tmp_path / "t.py").write_text(TARGET)
    configs = [{"i": 0, "ns_shapes": [1000, 2000, 3000]}, {"i": 1, "ns_shapes": [2000, 1000, 500]}]
    _write(tmp_path, configs, [{"M": 1}, {"M": 16}])
    first = _nsprof("tune", "t.py:space", *TUNE, cwd=tmp_path, standins=True)
    assert _by_index(first) == {0: ({"M": 1}, 0, 1000.0), 1: ({"M": 16}, 1, 1000.0)}
    _write(tmp_path, configs, [{"M": 16}, {"M": 1}, {"M": 128}])
    resumed = _nsprof("tune", "t.py:space", *TUNE, "--resume", cwd=tmp_path, standins=True)
    expected = {0: ({"M": 16}, 1, 1000.0), 1: ({"M": 1}, 0, 1000.0), 2: ({"M": 128}, 1, 500.0)}
    assert _by_index(resumed) == expected
    again = _nsprof("results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path)
    assert _by_index(again) == expected


def test_results_never_ranks_a_replaced_configs_old_numbers(tmp_path):
    """A tune of configs [i=0, i=1, i=2] at two shapes (config 2 wins at M=16); the user replaces config 2
    by i=7 and tunes configs 0 and 1 only (`--configs 0,1`; a --prescreen that sends config 2 on at no
    shape does the same). That tune ranks config 0 first at M=16, and so does `results --target`: i=2's
    numbers are not ranked under the id that now names i=7, which was never measured."""
    (tmp_path / "t.py").write_text(TARGET)
    shapes = [{"M": 1}, {"M": 16}]
    configs = [{"i": 0, "ns_shapes": [1000, 2000]}, {"i": 1, "ns_shapes": [2000, 3000]}]
    _write(tmp_path, [*configs, {"i": 2, "ns_shapes": [3000, 1000]}], shapes)
    first = _nsprof("tune", "t.py:space", *TUNE, cwd=tmp_path, standins=True)
    assert _by_index(first)[1] == ({"M": 16}, 2, 1000.0)
    _write(tmp_path, [*configs, {"i": 7, "ns_shapes": [9000, 9000]}], shapes)
    subset = _nsprof("tune", "t.py:space", *TUNE, "--configs", "0,1", cwd=tmp_path, standins=True)
    assert _by_index(subset) == {0: ({"M": 1}, 0, 1000.0), 1: ({"M": 16}, 0, 2000.0)}
    again = _nsprof("results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path)
    document = json.loads(again.stdout)
    labels = {r["config"] for s in document["shapes"] for r in s["ranked"]}
    assert not any(label.startswith("i=2,") for label in labels), labels
    assert _by_index(again) == {0: ({"M": 1}, 0, 1000.0), 1: ({"M": 16}, 0, 2000.0)}


def test_first_pass_phases_are_keyed_by_config_not_by_point(tmp_path):
    """tune --json's first_pass_phases.configs holds each config's build and measure seconds at that
    shape, keyed by config id (not by point id, shape * n_configs + config)."""
    (tmp_path / "t.py").write_text(TARGET)
    configs = [{"i": 0, "ns_shapes": [1000, 2000, 3000]}, {"i": 1, "ns_shapes": [2000, 1000, 500]}]
    _write(tmp_path, configs, [{"M": 1}, {"M": 16}, {"M": 128}])
    done = _nsprof("tune", "t.py:space", *TUNE, cwd=tmp_path, standins=True)
    assert done.returncode == 0, done.stderr[-3000:]
    for shape in json.loads(done.stdout)["shapes"]:
        keys = set(shape["first_pass_phases"]["configs"])
        assert keys <= {"0", "1"}, (shape["shape"], sorted(keys))


def test_configs_that_differ_only_by_1_vs_true_are_not_shown_as_one(tmp_path):
    """Configs {"flag": 1}, {"flag": 1.0}, {"flag": True} are three configs (three JSON texts, three store
    keys): the tables' line of the keys all configs share does not take flag for one value."""
    (tmp_path / "t.py").write_text(TARGET)
    configs = [
        {"flag": 1, "ns_shapes": [1000, 3000]},
        {"flag": 1.0, "ns_shapes": [2000, 2000]},
        {"flag": True, "ns_shapes": [3000, 1000]},
    ]
    _write(tmp_path, configs, [{"M": 1}, {"M": 16}])
    args = [a for a in TUNE if a != "--json"]
    done = _nsprof("tune", "t.py:space", *args, cwd=tmp_path, standins=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "all configs: flag=1" not in done.stdout, done.stdout


def test_the_all_configs_line_takes_values_as_the_store_keys_them():
    """One value where the store keys one (a NaN every config shares; a tuple and a list of the same items),
    two where it keys two (0.0 and -0.0; 1 and True)."""
    from nsprof.render.configs import split_configs

    nan = float("nan")
    assert list(split_configs([{"a": nan, "b": 1}, {"a": nan, "b": 2}])[0]) == ["a"]
    assert split_configs([{"a": (1, 2), "b": 1}, {"a": [1, 2], "b": 2}])[0] == {"a": (1, 2)}
    assert split_configs([{"a": 0.0, "b": 1}, {"a": -0.0, "b": 2}]) == ({}, None)
    assert split_configs([{"a": 1, "b": 1}, {"a": True, "b": 2}]) == ({}, None)
