"""Interleaved fast timers through `nsprof validate`, on the CPU: real worker processes whose GPU
timers and clock are stood in for (tests/targets/standin_timers.py).

Two configs that are one kernel (1000 ns), on a card that warms up: sample t of a worker reads
1000 × (1 + 1% × t). Measured one config after the other, the second reads about 19% slower;
interleaved in rotated rounds both read the same. The expected values are worked out here from
the schedule itself: ROUNDS rounds; round r visits the configs starting at config r mod 2; a
visit takes one untimed warm-up sample and then timer_reps / ROUNDS samples.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver, standin_timers  # noqa: E402

from nsprof.drivers import registry  # noqa: E402
from nsprof.timers.interleave import ROUNDS  # noqa: E402

DRIFT = 0.01
TARGET = f"""
import nsprof.space


class Launch:
    drift = {DRIFT}

    def __init__(self, config):
        self.timer_ns = {{"cupti": 1000.0, "cupti_cold": 1000.0}}

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{{"i": 0}}, {{"i": 1}}], build=Launch, device="cpu")
"""


@pytest.fixture
def target(tmp_path):
    registry.register("standin", StatusDriver)
    registry.register("none", standin_timers(), ground_truth=False)
    (tmp_path / "drifting.py").write_text(TARGET)
    yield str(tmp_path / "drifting.py") + ":space"
    registry.register("none", "nsprof.drivers.none:PlainDriver", ground_truth=False)
    registry.unregister("standin")


def _validate(target: str, tmp_path: Path, timers: str = "cupti,cupti_interleaved") -> tuple[dict, str]:
    from nsprof.cli import cli

    saved = tmp_path / "validate.json"
    result = CliRunner().invoke(
        cli,
        ["validate", target, "--timers", timers, "--no-external", "--truth", "standin", "--mode", "direct",
         "--reps", "1", "--no-repeat", "--timer-reps", str(ROUNDS), "--timeout", "30", "--save", str(saved)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(saved.read_text()), result.output


def _values(document: dict, method: str) -> dict[int, dict]:
    return {r["config_id"]: r for r in document["per_config"] if r["method"] == method}


def _interleaved_visits(n_configs: int) -> list[tuple[int, int]]:
    """(config, the sample number it keeps) of every visit, in the order the worker makes them:
    rounds rotated, one warm-up sample then one kept (timer_reps = ROUNDS: one per round)."""
    visits, sample = [], 0
    for r in range(ROUNDS):
        for k in range(n_configs):
            visits.append(((r + k) % n_configs, sample + 1))
            sample += 2
    return visits


def test_interleaving_takes_drift_out_of_a_difference_between_identical_configs(target, tmp_path):
    document, output = _validate(target, tmp_path)
    plain, interleaved = _values(document, "cupti"), _values(document, "cupti_interleaved")
    # one config after the other ("cupti" is the family: cupti, then cupti_cold, per config):
    # config 0's cupti holds samples 0..9, config 1's samples 20..29
    assert plain[0]["value_ns"] == pytest.approx(1000 * (1 + DRIFT * 4.5))
    assert plain[1]["value_ns"] == pytest.approx(1000 * (1 + DRIFT * 24.5))
    assert plain[1]["value_ns"] / plain[0]["value_ns"] > 1.19  # drift read as a 19% difference
    for config in (0, 1):
        kept = [t for c, t in _interleaved_visits(2) if c == config]
        assert interleaved[config]["value_ns"] == pytest.approx(1000 * (1 + DRIFT * statistics.median(kept)))
    assert interleaved[0]["value_ns"] == pytest.approx(interleaved[1]["value_ns"])
    words = document["conditions"]["cupti_interleaved"]
    assert "interleaved in rounds" in words and "throttling not checked" in words
    assert "cupti_interleaved" in output


def test_rounds_taken_while_throttled_are_discarded_counted_and_the_clock_kept(target, tmp_path, monkeypatch):
    clocks = [1980.0, 1980.0, 1000.0]  # every third read below 75% of the 2000 MHz maximum
    monkeypatch.setenv("NSPROF_TEST_CLOCKS", ",".join(map(str, clocks)))
    document, output = _validate(target, tmp_path)
    visits = _interleaved_visits(2)
    kept = {0: [], 1: []}
    for read, (config, sample) in enumerate(visits):  # one clock read as each visit ends
        if clocks[read % len(clocks)] >= 0.75 * 2000:
            kept[config].append(sample)
    throttled = len(visits) - len(kept[0]) - len(kept[1])
    assert throttled == 6
    interleaved = _values(document, "cupti_interleaved")
    for config in (0, 1):
        assert interleaved[config]["value_ns"] == pytest.approx(
            1000 * (1 + DRIFT * statistics.median(kept[config]))
        )
        assert interleaved[config]["clock_hz"] == pytest.approx(1980e6)
    words = document["conditions"]["cupti_interleaved"]
    assert f"{throttled} of {len(visits)} rounds discarded" in words and "2000 MHz maximum" in words
    assert f"{throttled} of {len(visits)} rounds discarded" in output
    assert "SM clock median 1.98 GHz (NVML)" in words


def test_interleaved_and_plain_timers_never_share_a_worker():
    from nsprof.validate import timer_groups

    names = [
        "event",
        "graph_warm_interleaved",
        "cupti",
        "cupti_cold_interleaved",
        "graph_cold",
        "triton_do_bench",
    ]
    assert timer_groups(names) == [
        ["event", "graph_cold"],
        ["cupti"],
        ["graph_warm_interleaved"],
        ["cupti_cold_interleaved"],
        ["triton_do_bench"],
    ]


def test_the_interleaved_family_names_every_interleaved_timer_and_its_l2_state():
    from nsprof.timers.specs import expand, l2_state

    names = expand(["interleaved"])
    assert names == [
        "graph_warm_interleaved",
        "graph_cold_interleaved",
        "cupti_interleaved",
        "cupti_cold_interleaved",
    ]
    assert [l2_state(n) for n in names] == ["warm", "cold", "warm", "cold"]


DIES = """
import nsprof.space


class Launch:
    def __init__(self, config):
        self.timer_ns = {"cupti": 1000.0}
        self.dies = config["dies"]

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{"dies": False}, {"dies": True}, {"dies": False}], build=Launch, device="cpu")
"""


def test_a_worker_dying_in_the_rounds_fails_that_config_and_says_why_the_others_did_not_run(target, tmp_path):

    (tmp_path / "dies.py").write_text(DIES)
    document, output = _validate(str(tmp_path / "dies.py") + ":space", tmp_path, timers="cupti_interleaved")
    failures = {f["config_id"]: f["reason"] for f in document["failures"]}
    assert set(failures) == {0, 1, 2}
    assert not failures[1].startswith("not run"), failures  # the config it died on: its own failure
    for config in (0, 2):
        assert "interleaved rounds are not restarted" in failures[config], failures
    assert "max_restarts" not in output
