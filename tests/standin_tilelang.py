"""A stand-in of TileLang 0.1.15's AutoTuner for CPU tests of nsprof.integrations.tilelang: the
members nsprof touches, with TileLang's semantics. A class-wide in-memory cache; a disk cache entry per
key (a folder with the best config's JSON), read before tuning and written after; a per-call cache on
the autotuned kernel; and a benchmark of each config through `_benchmark_target(jit_kernel)`, keeping
the first of equal latencies (a strict `<`) in its workers' completion order (ORDER: "given", or
"reversed", an order other than the configs' own). The stand-in's own benchmark measures
LATENCY[config's block_M]; a config key "note" leaves the kernel's source as it is. The real TileLang
runs in tests/test_gpu_integrations.py and tests/test_gpu_serve.py.

    from standin_tilelang import tilelang  # noqa: F401  (the fixture: the stand-in's tuner module)
"""

from __future__ import annotations

import sys
import textwrap

import pytest

TUNER = """
import json
from pathlib import Path

from tilelang.autotuner.param import BEST_CONFIG_PATH, AutotuneResult

CACHE_DIR = None      # the disk cache's folder (the fixture's)
LATENCY = {}          # config's block_M -> what the stand-in's own benchmark measures (ms)
BENCHMARKED = []      # every config benchmarked by the stand-in's own benchmark
ORDER = "given"       # the order configs finish benchmarking in: "given" or "reversed"


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
        BENCHMARKED.append(dict(jit_kernel.config))
        return LATENCY[jit_kernel.config["block_M"]], None

    def run(self, key):
        if key in self._memory_cache:
            return self._memory_cache[key]
        found = self._load_result_from_disk(key)
        if found is not None:
            return found
        configs = self.autotuned.configs if ORDER == "given" else list(reversed(self.autotuned.configs))
        best = None
        for config in configs:
            latency, _ = self._benchmark_target(self.autotuned.jit_impl.compile(**config))
            if best is None or latency < best.latency:
                best = AutotuneResult(latency, dict(config))
        self._save_result_to_disk(key, best)
        self._memory_cache[key] = best
        return best


class Kernel:
    def __init__(self, config):
        self.config = config

    def get_kernel_source(self):
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

PARAM = """
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


@pytest.fixture
def tilelang(tmp_path, monkeypatch):
    """The stand-in's tuner module (tilelang.autotuner.tuner), importable as TileLang for the test."""
    package = tmp_path / "site" / "tilelang" / "autotuner"
    package.mkdir(parents=True)
    (tmp_path / "site" / "tilelang" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "tuner.py").write_text(textwrap.dedent(TUNER))
    (package / "param.py").write_text(textwrap.dedent(PARAM))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]:
        monkeypatch.delitem(sys.modules, name)
    from tilelang.autotuner import tuner

    tuner.CACHE_DIR = str(tmp_path / "cache")
    yield tuner
    for name in [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]:
        del sys.modules[name]
