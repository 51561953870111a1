"""Triton: nsprof's in-process timers as Triton's autotuner benchmark function.

    import triton
    from nsprof.integrations.triton import do_bench

    @triton.autotune(configs=[...], key=["N"], do_bench=do_bench(timer="cupti"))
    @triton.jit
    def kernel(...): ...

Triton's Autotuner calls `do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))` and expects
milliseconds: a float, or one value per quantile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def do_bench(timer: str = "cupti", *, l2: str = "warm", reps: int = 50, warmup: int = 5) -> Callable:
    """A Triton-compatible benchmark function measuring with nsprof.timers.measure."""
    from nsprof.timers.base import TIMERS

    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {TIMERS}")

    def bench(kernel_call: Callable[[], object], quantiles: Sequence[float] | None = None,
              return_mode: str = "median", **_ignored) -> float | list[float]:
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
