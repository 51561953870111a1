"""The Triton benchmark adapter's contract (quantiles, units), with the timer replaced."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from nsprof.errors import NsprofError
from nsprof.integrations import triton as triton_hook
from nsprof.integrations import triton_compile
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
    # (Space.compile_in_worker): the inputs at a shape are made by its first compile only, alone; the
    # others run in the pool's threads, which must not touch the GPU
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


class _Tensor:
    """What _stand_in reads of a torch tensor."""

    def __init__(self, shape, stride, dtype, offset=0):
        self.shape, self.dtype, self._stride, self._offset = shape, dtype, stride, offset

    def stride(self):
        return self._stride

    def storage_offset(self):
        return self._offset

    def numel(self):
        return math.prod(self.shape)


@pytest.fixture
def fake_torch(monkeypatch):
    """torch stood in for, as _stand_in uses it: torch's own meta tensors have data_ptr() 0 plus the
    offset's bytes and hold no memory (a torch 2.13 meta tensor's as_strided gives exactly that)."""
    made = []

    class Meta:
        def __init__(self, size, dtype, device):
            self.size, self.dtype, self.device = size, dtype, device

        def as_strided(self, shape, stride, offset):
            made.append((self.size, self.dtype, self.device, shape, stride, offset))
            return ("meta", shape, stride, offset, self.dtype)

    monkeypatch.setitem(
        sys.modules,
        "torch",
        types.SimpleNamespace(Tensor=_Tensor, empty=lambda n, dtype, device: Meta(n, dtype, device)),
    )
    return made


def test_a_tensor_stands_in_for_triton_as_a_meta_tensor_of_its_dtype_shape_strides_and_offset(fake_torch):
    tensor = _Tensor((4, 3), (6, 2), "float16", offset=1)
    assert triton_compile._stand_in(tensor) == ("meta", (4, 3), (6, 2), 1, "float16")
    assert fake_torch == [(1 + 1 + 3 * 6 + 2 * 2, "float16", "meta", (4, 3), (6, 2), 1)]  # offset + extent
    inputs = ((tensor, 7, [tensor]), {"out": tensor, "eps": None})
    args, kwargs = triton_compile._stand_in(inputs)
    assert args[1] == 7 and kwargs["eps"] is None and args[2][0][0] == "meta" and kwargs["out"][0] == "meta"


def test_a_shape_whose_stand_ins_do_not_serve_the_kernel_compiles_at_first_launch(fake_torch):
    # a heuristic that reads a tensor's device fails on the stand-in: the real inputs decide, and the
    # shape's other configs are left to their first launch (no compile ahead, no failure)
    tuned = _Autotuner([_Config({"BLOCK": 64}), _Config({"BLOCK": 128})])

    def warmup(*args, grid, **kwargs):
        if isinstance(args[0], tuple):
            raise AttributeError("'meta' tensor has no device index")
        tuned.fn.warmups.append(kwargs["BLOCK"])

    tuned.fn.warmup = warmup
    space = triton_hook.autotune_space(tuned, lambda: ((_Tensor((8,), (1,), "float16"),), {}), (1,))
    space.compile_at(0)
    space.compile_at(1)
    assert tuned.fn.warmups == [64]


def test_a_config_that_fails_on_the_real_inputs_too_is_its_own_failure_and_the_shape_still_compiles_ahead():
    tuned = _Autotuner([_Config({"BLOCK": 64}), _Config({"BLOCK": 128})])
    seen = []

    def warmup(*args, grid, **kwargs):
        seen.append(kwargs["BLOCK"])
        if kwargs["BLOCK"] == 64:
            raise ValueError("no valid tile (simulated)")

    tuned.fn.warmup = warmup
    space = triton_hook.autotune_space(tuned, lambda: ((object(),), {}), (1,))
    with pytest.raises(ValueError, match="no valid tile"):
        space.compile_at(0)
    space.compile_at(1)
    assert seen == [64, 64, 128]  # config 0 on the stand-ins, then on the real inputs; config 1 ahead


def test_a_call_at_a_shape_whose_first_compile_has_not_ended_makes_no_inputs_and_compiles_nothing():
    # the shape's first compile hung past its bound: a pool thread's call at that shape must not make
    # the inputs (on the GPU) again, nor wait: its config is left to its first launch
    tuned = _Autotuner([_Config({"BLOCK": 64}), _Config({"BLOCK": 128})])
    made = []

    def make_inputs():
        made.append(1)
        space.compile_at(1)  # meanwhile, from the pool
        return (object(),), {}

    space = triton_hook.autotune_space(tuned, make_inputs, (1,))
    space.compile_at(0)
    assert made == [1] and [w[2]["BLOCK"] for w in tuned.fn.warmups] == [64]


def test_a_config_with_a_pre_hook_is_left_to_its_first_launch_but_its_shapes_inputs_are_made():
    # the hook may set what Triton specializes on (a TMA descriptor's block shape): warmed up without
    # it, the config would compile as another kernel, or not at all
    hooked = _Config({"BLOCK": 64})
    hooked.pre_hook = lambda nargs: None
    tuned = _Autotuner([hooked, _Config({"BLOCK": 128})])
    space = triton_hook.autotune_space(tuned, lambda: ((object(),), {}), (1,))
    space.compile_at(0)
    space.compile_at(1)
    assert [w[2]["BLOCK"] for w in tuned.fn.warmups] == [128]


def test_stand_ins_no_config_compiled_on_yet_leave_a_config_they_fail_to_its_first_launch(fake_torch):
    # the shape's first config has a pre_hook, so no compile has checked its stand-ins: a heuristic
    # that reads a tensor's data fails on them, which says nothing of the config itself
    hooked = _Config({"BLOCK": 32})
    hooked.pre_hook = lambda nargs: None
    tuned = _Autotuner([hooked, _Config({"BLOCK": 64}), _Config({"BLOCK": 128})])

    def warmup(*args, grid, **kwargs):
        if isinstance(args[0], tuple):  # the meta stand-in
            raise RuntimeError("Tensor.item() cannot be called on meta tensors")
        tuned.fn.warmups.append(kwargs["BLOCK"])

    tuned.fn.warmup = warmup
    space = triton_hook.autotune_space(tuned, lambda: ((_Tensor((8,), (1,), "float16"),), {}), (1,))
    for config_id in (0, 1, 2):
        space.compile_at(config_id)  # none fails: each is left to its first launch
    assert tuned.fn.warmups == []


def test_a_tma_descriptor_stands_in_with_a_meta_base(fake_torch):
    import dataclasses

    @dataclasses.dataclass
    class TensorDescriptor:  # Triton's own is a dataclass of these fields
        base: object
        shape: list
        strides: list
        block_shape: list

    desc = TensorDescriptor(_Tensor((64, 32), (32, 1), "float16"), [64, 32], [32, 1], [16, 16])
    stood = triton_compile._stand_in(desc)
    assert stood.base[0] == "meta" and (stood.shape, stood.block_shape) == ([64, 32], [16, 16])


def test_a_shape_whose_inputs_cannot_be_made_fails_each_config_without_making_them_again():
    tuned = _Autotuner([_Config({"BLOCK": 64}), _Config({"BLOCK": 128})])
    calls = []

    def make_inputs():
        calls.append(1)
        raise MemoryError("out of memory (simulated)")

    space = triton_hook.autotune_space(tuned, make_inputs, (1,))
    with pytest.raises(MemoryError):
        space.compile_at(0)
    with pytest.raises(NsprofError, match="the inputs at this shape could not be made: MemoryError"):
        space.compile_at(1)  # in a pool thread: never make_inputs (the GPU) again
    assert calls == [1] and tuned.fn.warmups == []


def test_autotune_space_refuses_what_is_not_an_autotuned_kernel():
    from nsprof.errors import NsprofError

    with pytest.raises(NsprofError, match="not a @triton.autotune kernel"):
        triton_hook.autotune_space(object(), lambda: ((), {}), (1,))
