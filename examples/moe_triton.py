"""A MoE-class tuning job: examples/matmul_triton.py's fp16 matmul over 256 `@triton.autotune`
configs at the four token counts one expert sees (M = 16, 64, 256, 1024; N = K = 4096), as
SGLang's and vLLM's fused-MoE tuners sweep block sizes, warps and stages. Some configs need more
shared memory than the GPU has and fail to compile: they are recorded as failed, as Triton's own
autotuner gives them an infinite time.

    nsprof tune examples/moe_triton.py:space --backend nsys --mode graph

scripts/bench_moe.py times it from a cold compile cache against Triton's own autotune.
"""

from __future__ import annotations

import itertools

import triton
from matmul_triton import check, grid, make_inputs, matmul_kernel

N = K = 4096
SHAPES = [{"M": m} for m in (16, 64, 256, 1024)]

CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in itertools.product(
        (16, 32, 64, 128), (32, 64, 128, 256), (64, 128), (4, 8), (2, 3, 4, 5)
    )
]

moe_kernel = triton.autotune(configs=CONFIGS, key=["M", "N", "K"], cache_results=True)(matmul_kernel.fn)


def make_shape_inputs(shape: dict):
    """One call of the kernel at this shape (fresh random fp16 tensors on the GPU)."""
    return make_inputs(shape["M"], N, K)


def tune_each_shape() -> list[dict]:
    """Triton's own autotune at every shape (its do_bench timer): the config it keeps for each."""
    from nsprof.integrations.triton import config_dict

    picks = []
    for shape in SHAPES:
        args, kwargs = make_shape_inputs(shape)
        moe_kernel[grid](*args, **kwargs)
        picks.append({"M": shape["M"], **config_dict(moe_kernel.best_config)})
    return picks


def space():
    from nsprof.integrations.triton import autotune_space

    return autotune_space(moe_kernel, make_shape_inputs, grid, check=check, shapes=SHAPES, name="moe_triton")
