"""Triton's feed-back (integrations.triton.feed_back) against a stand-in of Triton's Autotuner (3.2
to 3.6): it benchmarks its configs after pruning, here in an order other than the configs' own, and
keeps the first of equal timings (`min` over a dict). The stand-in modules replace torch and
triton.runtime.autotuner for the test; the real ones run in tests/test_gpu_integrations.py."""

from __future__ import annotations

import sys
import types

import pytest

from nsprof.integrations import triton as triton_hook


class Config:
    def __init__(self, num_warps: int, **kwargs):
        self.kwargs, self.num_warps, self.pre_hook = kwargs, num_warps, None


class Autotuned:
    """The members feed_back touches, with Triton's semantics."""

    def __init__(self, configs):
        self.configs, self.fn, self.cache, self.cache_results = configs, object(), {}, False
        self.best_config = None

    def check_disk_cache(self, *args, **kwargs):
        return False

    def _bench(self, *args, config, **meta):
        raise AssertionError("the stand-in has no GPU to benchmark on")

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            pruned = list(reversed(self.configs))  # a perf model's pruning reorders them
            timings = {config: self._bench(*args, config=config) for config in pruned}
            self.best_config = min(timings, key=timings.get)  # Triton: builtins.min, first of equal

        return run


@pytest.fixture
def stand_ins(monkeypatch):
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(synchronize=lambda: None)
    autotuner = types.ModuleType("triton.runtime.autotuner")
    autotuner.get_cache_manager = lambda key: None
    runtime = types.ModuleType("triton.runtime")
    runtime.autotuner = autotuner
    triton = types.ModuleType("triton")
    triton.runtime = runtime
    for name, module in [("torch", torch), ("triton", triton), ("triton.runtime", runtime)]:
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "triton.runtime.autotuner", autotuner)


def _feed_back(configs, latencies_ms):
    autotuned = Autotuned(configs)
    line = triton_hook.feed_back(autotuned, lambda: ((), {}), (1,), latencies_ms)
    return triton_hook.config_dict(autotuned.best_config), line


def test_a_config_tied_with_nsprofs_best_does_not_take_its_place(stand_ins):
    configs = [Config(4, BLOCK=32), Config(4, BLOCK=64), Config(8, BLOCK=64)]
    chosen, line = _feed_back(configs, {0: 0.0071, 1: 0.0068, 2: 0.0068})
    assert chosen == {"BLOCK": 64, "num_warps": 4}, line  # the lower id of the tie, as nsprof ranks


def test_a_config_listed_twice_is_handed_its_lowest_latency(stand_ins):
    configs = [Config(4, BLOCK=32), Config(4, BLOCK=64), Config(4, BLOCK=32)]
    chosen, line = _feed_back(configs, {0: 0.20, 1: 0.21, 2: 0.22})
    assert chosen == {"BLOCK": 32, "num_warps": 4}, line
