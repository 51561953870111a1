"""The Triton benchmark adapter's contract (quantiles, units), with the timer replaced."""

from __future__ import annotations

import sys
import types

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


@pytest.mark.parametrize(
    ("mode", "expected_ms"), [("median", 0.003), ("min", 0.001), ("max", 0.005), ("mean", 0.003)]
)
def test_return_modes(fake_measure, mode, expected_ms):
    assert triton_hook.do_bench()(lambda: None, return_mode=mode) == pytest.approx(expected_ms)


def test_unknown_timer():
    with pytest.raises(ValueError):
        triton_hook.do_bench(timer="ncu")


def test_nan_samples_are_left_out():
    result = TimerResult("cupti", [float("nan"), 3000.0, 3100.0, float("nan"), 2900.0])
    assert result.median_ns == 3000.0 and result.min_ns == 2900.0
    assert result.as_dict()["invalid_samples"] == 2


class _Config:
    """What nsprof reads of a triton.Config."""

    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None):
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
        self.num_ctas, self.maxnreg, self.pre_hook = num_ctas, maxnreg, None


class _JitFunction:
    def __init__(self):
        self.launches, self.warmups = [], []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))

    def warmup(self, *args, grid, **kwargs):  # Triton's: compile for these arguments, launch nothing
        self.warmups.append((grid, args, kwargs))


class _Autotuner:
    def __init__(self, configs):
        self.configs, self.fn = configs, _JitFunction()


def test_autotune_space_launches_the_jit_function_with_each_configs_meta_parameters():
    tuned = _Autotuner(
        [
            _Config({"BLOCK": 64}, num_warps=4, num_stages=2),
            _Config({"BLOCK": 128}, num_warps=8, num_stages=3, maxnreg=128),
        ]
    )
    inputs = []

    def make_inputs():
        inputs.append(object())
        return (inputs[-1], 1024), {"eps": 1e-5}

    checked = []
    space = triton_hook.autotune_space(tuned, make_inputs, (16,), check=lambda a, k: checked.append(a[0]))
    assert space.configs == [
        {"BLOCK": 64, "num_warps": 4, "num_ctas": 1, "num_stages": 2},
        {"BLOCK": 128, "num_warps": 8, "num_ctas": 1, "num_stages": 3, "maxnreg": 128},
    ]
    launch = space.build(space.configs[1])
    assert checked == [inputs[0]]  # the output is checked after the first launch
    launch()
    expected = (
        (16,),
        (inputs[0], 1024),
        {"eps": 1e-5, "BLOCK": 128, "num_warps": 8, "num_ctas": 1, "num_stages": 3, "maxnreg": 128},
    )
    assert tuned.fn.launches == [expected, expected]
    assert isinstance(space.tuner, triton_hook.TritonHook)
    assert (space.tuner.name, space.tuner.can_pick, space.tuner.can_feed_back) == (
        "Triton's autotuner",
        True,
        True,
    )


def test_autotune_space_compiles_each_config_in_the_worker_on_inputs_made_once_per_shape():
    # the compile step is JITFunction.warmup (no launch), run in the measuring worker
    # (Space.compile_in_worker): the inputs at a shape are made by its first compile only, since the
    # others run in threads while windows are measured
    tuned = _Autotuner([_Config({"BLOCK": 64}), _Config({"BLOCK": 128}, num_warps=8)])
    made = []

    def make_inputs(shape):
        made.append(shape["M"])
        return (object(), shape["M"]), {"eps": 1e-5}

    grid = lambda meta: (meta["M"],)  # noqa: E731
    space = triton_hook.autotune_space(tuned, make_inputs, grid, shapes=[{"M": 1}, {"M": 16}])
    assert space.compiles == "worker"
    for shape in (0, 1):
        for config_id in (0, 1):
            space.compile_at(config_id, shape)
    assert made == [1, 16] and tuned.fn.launches == []
    assert [(w[0], w[1][1], w[2]["BLOCK"]) for w in tuned.fn.warmups] == [
        (grid, 1, 64),
        (grid, 1, 128),
        (grid, 16, 64),
        (grid, 16, 128),
    ]
    assert tuned.fn.warmups[0][1][0] is tuned.fn.warmups[1][1][0]  # the shape's one set of inputs
    assert tuned.fn.warmups[1][2] == {"eps": 1e-5, **space.configs[1]}


def test_a_tensor_stands_in_for_triton_as_a_meta_tensor_of_its_dtype_shape_and_strides(monkeypatch):
    # torch's own: a tensor of torch.empty_strided(shape, stride, dtype=, device="meta") has
    # data_ptr() 0 (aligned, as Triton reads an allocation) and holds no memory. Here torch stood in
    # for: what _stand_in asks of it.
    made = []

    class Tensor:
        def __init__(self, shape, stride, dtype):
            self.shape, self.dtype, self._stride = shape, dtype, stride

        def stride(self):
            return self._stride

    def empty_strided(shape, stride, *, dtype, device):
        made.append((shape, stride, dtype, device))
        return "meta tensor"

    monkeypatch.setitem(
        sys.modules, "torch", types.SimpleNamespace(Tensor=Tensor, empty_strided=empty_strided)
    )
    assert triton_hook._stand_in(Tensor((4, 3), (6, 2), "float16")) == "meta tensor"
    assert made == [((4, 3), (6, 2), "float16", "meta")]
    assert triton_hook._stand_in(7) == 7 and triton_hook._stand_in(None) is None


def test_autotune_space_refuses_what_is_not_an_autotuned_kernel():
    from nsprof.errors import NsprofError

    with pytest.raises(NsprofError, match="not a @triton.autotune kernel"):
        triton_hook.autotune_space(object(), lambda: ((), {}), (1,))
