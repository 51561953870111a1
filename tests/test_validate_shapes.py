"""`nsprof validate` on a target with shapes: every (shape, config) measured in each timer's and
truth's session, then each shape compared on its own, with its own tables, verdict and JSON; a
save shows every shape again. Real nsprof runs with the stand-in profiler and fast timers
(tests/standins.py): each truth reports a config's ns at the shape, each timer the value its
launch carries, so that the expected tables come from the target's numbers, not from nsprof."""

from __future__ import annotations

import json

from conftest import run_nsprof

# ns per shape and config: the truth's, and a timer that agrees at shape 0 and turns the order
# around at shape 1 (its pick there, config 0, is the truth's slowest).
TRUTH = {0: [3000.0, 1000.0, 2000.0], 1: [1000.0, 2000.0, 3000.0]}
TIMER = {0: [3100.0, 1100.0, 2100.0], 1: [900.0, 800.0, 700.0]}
TARGET = f"""
import nsprof.space

TRUTH = {TRUTH!r}
TIMER = {TIMER!r}
SHAPES = [{{"M": 1}}, {{"M": 16}}]


class Launch:
    def __init__(self, config, shape):
        at = SHAPES.index(shape)
        self.timer_ns = dict.fromkeys(("cupti", "cupti_cold"), TIMER[at][config["i"]])

    def __call__(self):
        return None


configs = [{{"i": c, "ns_shapes": [TRUTH[s][c] for s in range(2)]}} for c in range(3)]
space = nsprof.space.Space(configs=configs, shapes=SHAPES, build=Launch, device="cpu")
"""
VALIDATE = [
    "validate",
    "t.py:space",
    "--timers",
    "cupti",
    "--no-external",
    "--truth",
    "nsys",
    "--mode",
    "direct",
    "--reps",
    "3",
    "--timer-reps",
    "3",
    "--no-repeat",
]


def test_each_shape_is_compared_on_its_own_and_saved_whole(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    env = {"NSPROF_STANDIN_TIMERS": "1"}
    ran = run_nsprof(*VALIDATE, "--save", "v.json", cwd=tmp_path, standins=True, env=env, in_process=True)
    assert ran.returncode == 0, ran.stderr
    assert "at shape 0 of 2: M=1" in ran.stdout and "at shape 1 of 2: M=16" in ran.stdout
    saved = json.loads((tmp_path / "v.json").read_text())
    assert [s["shape"] for s in saved["shapes"]] == [0, 1]
    assert [s["shape_value"] for s in saved["shapes"]] == [{"M": 1}, {"M": 16}]
    for shape in saved["shapes"]:
        at = shape["shape"]
        values = {(r["method"], r["config_id"]): r["value_ns"] for r in shape["per_config"]}
        assert values == {
            **{("nsys:direct", c): TRUTH[at][c] for c in range(3)},
            **{(timer, c): TIMER[at][c] for timer in ("cupti", "cupti_cold") for c in range(3)},
        }
        [row] = [r for r in shape["agreement"] if r["timer"] == "cupti"]
        truth_best = min(range(3), key=TRUTH[at].__getitem__)
        timer_pick = min(range(3), key=TIMER[at].__getitem__)
        assert (row["truth_best"], row["timer_pick"]) == (truth_best, timer_pick)
        slowdown = TRUTH[at][timer_pick] / TRUTH[at][truth_best] - 1
        assert abs(row["regret"] - slowdown) < 1e-9
    # the regret at shape 1 is the truth's own: its slowest config (3000 ns) over its best (1000 ns)
    assert {r["regret"] for r in saved["shapes"][1]["agreement"]} == {2.0}
    again = run_nsprof("results", "v.json", cwd=tmp_path, in_process=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ran.stdout  # every shape's tables, byte for byte


def test_a_shape_where_nothing_was_measured_keeps_the_others_and_its_save_is_read_back(tmp_path):
    # Every config fails at shape 0 (its build raises there): shape 1 is compared as ever, and the
    # save, which holds a shape of empty tables, reads back.
    (tmp_path / "t.py").write_text(
        TARGET.replace(
            "        at = SHAPES.index(shape)\n",
            "        at = SHAPES.index(shape)\n        assert at, 'no such tile at M=1'\n",
        )
    )
    env = {"NSPROF_STANDIN_TIMERS": "1"}
    ran = run_nsprof(*VALIDATE, "--save", "v.json", cwd=tmp_path, standins=True, env=env, in_process=True)
    saved = json.loads((tmp_path / "v.json").read_text())
    assert [s["per_config"] for s in saved["shapes"]][0] == []
    values = {(r["method"], r["config_id"]): r["value_ns"] for r in saved["shapes"][1]["per_config"]}
    assert {c: values[("nsys:direct", c)] for c in range(3)} == dict(enumerate(TRUTH[1]))
    assert "config 0 at shape 0" in ran.stderr and "no such tile at M=1" in ran.stderr
    again = run_nsprof("results", "v.json", cwd=tmp_path, in_process=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ran.stdout and "at shape 1 of 2: M=16" in again.stdout
