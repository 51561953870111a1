"""TileLang's own pick (TileLangHook.pick, pick_shapes) against a stand-in of TileLang 0.1.15's
AutoTuner: the few members nsprof touches, with TileLang's semantics (a class-wide in-memory
cache, a disk cache read before tuning and written after, a per-call cache on the autotuned
kernel, the best by its own benchmark). The real TileLang runs in tests/test_gpu_integrations.py."""

from __future__ import annotations

import sys
import textwrap

import pytest

from nsprof.integrations import tilelang as tl_hook

STANDIN = """
import json
from pathlib import Path

LATENCY = {}          # config's block_M -> what the stand-in's benchmark measures (ms)
DISK = {}             # key -> config, the autotuner's disk cache
BENCHMARKED = []      # every config benchmarked


class AutotuneResult:
    def __init__(self, latency, config):
        self.latency, self.config = latency, config


class AutoTuner:
    _memory_cache = {}

    def __init__(self, configs):
        self.configs = configs

    def _load_result_from_disk(self, key):
        return DISK.get(key)

    def _save_result_to_disk(self, key, result):
        DISK[key] = result

    def run(self, key):
        if key in self._memory_cache:
            return self._memory_cache[key]
        found = self._load_result_from_disk(key)
        if found is not None:
            return found
        best = None
        for config in self.configs:
            BENCHMARKED.append(dict(config))
            latency = LATENCY[config["block_M"]]
            if best is None or latency < best.latency:
                best = AutotuneResult(latency, dict(config))
        self._save_result_to_disk(key, best)
        self._memory_cache[key] = best
        return best


class Autotuned:
    def __init__(self, configs):
        self.configs = configs
        self._tuner_cache = {}

    def compile(self, *args, **kwargs):
        key = repr(args)
        if key not in self._tuner_cache:
            result = AutoTuner(self.configs).run(key)
            self._tuner_cache[key] = ("kernel", result.config)
        return self._tuner_cache[key][0]
"""


@pytest.fixture
def tilelang(tmp_path, monkeypatch):
    package = tmp_path / "tilelang" / "autotuner"
    package.mkdir(parents=True)
    (tmp_path / "tilelang" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "tuner.py").write_text(textwrap.dedent(STANDIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]:
        monkeypatch.delitem(sys.modules, name)
    from tilelang.autotuner import tuner

    yield tuner
    for name in [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]:
        del sys.modules[name]


CONFIGS = [{"block_M": 32, "stages": 2}, {"block_M": 64, "stages": 2}, {"block_M": 128, "stages": 3}]


def test_the_pick_is_tilelangs_own_benchmark_of_now_and_leaves_nothing_behind(tilelang):
    tilelang.LATENCY.update({32: 0.5, 64: 0.2, 128: 0.3})
    autotuned = tilelang.Autotuned(CONFIGS)
    # an earlier winner in every cache: the pick must measure again, not read it back
    tilelang.DISK[repr((1024,))] = tilelang.AutotuneResult(0.1, CONFIGS[0])
    tilelang.AutoTuner._memory_cache[repr((1024,))] = tilelang.DISK[repr((1024,))]
    autotuned._tuner_cache[repr((1024,))] = ("old kernel", CONFIGS[0])
    hook = tl_hook.TileLangHook(autotuned, (1024,))
    assert hook.can_pick and hook.can_pick_shapes

    pick = hook.pick()

    assert pick == {
        "tuner": "TileLang's autotuner",
        "timer": "TileLang's own benchmark",
        "config_id": 1,
        "config": CONFIGS[1],
        "timings_ms": {"1": 0.2},
    }
    assert tilelang.BENCHMARKED == CONFIGS  # every config measured by TileLang itself
    # the caches hold what they held: the pick is not a winner anyone loads later
    assert tilelang.DISK[repr((1024,))].config == CONFIGS[0] and len(tilelang.DISK) == 1
    assert tilelang.AutoTuner._memory_cache[repr((1024,))].config == CONFIGS[0]
    assert autotuned._tuner_cache == {repr((1024,)): ("old kernel", CONFIGS[0])}
    assert tilelang.AutoTuner._save_result_to_disk.__name__ == "_save_result_to_disk"


def test_each_shape_is_picked_on_its_own_call(tilelang):
    autotuned = tilelang.Autotuned(CONFIGS)
    hook = tl_hook.TileLangHook(autotuned, (1,), shapes=[(256,), (4096,)])
    tilelang.LATENCY.update({32: 0.1, 64: 0.2, 128: 0.3})
    first = hook.pick_shapes([0])
    tilelang.LATENCY.update({32: 0.9, 64: 0.8, 128: 0.3})
    second = hook.pick_shapes([1])
    assert first[0]["config_id"] == 0 and second[1]["config_id"] == 2
    assert not tilelang.DISK and not autotuned._tuner_cache


def test_a_pick_of_a_space_without_shapes_at_a_shape_is_one_clear_error(tilelang):
    from nsprof.errors import NsprofError

    hook = tl_hook.TileLangHook(tilelang.Autotuned(CONFIGS), (1,))
    with pytest.raises(NsprofError, match="no shapes"):
        hook.pick_shapes([0])
