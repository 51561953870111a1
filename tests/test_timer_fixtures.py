"""The fast timers on lines a worker wrote on the H200 (tests/fixtures/timers<i>.jsonl, captured by
`scripts/capture_fixtures.py --only-timers`: the softmax space's 30 configs under the plain graph
timers, then the interleaved graph and CUPTI timers, warm and cold L2).

Expected values are read here from the lines themselves, with json and statistics alone: each
config's value (a plain timer's median; an interleaved timer's median of its kept rounds), its SM
clock (as the plain call ended; each kept round's), and the rounds taken and discarded as throttled.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver, standin_timers  # noqa: E402

from nsprof.drivers import registry  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = [FIXTURES / f"timers{i}.jsonl" for i in range(3)]
REPLAY = Path(__file__).parent / "targets" / "replay_timers.py"


def _lines() -> list[dict]:
    return [json.loads(text) for path in RECORDED for text in path.read_text().splitlines()]


def _clocks_mhz(line: dict) -> list[float]:
    """A line's SM clocks: each kept round's, or the plain call's as it ended."""
    return line.get("rounds_clock_mhz") or [line["conditions"]["sm_clock_mhz_after"]]


def test_the_recording_holds_plain_and_interleaved_timers_with_their_clocks():
    lines = _lines()
    methods = {line["method"] for line in lines}
    assert {"graph_warm", "graph_cold"} < methods
    assert {"graph_warm_interleaved", "cupti_cold_interleaved"} < methods
    assert len({line["config_id"] for line in lines}) == 30
    assert all(clock > 0 for line in lines for clock in _clocks_mhz(line))


def test_the_tidy_table_has_a_row_per_kept_round_with_the_sm_clock_it_ended_at(tmp_path):
    from nsprof.measure import FastTimers
    from nsprof.settings import ProfileSettings

    for path in RECORDED:  # a worker's lines: plain or interleaved timers, never both
        lines = [json.loads(text) for text in path.read_text().splitlines()]
        timers = FastTimers(sorted({line["method"] for line in lines}), ProfileSettings(), tmp_path)
        frame = timers.frame(lines, {})
        assert len(frame) == sum(len(line.get("rounds_ns", [None])) for line in lines)
        for line in lines:
            rows = frame[(frame["config_id"] == line["config_id"]) & (frame["source"] == line["method"])]
            assert list(rows["duration_ns"]) == line.get("rounds_ns", [line["median_ns"]])
            assert list(rows["clock_hz"]) == [clock * 1e6 for clock in _clocks_mhz(line)]


@pytest.fixture
def replayed(tmp_path, monkeypatch):
    """`nsprof validate` of a CPU space of the recording's 30 configs with the plain and the
    interleaved timers, its workers replaying the recording; the stand-in profiler as truth."""
    registry.register("standin", StatusDriver)
    registry.register("none", standin_timers(REPLAY), ground_truth=False)
    monkeypatch.setenv("NSPROF_TEST_REPLAY", os.pathsep.join(map(str, RECORDED)))
    (tmp_path / "replayed.py").write_text(
        "import nsprof.space\n\n\nclass Launch:\n    def __init__(self, config):\n        self.i = config['i']\n\n"
        "    def __call__(self):\n        return None\n\n\n"
        "space = nsprof.space.Space(configs=[{'i': i} for i in range(30)], build=Launch, device='cpu')\n"
    )
    from nsprof.cli import cli

    saved = tmp_path / "validate.json"
    result = CliRunner().invoke(
        cli,
        ["validate", str(tmp_path / "replayed.py") + ":space", "--timers", "graph,interleaved", "--no-external",
         "--truth", "standin", "--mode", "direct", "--reps", "1", "--no-repeat", "--timeout", "60",
         "--save", str(saved)],
    )  # fmt: skip
    yield result, json.loads(saved.read_text()) if saved.exists() else None
    registry.register("none", "nsprof.drivers.none:PlainDriver", ground_truth=False)
    registry.unregister("standin")


def test_validate_gives_each_config_the_value_and_clock_its_timer_recorded(replayed):
    result, document = replayed
    assert result.exit_code == 0, result.output
    per_config = {(row["method"], row["config_id"]): row for row in document["per_config"]}
    for line in _lines():
        row = per_config[(line["method"], line["config_id"])]
        expected = statistics.median(line["rounds_ns"]) if "rounds_ns" in line else line["median_ns"]
        assert row["value_ns"] == pytest.approx(expected, rel=1e-12)
        assert row["clock_hz"] == pytest.approx(statistics.median(_clocks_mhz(line)) * 1e6, rel=1e-12)


def test_validate_says_each_timers_sm_clock_and_how_many_rounds_it_discarded(replayed):
    result, document = replayed
    assert result.exit_code == 0, result.output
    lines = _lines()
    for method in {line["method"] for line in lines}:
        mine = [line for line in lines if line["method"] == method]
        per_config = sorted(statistics.median(_clocks_mhz(line)) for line in mine)
        clock = f"SM clock median {statistics.median(per_config) / 1e3:.2f} GHz (NVML)"
        words = document["conditions"][method]
        assert clock in words and clock in result.output
        if "rounds_ns" in mine[0]:
            taken = sum(line["conditions"]["rounds"] for line in mine)
            discarded = sum(line["throttled"] for line in mine)
            assert f"{discarded} of {taken} rounds discarded" in words
            assert f"{max(line['peak_clock_mhz'] for line in mine):.0f} MHz (NVML)" in words
        else:
            assert "rounds" not in words
    assert not any(math.isnan(row["value_ns"]) for row in document["per_config"])
