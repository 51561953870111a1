"""Triton: nsprof's timers and ground truth for `@triton.autotune` kernels.

In-process timers as Triton's benchmark function:

    @triton.autotune(configs=[...], key=["N"], do_bench=do_bench(timer="cupti"))
    @triton.jit
    def kernel(...): ...

Triton's Autotuner calls `do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))` and expects
milliseconds: a float, or one value per quantile.

Ground truth over an autotuned kernel's configs (for `nsprof tune`), in a target file:

    from my_kernels import matmul                 # @triton.autotune(configs=..., key=[...], cache_results=True)
    from nsprof.integrations.triton import autotune_space
    space = autotune_space(matmul, make_inputs, grid)   # make_inputs() -> (args, kwargs)

`autotune_space` gives the Space a `TritonHook` (an nsprof.tuner.TunerHook), through which
`nsprof tune` then measures each config (the kernel's own `triton.jit` function launched
with that config's meta-parameters), reports the config Triton's own autotuner picks with
its own timer beside the ground-truth ranking (in a child process of its own), and feeds
the ranking back: Triton's
autotuner runs once with its benchmark step answered by nsprof's numbers, so it picks
nsprof's best and writes it to Triton's autotuning disk cache under its usual key. Later
calls of the kernel, in any process, load that choice and benchmark nothing, provided the
kernel has `cache_results=True` or `TRITON_CACHE_AUTOTUNING=1` is set (Triton's own switch
for its disk cache).

Limits, each checked or said where it applies:
- A config's `pre_hook` runs once when the config is built, before its first launch, not
  around each measured launch (it would add its own kernels to the measured range); the
  autotuner's `reset_to_zero` and `restore_value` are not run. Triton caches no choice for
  configs with a `pre_hook`, so their feed-back lasts for nsprof's process only.
- `prune_configs_by` may leave nsprof's best out of what Triton benchmarks: the feed-back
  then fails with that reason instead of storing another config.
- `make_inputs` must pass arguments the way the user's call does (positional or keyword):
  Triton's cache key lists the tensors' dtypes in argument order.
- Pass the autotuner itself: a `@triton.heuristics` wrapped around it is not looked through.

Each config is compiled before the first window, in the worker, several at once
(JITFunction.warmup in a pool of threads; Space.compile_in_worker): the first config at each shape
alone, on that shape's inputs, the others on stand-ins of them (each tensor's dtype, shape, strides
and offset as a tensor on torch's "meta" device, which Triton specializes the same way but which
holds no GPU memory), so the pool's threads touch no GPU. The build's first launch then finds its
kernel compiled. A config with a `pre_hook` is left to its first launch (see below).

Every shape a kernel serves, in one `nsprof tune`:

    space = autotune_space(matmul, make_inputs, grid, shapes=[{"M": m} for m in (1, 16, 128, 1024)])
    # make_inputs(shape) -> (args, kwargs) at that shape; grid a function of the meta-parameters

Each (shape, config) is measured in the one session, each shape ranked on its own, and each
shape's winner fed back by running the autotuner once on that shape's inputs: Triton computes
its own key from them (the `key=[...]` arguments' values, and the tensors' dtypes), so each
shape's choice lands under the key the user's own call at that shape computes.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nsprof.errors import NsprofError
from nsprof.integrations.triton_compile import Warmup
from nsprof.space import Space
from nsprof.tuner import TunerHook, best_strictly_first, each_shape

# Triton.Config fields that are launch options rather than the kernel's constexpr arguments.
_OPTION_FIELDS = ("num_warps", "num_ctas", "num_stages", "maxnreg")


def do_bench(timer: str = "cupti", *, l2: str = "warm", reps: int = 50, warmup: int = 5) -> Callable:
    """A Triton-compatible benchmark function measuring with nsprof.timers.measure."""
    from nsprof.timers import TIMERS

    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {TIMERS}")

    def bench(
        kernel_call: Callable[[], object],
        quantiles: Sequence[float] | None = None,
        return_mode: str = "median",
        **_ignored,
    ) -> float | list[float]:
        from nsprof.timers import measure

        result = measure(kernel_call, timer=timer, reps=reps, warmup=warmup, l2=l2)
        samples_ms = sorted(s / 1e6 for s in result.valid_ns)
        if quantiles:
            return [quantile(samples_ms, q) for q in quantiles]
        if return_mode == "min":
            return samples_ms[0]
        if return_mode == "max":
            return samples_ms[-1]
        if return_mode == "mean":
            return sum(samples_ms) / len(samples_ms)
        return quantile(samples_ms, 0.5)

    bench.nsprof_timer = timer  # so a tuner's log can say which timer chose the config
    return bench


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (what numpy/torch call 'linear')."""
    if not sorted_values:
        return float("nan")
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def config_dict(config) -> dict[str, Any]:
    """A triton.Config as the flat dict nsprof tables show: its kwargs, then its launch options."""
    flat = dict(config.kwargs)
    for name in _OPTION_FIELDS:
        value = getattr(config, name, None)
        if value is not None:
            flat[name] = value
    return flat


def _autotuner_configs(autotuned) -> list:
    configs = getattr(autotuned, "configs", None)
    if not configs or not hasattr(autotuned, "fn"):
        raise NsprofError(
            "not a @triton.autotune kernel: it has no configs (decorate it with "
            "@triton.autotune(configs=[...], key=[...]))"
        )
    return list(configs)


def autotune_space(
    autotuned,
    make_inputs: Callable[..., tuple[tuple, dict]],
    grid,
    *,
    check: Callable[[tuple, dict], None] | None = None,
    name: str | None = None,
    shapes: Sequence[Any] | None = None,
) -> Space:
    """An nsprof Space over an `@triton.autotune` kernel's configs.

    make_inputs() returns (args, kwargs) for one call of the kernel, with fresh random tensors
    on the GPU; grid is what `kernel[grid]` takes (a tuple, or a function of the meta-parameters).
    check(args, kwargs), if given, runs after the first launch and raises when the output is wrong.
    With `shapes` (any JSON-able values, e.g. [{"M": 1}, {"M": 16}]), make_inputs(shape) gives the
    call at that shape, and grid should be a function of the meta-parameters (which hold the call's
    arguments), so that one grid serves every shape.
    """
    configs = _autotuner_configs(autotuned)
    flat = [config_dict(c) for c in configs]
    by_key = {json.dumps(c, sort_keys=True, default=str): original for c, original in zip(flat, configs)}

    def build(config: dict, *shape):  # build(config), or build(config, shape) for a Space with shapes
        args, kwargs = make_inputs(*shape)
        fn = autotuned.fn  # the jit function (or its heuristics wrapper), without the autotuner
        hook = _pre_hook(by_key, config)
        if hook is not None:  # once, outside every measured range
            hook({**dict(zip(getattr(autotuned, "arg_names", ()), args)), **kwargs, **config})

        def launch():
            fn[grid](*args, **kwargs, **config)

        launch()
        if check is not None:
            check(args, kwargs)
        return launch

    base = getattr(autotuned, "base_fn", None) or getattr(autotuned, "fn", None)
    return Space(
        name=name or getattr(base, "__name__", "triton_autotune"),
        configs=flat,
        build=build,
        # a config with a pre_hook is left to its first launch: the hook may set what Triton
        # specializes on (a TMA descriptor's block shape), and it runs once, in the build
        compile=Warmup(autotuned, make_inputs, grid, lambda config: _pre_hook(by_key, config) is not None),
        compile_in_worker=True,
        tuner=TritonHook(autotuned, make_inputs, grid, shapes),
        shapes=None if shapes is None else list(shapes),
    )


def _pre_hook(by_key: dict, config: dict):
    return getattr(by_key.get(json.dumps(config, sort_keys=True, default=str)), "pre_hook", None)


class TritonHook(TunerHook):
    """An `@triton.autotune` kernel's autotuner, for these inputs and grid: its own pick
    (`triton_pick`) and the feed-back into its autotuning disk cache (`feed_back`)."""

    name = "Triton's autotuner"
    can_pick = True

    def __init__(
        self,
        autotuned,
        make_inputs: Callable[..., tuple[tuple, dict]],
        grid,
        shapes: Sequence[Any] | None = None,
    ) -> None:
        self.autotuned, self.make_inputs, self.grid = autotuned, make_inputs, grid
        self.shapes = None if shapes is None else list(shapes)

    def pick(self) -> dict[str, Any]:
        return triton_pick(self.autotuned, self.make_inputs, self.grid)

    def pick_shapes(self, shapes: list[int]) -> dict[int, dict[str, Any]]:
        """Triton's own pick at each shape, on that shape's inputs."""
        if self.shapes is None:
            raise NsprofError("this Space has no shapes: pick() gives its one pick")
        return {
            int(shape): triton_pick(
                self.autotuned, lambda value=self.shapes[int(shape)]: self.make_inputs(value), self.grid
            )
            for shape in shapes
        }

    def feed_back(self, latencies_ms: Mapping[int, float]) -> str:
        return feed_back(self.autotuned, self.make_inputs, self.grid, latencies_ms)

    def feed_back_shapes(
        self, latencies_by_shape: Mapping[int, Mapping[int, float]]
    ) -> dict[int, str | dict]:
        """Each shape's ranking fed back on that shape's inputs: Triton keys each choice itself."""
        if self.shapes is None:
            raise NsprofError("this Space has no shapes: feed_back takes its one ranking")

        def one(shape: int, latencies_ms: Mapping[int, float]) -> str:
            value = self.shapes[shape]
            line = feed_back(self.autotuned, lambda: self.make_inputs(value), self.grid, latencies_ms)
            return f"{line}, key {cache_key(self.autotuned, self.make_inputs(value))}"

        return each_shape(latencies_by_shape, one)


def _index_of(configs: list, config) -> int | None:
    wanted = config_dict(config)
    return next((i for i, c in enumerate(configs) if config_dict(c) == wanted), None)


def triton_pick(autotuned, make_inputs, grid) -> dict[str, Any]:
    """Run Triton's own autotuner (its own benchmark function) and say what it picks.

    Its disk cache is bypassed and its in-memory choice forgotten afterwards, so the pick is
    Triton's measurement of now, and nothing of it stays behind.
    """
    import torch

    configs = _autotuner_configs(autotuned)
    args, kwargs = make_inputs()
    saved, saved_cache = autotuned.cache_results, dict(autotuned.cache)
    autotuned.cache_results = False
    autotuned.cache.clear()
    try:
        autotuned[grid](*args, **kwargs)
        torch.cuda.synchronize()
        best = autotuned.best_config
        timings = getattr(autotuned, "configs_timings", None) or {}
    finally:
        autotuned.cache_results = saved
        autotuned.cache.clear()
        autotuned.cache.update(saved_cache)
    bench = getattr(autotuned, "_do_bench", None)
    timer = getattr(bench, "nsprof_timer", None)
    return {
        "tuner": "Triton's autotuner",
        "timer": f"nsprof {timer}"
        if timer
        else (
            "Triton's do_bench (CUDA events)"
            if bench is None
            else getattr(bench, "__name__", "a custom do_bench")
        ),
        "config_id": _index_of(configs, best),
        "config": config_dict(best),
        "timings_ms": {str(_index_of(configs, c)): _first(t) for c, t in timings.items()},
    }


def _first(timing) -> float:
    if isinstance(timing, (list, tuple)):
        return float(timing[0]) if timing else float("nan")
    return float(timing)


@contextlib.contextmanager
def _fresh_autotune_cache_files():
    """Triton's disk cache, except that an autotuning result already there is not read
    (so the tuner benchmarks, through nsprof's numbers, and writes its choice over it)."""
    import triton.runtime.autotuner as autotuner_module

    original = autotuner_module.get_cache_manager

    class _WriteOnly:
        def __init__(self, manager) -> None:
            self._manager = manager

        def get_file(self, filename):
            return None if filename.endswith(".autotune.json") else self._manager.get_file(filename)

        def __getattr__(self, name):
            return getattr(self._manager, name)

    autotuner_module.get_cache_manager = lambda key: _WriteOnly(original(key))
    try:
        yield
    finally:
        autotuner_module.get_cache_manager = original


def feed_back(autotuned, make_inputs, grid, latencies_ms: Mapping[int, float]) -> str:
    """Make Triton's autotuner choose by nsprof's latencies (config index -> ms) and cache it.

    Returns a one-line account of what Triton stored. Configs without a latency (failed or
    not measured) get an infinite time, as Triton gives configs that fail to compile.
    """
    import torch

    configs = _autotuner_configs(autotuned)
    if not latencies_ms:
        raise NsprofError("no measured config to feed back")
    if len(configs) == 1:
        return "nothing to feed back: with one config Triton's autotuner runs it without tuning"
    best_index, fed = best_strictly_first(latencies_ms)
    best = config_dict(configs[best_index])
    if not hasattr(autotuned, "check_disk_cache") or not hasattr(autotuned, "_bench"):
        raise NsprofError(
            "this Triton's autotuner has no _bench/check_disk_cache; nsprof's feed-back "
            "supports Triton 3.2 to 3.6"
        )
    by_config: dict[str, float] = {}  # a config listed twice: its lowest latency
    for index, ms in fed.items():
        key = json.dumps(config_dict(configs[index]), sort_keys=True)
        by_config[key] = min(ms, by_config.get(key, ms))

    def nsprof_bench(*args, config, **meta):
        ms = by_config.get(json.dumps(config_dict(config), sort_keys=True), math.inf)
        return [ms, ms, ms]

    args, kwargs = make_inputs()
    persistent = not any(getattr(c, "pre_hook", None) for c in configs)
    saved = autotuned.cache_results
    autotuned._bench = nsprof_bench  # this object only; the class is untouched
    autotuned.cache_results = persistent
    autotuned.cache.clear()
    try:
        with _fresh_autotune_cache_files():
            autotuned[grid](*args, **kwargs)
        torch.cuda.synchronize()
    finally:
        del autotuned._bench
        autotuned.cache_results = saved
    chosen = config_dict(autotuned.best_config)
    if chosen != best:
        raise NsprofError(
            f"Triton's autotuner chose {chosen}, not nsprof's best {best}: its "
            "prune_configs_by left nsprof's best out of what it benchmarks, or changed the configs"
        )
    if not persistent:
        return f"{chosen} (this process only: Triton caches no choice for configs with a pre_hook)"
    where = (
        "" if saved else "; set cache_results=True or TRITON_CACHE_AUTOTUNING=1 for other processes to use it"
    )
    return f"{chosen} (written to Triton's autotuning cache{where})"


def cache_key(autotuned, inputs: tuple[tuple, dict]) -> tuple:
    """The key Triton's autotuner files a call's choice under (Triton 3.2 to 3.6): the values of its
    `key=[...]` arguments, then the dtypes of the tensor arguments, in argument order. For what tune
    says; the feed-back itself lets the autotuner compute its key."""
    args, kwargs = inputs
    names = list(getattr(autotuned, "arg_names", ()))
    named = {k: v for k, v in {**dict(zip(names, args)), **kwargs}.items() if k in names}
    key = [named[name] for name in getattr(autotuned, "keys", ()) if name in named]
    key += [str(value.dtype) for value in named.values() if hasattr(value, "dtype")]
    return tuple(key)
