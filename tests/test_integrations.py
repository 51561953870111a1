"""The Triton benchmark adapter's contract (quantiles, units), with the timer replaced."""

from __future__ import annotations

import numpy as np
import pytest

from nsprof.integrations import triton as triton_hook
from nsprof.timers.base import TimerResult


@pytest.fixture
def fake_measure(monkeypatch):
    samples_ns = [5000.0, 1000.0, 3000.0, 2000.0, 4000.0]
    calls = []

    def measure(fn, timer, reps, warmup, l2):
        calls.append((timer, reps, l2))
        return TimerResult(timer=timer, samples_ns=samples_ns)

    monkeypatch.setattr("nsprof.timers.measure", measure)
    return samples_ns, calls


def test_quantiles_in_milliseconds(fake_measure):
    samples_ns, calls = fake_measure
    bench = triton_hook.do_bench(timer="graph", l2="cold")
    values = bench(lambda: None, quantiles=(0.5, 0.2, 0.8))
    expected = np.quantile(np.array(samples_ns) / 1e6, [0.5, 0.2, 0.8])
    assert values == pytest.approx(list(expected))
    assert calls == [("graph", 50, "cold")]
    assert bench.nsprof_timer == "graph"


@pytest.mark.parametrize(("mode", "expected_ms"), [("median", 0.003), ("min", 0.001), ("max", 0.005),
                                                   ("mean", 0.003)])
def test_return_modes(fake_measure, mode, expected_ms):
    assert triton_hook.do_bench()(lambda: None, return_mode=mode) == pytest.approx(expected_ms)


def test_unknown_timer():
    with pytest.raises(ValueError):
        triton_hook.do_bench(timer="ncu")


def test_nan_samples_are_left_out():
    result = TimerResult("cupti", [float("nan"), 3000.0, 3100.0, float("nan"), 2900.0])
    assert result.median_ns == 3000.0 and result.min_ns == 2900.0
    assert result.as_dict()["invalid_samples"] == 2
