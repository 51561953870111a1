"""The fast timers on lines a worker wrote on the H200 (tests/fixtures/timers<i>.jsonl, captured by
`scripts/capture_fixtures.py --only-timers`: the softmax space's 30 configs under the plain graph
timers, then the interleaved graph and CUPTI timers, warm and cold L2).

The card held 1,500 MHz through that capture and no round was throttled, so every test runs twice:
on the lines as recorded, and on the same lines with their clocks varied here. A plain timer's
clock before its measurement differs from the one after. Each round's clock is its own; config 5's
rounds set the batch's highest clock (1,600 MHz, its first round alone); every other config's first
round ran at 74% of that (throttled) and its second at 76% (kept), so that a rule taking the peak
per config, or another fraction than 75%, discards other rounds. The values are the recorded ones
in both. Expected figures are read from the lines with json and
statistics alone: each config's value (a plain timer's median; an interleaved timer's median of
the rounds it keeps), its SM clock (as the plain call ended; the median of the kept rounds'), the
rounds taken and those discarded as throttled (NVBench's rule: below 75% of the batch's peak).
"""

from __future__ import annotations

import json
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
REPLAY = Path(__file__).parent / "targets" / "replay_timers.py"
PEAK_MHZ = 1600.0


def _recorded() -> list[list[dict]]:
    """Each worker's lines (one file each: plain or interleaved timers, never both)."""
    return [
        [json.loads(text) for text in (FIXTURES / f"timers{i}.jsonl").read_text().splitlines()]
        for i in range(3)
    ]


def _round_clock(config_id: int, r: int, recorded: float) -> float:
    if config_id == 5:
        return PEAK_MHZ - 9 * r
    return {0: 0.74 * PEAK_MHZ, 1: 0.76 * PEAK_MHZ}.get(r, recorded - 7 * r - config_id)


def _varied() -> list[list[dict]]:
    out = []
    for lines in _recorded():
        for line in lines:
            c, i = line["conditions"], line["config_id"]
            if "rounds_ns" in line:
                line["rounds_clock_mhz"] = [
                    _round_clock(i, r, clock) for r, clock in enumerate(line["rounds_clock_mhz"])
                ]
            else:
                c["sm_clock_mhz_before"], c["sm_clock_mhz_after"] = (
                    c["sm_clock_mhz_after"] + 40,
                    c["sm_clock_mhz_after"] - i,
                )
        out.append(lines)
    return out


VARIANTS = {"recorded": _recorded, "clocks varied": _varied}


def _kept(line: dict, lines: list[dict]) -> list[tuple[float, float]]:
    """An interleaved line's rounds (value, clock) whose clock is at least 75% of its batch's peak."""
    peak = max(clock for other in lines for clock in other.get("rounds_clock_mhz", []))
    return [(v, c) for v, c in zip(line["rounds_ns"], line["rounds_clock_mhz"]) if c >= 0.75 * peak]


def _expected(line: dict, lines: list[dict]) -> tuple[float, float]:
    """A line's value (ns) and SM clock (MHz) as validate should show them."""
    if "rounds_ns" not in line:
        return line["median_ns"], line["conditions"]["sm_clock_mhz_after"]
    kept = _kept(line, lines)
    return statistics.median(v for v, _ in kept), statistics.median(c for _, c in kept)


def test_the_recording_holds_plain_and_interleaved_timers_with_their_clocks():
    lines = [line for worker in _recorded() for line in worker]
    methods = {line["method"] for line in lines}
    assert {"graph_warm", "graph_cold"} < methods
    assert {"graph_warm_interleaved", "cupti_cold_interleaved"} < methods
    assert len({line["config_id"] for line in lines}) == 30
    assert all(line["conditions"]["sm_clock_mhz_after"] > 0 for line in lines if "rounds_ns" not in line)
    assert all(clock > 0 for line in lines for clock in line.get("rounds_clock_mhz", []))


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_tidy_table_has_a_row_per_round_with_the_sm_clock_it_ended_at(tmp_path, variant):
    from nsprof.measure import FastTimers
    from nsprof.settings import ProfileSettings

    for lines in VARIANTS[variant]():
        timers = FastTimers(sorted({line["method"] for line in lines}), ProfileSettings(), tmp_path)
        frame = timers.frame(lines, {})
        assert len(frame) == sum(len(line.get("rounds_ns", [None])) for line in lines)
        for line in lines:
            rows = frame[(frame["config_id"] == line["config_id"]) & (frame["source"] == line["method"])]
            assert list(rows["duration_ns"]) == line.get("rounds_ns", [line["median_ns"]])
            clocks = (
                line["rounds_clock_mhz"]
                if "rounds_ns" in line
                else [line["conditions"]["sm_clock_mhz_after"]]
            )
            assert list(rows["clock_hz"]) == [clock * 1e6 for clock in clocks]


@pytest.fixture(params=list(VARIANTS))
def replayed(request, tmp_path, monkeypatch):
    """`nsprof validate` of a CPU space of the recording's 30 configs with the plain and the
    interleaved timers, its workers replaying the lines; the stand-in profiler as truth."""
    workers = VARIANTS[request.param]()
    paths = []
    for number, lines in enumerate(workers):
        paths.append(tmp_path / f"timers{number}.jsonl")
        paths[-1].write_text("".join(json.dumps(line) + "\n" for line in lines))
    registry.register("standin", StatusDriver)
    registry.register("none", standin_timers(REPLAY), ground_truth=False)
    monkeypatch.setenv("NSPROF_TEST_REPLAY", os.pathsep.join(map(str, paths)))
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
    yield workers, result, json.loads(saved.read_text()) if saved.exists() else None
    registry.register("none", "nsprof.drivers.none:PlainDriver", ground_truth=False)
    registry.unregister("standin")


def test_validate_gives_each_config_the_value_and_clock_its_timer_measured(replayed):
    workers, result, document = replayed
    assert result.exit_code == 0, result.output
    per_config = {(row["method"], row["config_id"]): row for row in document["per_config"]}
    for lines in workers:
        for line in lines:
            value, clock = _expected(line, lines)
            row = per_config[(line["method"], line["config_id"])]
            assert row["value_ns"] == pytest.approx(value, rel=1e-12)
            assert row["clock_hz"] == pytest.approx(clock * 1e6, rel=1e-12)


def test_validate_says_each_timers_sm_clock_and_how_many_rounds_it_discarded(replayed):
    workers, result, document = replayed
    assert result.exit_code == 0, result.output
    for lines in workers:
        for method in {line["method"] for line in lines}:
            mine = [line for line in lines if line["method"] == method]
            clock = statistics.median(sorted(_expected(line, lines)[1] for line in mine))
            words = document["conditions"][method]
            assert f"SM clock median {clock / 1e3:.2f} GHz (NVML)" in words
            assert words in " ".join(result.output.split())
            if "rounds_ns" not in mine[0]:
                assert "rounds" not in words
                continue
            taken = sum(line["conditions"]["rounds"] for line in mine)
            discarded = sum(line["conditions"]["rounds"] - len(_kept(line, lines)) for line in mine)
            peak = max(clock for line in lines for clock in line["rounds_clock_mhz"])
            assert f"; {discarded} of {taken} rounds discarded" in words
            assert f"below 75% of the highest of its batch, {peak:.0f} MHz (NVML)" in words
