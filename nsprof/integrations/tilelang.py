"""TileLang: measure an `@tilelang.autotune` kernel's configs with nsprof, and hand the winner
back so that the user's own autotuned call returns it without benchmarking again.

In a target file (for `nsprof tune`, through the Space's `TileLangHook`, an nsprof.tuner.TunerHook):

    from my_kernels import matmul               # @tilelang.autotune(configs=...) @tilelang.jit
    from nsprof.integrations.tilelang import autotune_space
    space = autotune_space(matmul, 1, 1024, 1024)  # the call's own arguments

After tuning, in a process on the GPU:

    from nsprof.integrations.tilelang import feed_back
    feed_back(matmul, (1, 1024, 1024), latencies_ms)   # {config index: ms}; writes TileLang's cache

Feed-back runs TileLang's own AutoTuner once with its benchmark step replaced by nsprof's
numbers (looked up by the compiled kernel's source), so TileLang picks nsprof's best config
and stores it in its autotuner cache under its usual key: later calls of `matmul(1, 1024,
1024)`, in this or another process, load it and benchmark nothing. It relies on
`AutoTuner._benchmark_target` of TileLang 0.1.15 and says so when that is missing.

Every shape a kernel serves, in one `nsprof tune` (a list of call-argument tuples):

    space = autotune_shapes(matmul, [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096)])

Each (shape, config) is measured in the one session and each shape ranked on its own; each
shape's winner is fed back by calling TileLang's tuner with that shape's arguments, in a fresh
process per shape (TunerHook.feed_back_shapes_apart): TileLang keys its cache by the call's
arguments (with the kernel's source, its configs and compile arguments). Those compile arguments
change in a process once TileLang has loaded the kernel from a cache (it rewrites out_idx in
place), so each shape's entry is written under both keys: a process's first call finds it, and so
does every later one.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nsprof.errors import NsprofError
from nsprof.space import Space
from nsprof.tuner import TunerHook, best_strictly_first, each_shape


def _configs(autotuned, args: tuple, kwargs: dict) -> list[dict[str, Any]]:
    configs = getattr(autotuned, "configs", None)
    if callable(configs):
        configs = configs(*args, **kwargs)
    if not configs:
        raise NsprofError("the autotuned kernel has no configs (is it decorated with @tilelang.autotune?)")
    return [dict(c) for c in configs]


def _compile(autotuned, args: tuple, kwargs: dict, config: Mapping[str, Any]):
    # The same path TileLang's tuner takes for one config (AutoTuneImpl eager jit_compile).
    return autotuned.jit_impl.compile(*args, **{**kwargs, **config})


def autotune_space(autotuned, *args, **kwargs) -> Space:
    """An nsprof Space over an `@tilelang.autotune` kernel's configs, for these call arguments.

    Inputs come from TileLang's own supply (random tensors of the kernel's parameter shapes).
    """
    return _space(autotuned, _configs(autotuned, args, kwargs), args, kwargs, None)


def autotune_shapes(autotuned, shapes, **kwargs) -> Space:
    """An nsprof Space over an `@tilelang.autotune` kernel's configs at each of `shapes`, a list of
    call-argument tuples (`[(1, 4096, 4096), (16, 4096, 4096)]`; keyword arguments are the same for
    every call). The kernel's configs must be the same list at every shape."""
    calls = [tuple(shape) if isinstance(shape, (tuple, list)) else (shape,) for shape in shapes]
    if not calls:
        raise NsprofError("autotune_shapes needs at least one shape (a tuple of the call's arguments)")
    configs = _configs(autotuned, calls[0], kwargs)
    for call in calls[1:]:
        if _configs(autotuned, call, kwargs) != configs:
            raise NsprofError(
                f"the kernel's configs at {call} differ from those at {calls[0]}: one Space "
                "ranks one config list; make a Space per config list"
            )
    return _space(autotuned, configs, calls[0], kwargs, calls)


def _space(autotuned, configs, args: tuple, kwargs: dict, calls: list[tuple] | None) -> Space:
    def compile_config(config, *shape):  # compile_config(config, shape) for a Space with shapes
        return _compile(autotuned, tuple(shape[0]) if shape else args, kwargs, config)

    def build(config, *shape):
        kernel = compile_config(config, *shape)
        # Inputs only: a kernel with out_idx allocates its outputs itself (TileLang supplies the rest)
        inputs = kernel.get_profiler()._get_inputs(with_output=False)
        return lambda: kernel(*inputs)

    name = getattr(getattr(autotuned, "jit_impl", None), "func", None)
    # nsprof tune calls space.tuner.feed_back with its measured latencies once it has ranked them.
    return Space(
        name=getattr(name, "__name__", "tilelang_autotune"),
        configs=configs,
        build=build,
        compile=compile_config,
        shapes=calls,
        tuner=TileLangHook(autotuned, args, kwargs, shapes=calls),
    )


class TileLangHook(TunerHook):
    """An `@tilelang.autotune` kernel's autotuner, for these call arguments: its own pick (with
    its own benchmark) and the feed-back into its autotuner cache."""

    name = "TileLang's autotuner cache"
    can_pick = True

    feed_back_shapes_apart = True  # TileLang's key depends on what the process compiled before

    def __init__(
        self, autotuned, args: tuple, kwargs: dict | None = None, shapes: list[tuple] | None = None
    ) -> None:
        self.autotuned, self.args, self.kwargs = autotuned, args, dict(kwargs or {})
        self.shapes = shapes

    def pick(self) -> dict[str, Any]:
        return tilelang_pick(self.autotuned, self.args, self.kwargs)

    def pick_shapes(self, shapes: list[int]) -> dict[int, dict[str, Any]]:
        """TileLang's own pick at each shape, on a call with that shape's arguments."""
        if self.shapes is None:
            raise NsprofError("this Space has no shapes: pick() gives its one pick")
        return {
            int(shape): tilelang_pick(self.autotuned, self.shapes[int(shape)], self.kwargs)
            for shape in shapes
        }

    def feed_back(self, latencies_ms: Mapping[int, float]) -> str:
        # The entry read back from TileLang's cache, shown as tune's JSON document shows configs.
        written = feed_back(self.autotuned, self.args, latencies_ms, self.kwargs)
        return str(json.loads(json.dumps(written, default=str)))

    def feed_back_shapes(
        self, latencies_by_shape: Mapping[int, Mapping[int, float]]
    ) -> dict[int, str | dict]:
        """Each shape's ranking into TileLang's cache under the key of a call with that shape's arguments."""
        if self.shapes is None:
            raise NsprofError("this Space has no shapes: feed_back takes its one ranking")

        def one(shape: int, latencies_ms: Mapping[int, float]) -> str:
            entry = feed_back(self.autotuned, self.shapes[shape], latencies_ms, self.kwargs)
            return f"{json.loads(json.dumps(entry, default=str))} for call {self.shapes[shape]}"

        return each_shape(latencies_by_shape, one)


@contextlib.contextmanager
def _benchmark_replaced(latency_by_source: Callable[[], Mapping[str, float]]):
    """TileLang's benchmark step answers nsprof's latency of the compiled kernel (by its source).
    The source map is made at the first call, after TileLang has computed its cache key: compiling
    before that changes the key (seen on the H200, TileLang 0.1.15)."""
    import threading

    from tilelang.autotuner.tuner import AutoTuner

    original = getattr(AutoTuner, "_benchmark_target", None)
    if original is None:
        raise NsprofError(
            "this TileLang has no AutoTuner._benchmark_target; nsprof's feed-back supports TileLang 0.1.15"
        )
    made: list[Mapping[str, float]] = []
    making = threading.Lock()

    def nsprof_latency(self, jit_kernel, *unused_args, **unused_kwargs):
        with making:
            if not made:
                made.append(latency_by_source())
        latency = made[0].get(jit_kernel.get_kernel_source())
        if latency is None:
            raise RuntimeError("nsprof has no measurement for this config")
        return latency, None

    AutoTuner._benchmark_target = nsprof_latency
    try:
        yield
    finally:
        AutoTuner._benchmark_target = original


@contextlib.contextmanager
def _caches_aside(autotuned, save: Callable | None, keep: bool):
    """While TileLang's autotuner runs: answer nothing from its caches (they hold the last winner,
    maybe another tool's), and store a result through `save(tuner, key, result)` (None: store
    nothing). `keep`: what the run put in the in-memory caches stays after it (the feed-back's
    winner); else those caches are as before (a pick leaves nothing behind). Yields the run's own
    in-memory caches: {"memory": AutoTuner's, "call": the kernel's per-call cache or None}."""
    from tilelang.autotuner.tuner import AutoTuner

    load, store = AutoTuner._load_result_from_disk, AutoTuner._save_result_to_disk
    memory, per_call = AutoTuner._memory_cache, getattr(autotuned, "_tuner_cache", None)

    def load_nothing(self, key):
        return None

    def save_through(self, key, result):
        if save is not None:
            save(self, key, result)

    AutoTuner._load_result_from_disk, AutoTuner._save_result_to_disk = load_nothing, save_through
    run = {"memory": {}, "call": None if per_call is None else {}}
    AutoTuner._memory_cache = run["memory"]
    if per_call is not None:
        autotuned._tuner_cache = run["call"]
    try:
        yield run
    finally:
        AutoTuner._load_result_from_disk, AutoTuner._save_result_to_disk = load, store
        AutoTuner._memory_cache = memory
        if per_call is not None:
            autotuned._tuner_cache = per_call
        if keep:
            memory.update(run["memory"])
            if per_call is not None:
                per_call.update(run["call"])


_ASIDE = ".nsprof-replaced-"  # the entry under a key, moved aside while its new one is written


def _settle(aside: Path, path: Path) -> None:
    """The entry moved `aside` from `path`: put back where the key holds no complete entry (its new one's
    save failed, or was killed), else removed."""
    import os
    import shutil

    from tilelang.autotuner.param import BEST_CONFIG_PATH

    if aside.exists() and not (path / BEST_CONFIG_PATH).is_file():
        shutil.rmtree(path, ignore_errors=True)
        os.replace(aside, path)
    shutil.rmtree(aside, ignore_errors=True)


def _put_back_left_aside(path: Path) -> None:
    """The entries a feed-back that was killed (at its timeout) left aside beside `path`, settled."""
    import glob

    from nsprof.host.children import pid_alive

    for aside in path.parent.glob(f"{glob.escape(path.name)}{_ASIDE}*"):
        owner = aside.name.rpartition(_ASIDE)[2]
        if owner.isdigit() and not pid_alive(int(owner)):  # else another feed-back's, under way
            _settle(aside, path)


def _entry_replaced(written: dict) -> Callable:
    """A save that makes the disk entry under TileLang's key the new one, and records it in
    `written`. TileLang itself keeps a complete entry it finds there; that is how a second tune's
    winner was lost."""
    import json
    import os

    from tilelang.autotuner.param import BEST_CONFIG_PATH
    from tilelang.autotuner.tuner import AutoTuner

    save = AutoTuner._save_result_to_disk

    def replace(self, key, result):
        path = Path(self.cache_dir) / key
        _put_back_left_aside(path)
        aside = path.with_name(f"{path.name}{_ASIDE}{os.getpid()}")
        if path.exists():
            os.replace(path, aside)  # readers meanwhile find no entry and tune themselves: never a stale one
        try:
            save(self, key, result)
        finally:
            _settle(aside, path)
        if not (path / BEST_CONFIG_PATH).is_file():
            raise NsprofError(
                f"TileLang wrote no complete autotuner cache entry at {path} (the one there before is kept)"
            )
        written["path"], written["compile_args"] = path, self.compile_args
        written["config"] = json.loads((path / BEST_CONFIG_PATH).read_text())  # what a new process will load

    return replace


def _matching(configs: list, config: dict) -> list[int]:
    """The indices of the configs that `config` (TileLang's, perhaps read from its JSON: tuples become
    lists) is: those equal to it, else those whose every key it holds with the same value."""

    def as_json(value):
        return json.loads(json.dumps(value, default=str))

    given = as_json(config)
    listed = [as_json(c) for c in configs]
    equal = [i for i, c in enumerate(listed) if c == given]
    return equal or [i for i, c in enumerate(listed) if {k: given.get(k) for k in c} == c]


def tilelang_pick(autotuned, args: tuple, kwargs: dict | None = None) -> dict[str, Any]:
    """Run TileLang's own autotuner (its own benchmark) and say what it picks. Its caches are
    neither read nor written, and its choice is forgotten afterwards, so the pick is TileLang's
    measurement of now and nothing of it stays behind. TileLang reports the best config's latency
    only, so timings_ms holds that one."""
    kwargs = dict(kwargs or {})
    configs = _configs(autotuned, args, kwargs)
    with _caches_aside(autotuned, save=None, keep=False) as run:
        autotuned.compile(*args, **kwargs)
    chosen = [config for _, config in (run["call"] or {}).values()]
    chosen += [result.config for result in run["memory"].values()]
    latency = next((float(r.latency) for r in run["memory"].values() if r.latency is not None), None)
    if not chosen or chosen[0] is None:
        raise NsprofError("TileLang's autotuner ran but kept no choice to read back")
    config = dict(chosen[0])
    index = next(iter(_matching(configs, config)), None)
    return {
        "tuner": "TileLang's autotuner",
        "timer": "TileLang's own benchmark",
        "config_id": index,
        "config": config,
        "timings_ms": {} if index is None or latency is None else {str(index): latency},
    }


def _write_entry(autotuned, args: tuple, kwargs: dict, by_source) -> dict:
    """One run of TileLang's tuner with its benchmark answered by `by_source`, its entry written
    over the one under its key; the entry ({"path", "compile_args", "config"}), checked that
    TileLang loads it back."""
    from tilelang.autotuner.param import AutotuneResult

    written: dict = {}
    with _benchmark_replaced(by_source), _caches_aside(autotuned, _entry_replaced(written), keep=True):
        autotuned.compile(*args, **kwargs)
    if "config" not in written:
        raise NsprofError(
            "TileLang wrote no autotuner cache entry (is TILELANG_AUTO_TUNING_DISABLE_CACHE set, "
            "or does the kernel pass ref_prog/supply_prog, which TileLang does not cache?)"
        )
    try:
        loaded = AutotuneResult.load_from_disk(written["path"], written["compile_args"])
    except (
        Exception
    ) as exc:  # its own exception types (TVM, cloudpickle, a missing file): one line with the path
        raise NsprofError(
            f"TileLang cannot load the autotuner cache entry it wrote at {written['path']}: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        ) from None
    if loaded is None:
        raise NsprofError(f"TileLang cannot load the autotuner cache entry it wrote at {written['path']}")
    return written


def feed_back(autotuned, args: tuple, latencies_ms: Mapping[int, float], kwargs: dict | None = None):
    """Make TileLang's autotuner choose by nsprof's latencies (config index -> ms) and cache it.

    Returns the config now in TileLang's autotuner cache on disk, read back from there; an
    NsprofError when TileLang wrote none (its autotune cache disabled, or a key it cannot make)
    or wrote another config than nsprof's best. Configs without a latency are left to fail
    inside TileLang's tuner, which skips them.
    """
    kwargs = dict(kwargs or {})
    configs = _configs(autotuned, args, kwargs)
    if not latencies_ms:
        raise NsprofError("no measured config to feed back")

    best_index, fed = best_strictly_first(latencies_ms)

    sources: dict[int, str] = {}  # config index -> its compiled kernel's source

    def by_source() -> dict[str, float]:
        latencies: dict[str, float] = {}
        for index, latency in fed.items():
            sources[index] = _compile(autotuned, args, kwargs, configs[index]).get_kernel_source()
            latencies[sources[index]] = min(latency, latencies.get(sources[index], latency))
        return latencies

    # TileLang's key holds the kernel's out_idx, and TileLang rewrites that list in place when it loads the
    # kernel from a cache (out_idx=[-1] becomes [2]): a process's first call computes one key, every call
    # after a cache hit another (seen on the H200, TileLang 0.1.15). So the entry goes under both, or a
    # user's process calling a second shape after a first benchmarks again. TileLang's own load of the
    # entry just written makes the second state, as a user's first call does. (In a process that has
    # loaded this kernel already, only the second key is written: nsprof tune feeds back in a fresh one.)
    entries: list[dict] = []
    declared = copy.deepcopy(getattr(getattr(autotuned, "jit_impl", None), "out_idx", None))
    for _ in range(2):
        entries.append(_write_entry(autotuned, args, kwargs, by_source))
        if getattr(autotuned.jit_impl, "out_idx", None) == declared:
            break  # the key did not change: one entry is all
        declared = copy.deepcopy(autotuned.jit_impl.out_idx)
    best = configs[best_index]
    for written in entries:
        # a config that compiles to the best's very kernel is the best too: TileLang cannot tell them apart
        chosen = _matching(configs, written["config"])
        if not any(i == best_index or sources.get(i, "") == sources.get(best_index) for i in chosen):
            raise NsprofError(
                f"TileLang's cache at {written['path']} holds {written['config']}, not nsprof's best {best}"
            )
    return entries[0]["config"]
