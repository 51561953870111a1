"""TileLang's feed-back (integrations.tilelang.feed_back) against a stand-in of TileLang 0.1.15's
AutoTuner: it benchmarks the configs in its workers' completion order, not the configs' order,
keeps the first of equal latencies (a strict `<`), and writes its winner to a disk cache entry.
The real TileLang runs in tests/test_gpu_integrations.py and tests/test_gpu_serve.py."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from nsprof.integrations import tilelang as tl_hook

STANDIN_TUNER = """
import json
from pathlib import Path

from tilelang.autotuner.param import BEST_CONFIG_PATH, AutotuneResult

CACHE_DIR = None       # set by the test


class AutoTuner:
    _memory_cache = {}

    def __init__(self, autotuned, args):
        self.autotuned, self.cache_dir, self.compile_args = autotuned, CACHE_DIR, {"args": list(args)}

    def _load_result_from_disk(self, key):
        return AutotuneResult.load_from_disk(Path(self.cache_dir) / key, self.compile_args)

    def _save_result_to_disk(self, key, result):
        path = Path(self.cache_dir) / key
        path.mkdir(parents=True)
        (path / BEST_CONFIG_PATH).write_text(json.dumps(result.config))
        (path / "latency.json").write_text(json.dumps(result.latency))

    def _benchmark_target(self, jit_kernel):
        raise AssertionError("the stand-in has no GPU to benchmark on")

    def run(self, key):
        if key in self._memory_cache:
            return self._memory_cache[key]
        found = self._load_result_from_disk(key)
        if found is not None:
            return found
        best = None
        for config in reversed(self.autotuned.configs):  # the workers' completion order
            latency, _ = self._benchmark_target(self.autotuned.jit_impl.compile(**config))
            if best is None or latency < best.latency:
                best = AutotuneResult(latency, dict(config))
        self._save_result_to_disk(key, best)
        self._memory_cache[key] = best
        return best


class Kernel:
    def __init__(self, config):
        self.config = config

    def get_kernel_source(self):  # a config key the kernel ignores ("note") leaves its source as it is
        return json.dumps({k: v for k, v in self.config.items() if k != "note"}, sort_keys=True)


class JitImpl:
    out_idx = None

    def compile(self, *args, **config):
        return Kernel(config)


class Autotuned:
    def __init__(self, configs):
        self.configs, self.jit_impl, self._tuner_cache = configs, JitImpl(), {}

    def compile(self, *args, **kwargs):
        key = repr(args)
        if key not in self._tuner_cache:
            result = AutoTuner(self, args).run(key)
            self._tuner_cache[key] = (self.jit_impl.compile(**result.config), result.config)
        return self._tuner_cache[key][0]
"""

STANDIN_PARAM = """
import json
from pathlib import Path

BEST_CONFIG_PATH = "best_config.json"


class AutotuneResult:
    def __init__(self, latency, config):
        self.latency, self.config = latency, config

    @classmethod
    def load_from_disk(cls, path, compile_args):
        path = Path(path)
        if not (path / BEST_CONFIG_PATH).exists():
            return None
        latency = json.loads((path / "latency.json").read_text())
        return cls(latency, json.loads((path / BEST_CONFIG_PATH).read_text()))
"""

CONFIGS = [{"block_M": 32}, {"block_M": 64}, {"block_M": 128}]


@pytest.fixture
def tilelang(tmp_path, monkeypatch):
    package = tmp_path / "site" / "tilelang" / "autotuner"
    package.mkdir(parents=True)
    (tmp_path / "site" / "tilelang" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "tuner.py").write_text(textwrap.dedent(STANDIN_TUNER))
    (package / "param.py").write_text(textwrap.dedent(STANDIN_PARAM))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]:
        monkeypatch.delitem(sys.modules, name)
    from tilelang.autotuner import tuner

    tuner.CACHE_DIR = str(tmp_path / "cache")
    yield tuner
    for name in [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]:
        del sys.modules[name]


def test_a_config_tied_with_nsprofs_best_does_not_take_its_place_in_tilelangs_cache(tilelang):
    # configs 1 and 2 measured the same (nsys's whole-nanosecond medians tie often); nsprof's best is
    # the lower id, and TileLang, which meets config 2 first, must still keep config 1
    latencies = {0: 0.0071, 1: 0.0068, 2: 0.0068}
    written = tl_hook.feed_back(tilelang.Autotuned(CONFIGS), (1024,), latencies)

    assert written == CONFIGS[1]
    (entry,) = Path(tilelang.CACHE_DIR).iterdir()
    assert json.loads((entry / "best_config.json").read_text()) == CONFIGS[1]
    assert json.loads((entry / "latency.json").read_text()) == 0.0068  # its own latency, as measured


def test_the_best_alone_is_fed_back_as_measured_when_nothing_ties(tilelang):
    written = tl_hook.feed_back(tilelang.Autotuned(CONFIGS), (1024,), {0: 0.3, 1: 0.2, 2: 0.1})
    assert written == CONFIGS[2]


def test_every_tuner_is_handed_nsprofs_best_strictly_lowest_and_the_rest_as_measured():
    from nsprof.tuner import best_strictly_first

    best, fed = best_strictly_first({4: 0.5, 2: 0.25, 7: 0.25, 1: 0.25, 3: 0.75})
    assert best == 1  # the lowest config id among equal latencies, as nsprof ranks them
    assert fed[1] == 0.25 and fed[4] == 0.5 and fed[3] == 0.75
    assert all(0.25 < fed[i] < 0.2500001 for i in (2, 7))  # just above the best, nothing more


def test_a_config_that_compiles_to_the_bests_very_kernel_may_stand_in_the_cache_for_it(tilelang):
    configs = [{"block_M": 32}, {"block_M": 64, "note": "a"}, {"block_M": 64, "note": "b"}]
    written = tl_hook.feed_back(tilelang.Autotuned(configs), (1024,), {0: 0.0071, 1: 0.0068, 2: 0.0069})
    assert written == configs[2]  # TileLang met it first: one kernel, so nsprof's best is what it loads
    (entry,) = Path(tilelang.CACHE_DIR).iterdir()
    assert json.loads((entry / "latency.json").read_text()) == 0.0068
