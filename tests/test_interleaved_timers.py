"""Interleaved fast timers through `nsprof validate`, on the CPU: real worker processes whose GPU
timers and clock are stood in for (tests/targets/standin_timers.py).

Two configs 5% apart (1000 and 1050 ns under `cupti`, twice that under `cupti_cold`), on a card
that warms up: sample t of a worker reads value × (1 + 1% × t). Measured one config after the
other, the second reads about 25% slower; interleaved in rotated rounds the two keep their 5%. The
expected values are worked out here from the schedule itself: ROUNDS rounds; round r visits the
configs starting at config r mod 2; a visit measures each method in turn, one untimed warm-up
sample and then timer_reps / ROUNDS samples (here one), and reads the clock after each method.
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
BASE = {0: 1000.0, 1: 1050.0}
SCALE = {"cupti": 1.0, "cupti_cold": 2.0}
INTERLEAVED = "cupti_interleaved,cupti_cold_interleaved"
TARGET = f"""
import nsprof.space

BASE = {BASE!r}
SCALE = {SCALE!r}


class Launch:
    drift = {DRIFT}

    def __init__(self, config):
        self.timer_ns = {{name: BASE[config["i"]] * scale for name, scale in SCALE.items()}}

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


def _validate(target: str, tmp_path: Path, timers: str = "cupti," + INTERLEAVED) -> tuple[dict, str]:
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


def _interleaved_samples(n_configs: int, methods: list[str]) -> list[tuple[int, str, int]]:
    """(config, method, the sample number it keeps) of every method's visit, in the worker's order:
    rounds rotated, each method one warm-up sample then one kept (timer_reps = ROUNDS)."""
    out, sample = [], 0
    for r in range(ROUNDS):
        for k in range(n_configs):
            for method in methods:
                out.append(((r + k) % n_configs, method, sample + 1))
                sample += 2
    return out


def _expected(kept: list[int], config: int, method: str) -> float:
    return BASE[config] * SCALE[method] * (1 + DRIFT * statistics.median(kept))


def test_interleaving_takes_drift_out_of_the_difference_between_configs(target, tmp_path):
    document, output = _validate(target, tmp_path)
    plain = _values(document, "cupti")
    # one config after the other ("cupti" is the family: cupti, then cupti_cold, per config):
    # config 0's cupti holds samples 0..9, config 1's samples 20..29
    assert plain[0]["value_ns"] == pytest.approx(1000 * (1 + DRIFT * 4.5))
    assert plain[1]["value_ns"] == pytest.approx(1050 * (1 + DRIFT * 24.5))
    assert plain[1]["value_ns"] / plain[0]["value_ns"] > 1.24  # drift read as a 25% difference
    samples = _interleaved_samples(2, ["cupti", "cupti_cold"])
    for method in ("cupti", "cupti_cold"):
        measured = _values(document, method + "_interleaved")
        for config in (0, 1):
            kept = [t for c, m, t in samples if (c, m) == (config, method)]
            assert measured[config]["value_ns"] == pytest.approx(_expected(kept, config, method))
        assert measured[1]["value_ns"] / measured[0]["value_ns"] == pytest.approx(1.05, abs=0.005)
    words = document["conditions"]["cupti_interleaved"]
    assert "interleaved in rounds" in words and "throttling not checked" in words
    assert "cupti_cold_interleaved" in output


def test_rounds_taken_while_throttled_are_discarded_counted_and_the_clock_kept(target, tmp_path, monkeypatch):
    clocks = [1980.0, 1980.0, 1000.0]  # every third read below 75% of the highest, 1980 MHz
    monkeypatch.setenv("NSPROF_TEST_CLOCKS", ",".join(map(str, clocks)))
    document, output = _validate(target, tmp_path)
    samples = _interleaved_samples(2, ["cupti", "cupti_cold"])
    for method in ("cupti", "cupti_cold"):
        kept = {0: [], 1: []}
        for read, (config, m, sample) in enumerate(samples):  # one clock read after each method's visit
            if m == method and clocks[read % len(clocks)] >= 0.75 * 1980:
                kept[config].append(sample)
        taken = sum(m == method for _, m, _ in samples)
        throttled = taken - len(kept[0]) - len(kept[1])
        assert 0 < throttled < taken
        measured = _values(document, method + "_interleaved")
        for config in (0, 1):
            assert measured[config]["value_ns"] == pytest.approx(_expected(kept[config], config, method))
            assert measured[config]["clock_hz"] == pytest.approx(1980e6)
        words = document["conditions"][method + "_interleaved"]
        assert (
            f"{throttled} of {taken} rounds discarded" in words and "highest of its batch, 1980 MHz" in words
        )
        assert "SM clock median 1.98 GHz (NVML)" in words


def test_clocks_locked_low_are_no_throttling(target, tmp_path, monkeypatch):
    monkeypatch.setenv("NSPROF_TEST_CLOCKS", "1365")  # every round at one low clock, as with clocks locked
    document, _ = _validate(target, tmp_path, timers="cupti_interleaved")
    assert "0 of 20 rounds discarded" in document["conditions"]["cupti_interleaved"]
    assert set(_values(document, "cupti_interleaved")) == {0, 1}


# A space of CPU configs for the stand-in timers (tests/targets/standin_timers.py): a config's "ns" is its
# CUPTI value (or "t" its values by timer), "dies" ends the worker, "drift" makes every sample drift.
CPU_SPACE = """
import nsprof.space


class Launch:
    def __init__(self, config):
        self.timer_ns = dict(config.get("t") or {"cupti": config["ns"]})
        self.dies = config.get("dies", False)
        self.drift = config.get("drift", 0.0)

    def __call__(self):
        return None


space = nsprof.space.Space(configs=CONFIGS, build=Launch, device="cpu")
"""


def _cpu_space(configs: str) -> str:
    return CPU_SPACE.replace("CONFIGS", configs)


THREE = _cpu_space(
    '[{"ns": 1000.0, "drift": 0.01}, {"ns": 1100.0, "drift": 0.01}, {"ns": 1200.0, "drift": 0.01}]'
)


def test_configs_that_do_not_fit_in_memory_together_are_interleaved_batch_after_batch(
    target, tmp_path, monkeypatch
):
    monkeypatch.setenv("NSPROF_TEST_BATCH", "2")  # the GPU is full once two configs are held
    (tmp_path / "three.py").write_text(THREE)
    document, _ = _validate(str(tmp_path / "three.py") + ":space", tmp_path, timers="cupti_interleaved")
    # batch 1: configs 0 and 1 interleaved (samples 0..39); batch 2: config 2 alone, from sample 40
    first = _interleaved_samples(2, ["cupti"])
    measured = _values(document, "cupti_interleaved")
    for config, ns in ((0, 1000.0), (1, 1100.0)):
        kept = [t for c, _, t in first if c == config]
        assert measured[config]["value_ns"] == pytest.approx(ns * (1 + 0.01 * statistics.median(kept)))
    alone = [40 + t for _, _, t in _interleaved_samples(1, ["cupti"])]
    assert measured[2]["value_ns"] == pytest.approx(1200.0 * (1 + 0.01 * statistics.median(alone)))
    assert (
        "in 2 batches of configs that fit in the GPU's memory together"
        in document["conditions"]["cupti_interleaved"]
    )


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
    # TileLang's cupti backend is torch.profiler, a CUPTI client: never in the process of other timers
    external = ["tilelang_event", "tilelang_cupti", "tilelang_cudagraph", "triton_do_bench"]
    assert timer_groups(["event", *external]) == [
        ["event"],
        ["tilelang_event", "tilelang_cudagraph", "triton_do_bench"],
        ["tilelang_cupti"],
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


def test_a_worker_dying_in_the_rounds_fails_that_config_and_the_restarted_worker_measures_the_others(
    target, tmp_path
):
    (tmp_path / "dies.py").write_text(DIES)
    document, output = _validate(str(tmp_path / "dies.py") + ":space", tmp_path, timers="cupti_interleaved")
    failures = {f["config_id"]: f["reason"] for f in document["failures"]}
    assert set(failures) == {1}, failures  # the config it died on
    assert not failures[1].startswith("not run"), failures
    measured = _values(document, "cupti_interleaved")
    assert {c: r["value_ns"] for c, r in measured.items() if r["value_ns"] == r["value_ns"]} == {
        0: 1000.0,
        2: 1000.0,
    }


def test_a_compile_wait_after_an_unfinished_interleaved_config_is_no_time_of_that_config():
    """An interleaved job leaves every config it built without a done line until its rounds end;
    waiting for the next config's compile meanwhile must not run the last one's --timeout."""
    from nsprof.worker.protocol import Bounds, parse_status

    bounds = Bounds(timeout_s=4.0, bound_s=30.0, now=0.0)
    text = "start 0\n"
    assert bounds.passed(text, parse_status(text), now=1.0) is None
    for second in range(2, 12):  # config 1's compile takes 10 s, one wait line a second
        text += "wait 1\n"
        status = parse_status(text)
        assert status.current is None
        assert bounds.passed(text, status, now=float(second)) is None
    text += "start 1\n"
    status = parse_status(text)
    assert status.current == 1 and bounds.passed(text, status, now=12.0) is None
    assert bounds.passed(text, status, now=16.5) == "timeout"  # config 1's own window still bounded


def _validate_on_dask(tmp_path: Path, target: str, devices: str, clocks: str) -> str:
    """validate's words for cupti_interleaved, its timers on Dask workers of nsprof's own LocalCluster (a child
    nsprof, the stand-in timers installed there; the SM clocks read `clocks`)."""
    import os
    import subprocess

    (tmp_path / "t.py").write_text(target)
    program = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); import standins; standins.install(timers=True); "
        "from nsprof.cli import main; sys.argv[0] = 'nsprof'; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, str(Path(__file__).parent), "validate", "t.py:space",
         "--timers", "cupti_interleaved", "--no-external", "--truth", "nsys", "--mode", "direct", "--reps", "1",
         "--no-repeat", "--timer-reps", str(ROUNDS), "--devices", devices, "--save", "v.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NSPROF_TEST_CLOCKS": clocks, "NSPROF_LOCK_DIR": str(tmp_path / "locks")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((tmp_path / "v.json").read_text())["conditions"]["cupti_interleaved"]


def test_the_throttle_check_is_said_when_the_timers_run_on_dask_workers(tmp_path):
    # --devices: the timers' worker runs under a Dask worker; what its throttle check did comes back with it
    words = _validate_on_dask(tmp_path, TARGET, "0", "1980,1980,1000")
    assert "rounds discarded" in words and "highest of its batch, 1980 MHz" in words, words


def test_one_interleaved_method_failing_on_a_config_keeps_the_others_measure_of_it_and_names_itself(
    target, tmp_path
):
    """Config 1 has no cold CUPTI value (its visits raise under cupti_cold_interleaved): cupti_interleaved's
    rounds of it stand, as a plain timer's would, and the failure names its method."""
    (tmp_path / "drifting.py").write_text(
        TARGET.replace(
            "    def __call__(self):",
            '        if config["i"] == 1:\n            del self.timer_ns["cupti_cold"]\n\n    def __call__(self):',
            1,
        )
    )
    document, output = _validate(target, tmp_path, timers=INTERLEAVED)
    warm, cold = _values(document, "cupti_interleaved"), _values(document, "cupti_cold_interleaved")
    assert set(warm) == {0, 1} and warm[1]["value_ns"] > warm[0]["value_ns"] > 0  # config 1 is the slower
    assert cold[0]["value_ns"] > 0 and not cold.get(1, {}).get("value_ns")
    failures = [f for f in document.get("failures", []) if f["config_id"] == 1]
    assert [f["method"] for f in failures] == ["cupti_cold_interleaved"], failures
    assert "interleaved cupti_cold_interleaved" in failures[0]["reason"]


def test_the_warm_event_and_cupti_timers_can_be_asked_alone(target, tmp_path):
    """`event` and `cupti` are families (each with its cold twin): `event_warm` and `cupti_warm` name the
    warm one alone, measured and shown under its own name."""
    from nsprof.timers.specs import expand

    assert expand(["event_warm", "cupti_warm", "cupti"]) == ["event", "cupti", "cupti_cold"]
    document, _ = _validate(target, tmp_path, timers="cupti_warm")
    assert {r["method"] for r in document["per_config"]} == {"cupti", "standin:direct"}  # and the truth


FOUR_DIES = _cpu_space('[{"ns": 1000.0}, {"ns": 1100.0}, {"ns": 1200.0}, {"ns": 1300.0, "dies": True}]')


def test_a_restarted_worker_does_not_lose_the_count_of_batches(target, tmp_path, monkeypatch):
    # the GPU is "full" after 2 configs: batch {0, 1}; batch {2, 3}, where config 3 kills the worker; the
    # restarted worker measures config 2 in a batch of its own, which it numbers 1 again
    monkeypatch.setenv("NSPROF_TEST_BATCH", "2")
    (tmp_path / "four.py").write_text(FOUR_DIES)
    document, _ = _validate(str(tmp_path / "four.py") + ":space", tmp_path, timers="cupti_interleaved")
    assert set(_values(document, "cupti_interleaved")) >= {0, 1, 2}
    words = document["conditions"]["cupti_interleaved"]
    assert "in 2 batches of configs that fit in the GPU's memory together" in words, words


def test_the_throttle_rule_names_each_batchs_own_highest_clock(target, tmp_path, monkeypatch):
    # batch {0, 1} (20 clock reads) at 1980 MHz, batch {2} (10 reads) at 1400 MHz: each batch's rounds are
    # checked against its own highest clock, and the note names both
    monkeypatch.setenv("NSPROF_TEST_BATCH", "2")
    monkeypatch.setenv("NSPROF_TEST_CLOCKS", ",".join(["1980"] * 20 + ["1400"] * 10))
    (tmp_path / "three.py").write_text(THREE)
    document, _ = _validate(str(tmp_path / "three.py") + ":space", tmp_path, timers="cupti_interleaved")
    assert _values(document, "cupti_interleaved")[2]["clock_hz"] == 1400e6  # config 2's rounds kept
    words = document["conditions"]["cupti_interleaved"]
    assert "0 of 30 rounds in 2 batches" in words, words
    assert "the highest of its batch: 1980 MHz in 1 batch, 1400 MHz in 1 (NVML)" in words, words


FIVE = _cpu_space('[{"ns": 1000.0 + 100 * i} for i in range(5)]')


def test_the_throttle_check_of_timers_on_two_gpus_counts_every_batchs_rounds_once(tmp_path):
    # --devices 0,1: configs 0-2 on one Dask worker, 3-4 and the calibration config 0 on the other; the two
    # batches' checks read alike, and the run's one line counts both: 6 configs' rounds
    import re

    words = _validate_on_dask(tmp_path, FIVE, "0,1", "1980")
    assert re.findall(r"(\d+) of (\d+) rounds", words) == [("0", str(6 * ROUNDS))], words
    assert "in 2 batches" in words, words


ONE_METHOD_FAILS = _cpu_space('[{"t": {"cupti": 1000.0, "cupti_cold": 2000.0}}, {"t": {"cupti": 1100.0}}]')


def test_a_methods_error_line_does_not_erase_its_batchs_highest_clock(target, tmp_path, monkeypatch):
    # config 1 has no cold CUPTI value: its cupti_cold_interleaved method fails (an error line, the batch's last)
    monkeypatch.setenv("NSPROF_TEST_CLOCKS", "1980,1980,1000")
    (tmp_path / "fails.py").write_text(ONE_METHOD_FAILS)
    document, _ = _validate(
        str(tmp_path / "fails.py") + ":space", tmp_path, timers="cupti_interleaved,cupti_cold_interleaved"
    )
    words = document["conditions"]["cupti_cold_interleaved"]
    # config 0's cold rounds were checked against the batch's 1980 MHz: the clock was read
    assert "no SM clock read" not in words and "1980 MHz" in words, words


def test_a_clock_read_as_zero_is_no_clock_read(target, tmp_path, monkeypatch):
    """NVML gives 0 MHz where it reads no clock: one line said both "SM clock median 0.00 GHz" and "no SM clock
    read"; a 0 MHz read is no read, in the median as in the throttle check."""
    monkeypatch.setenv("NSPROF_TEST_CLOCKS", "0")
    document, _ = _validate(target, tmp_path, timers="cupti_interleaved")
    words = document["conditions"]["cupti_interleaved"]
    assert "no SM clock read" in words and "GHz" not in words, words
