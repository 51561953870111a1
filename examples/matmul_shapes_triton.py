"""The shapes an LLM server really tunes: a `@triton.autotune` fp16 matmul at N = K = 4096 for
M = 1, 16, 128 and 1024 (decode to prefill), every (shape, config) in one nsprof session.

    nsprof tune examples/matmul_shapes_triton.py:space --backend nsys --mode graph
    nsprof tune examples/matmul_shapes_triton.py:space --truth ncu,nsys --deploy nsys --mode graph

The kernel is examples/matmul_triton.py's (`key=["M", "N", "K"]`, `cache_results=True`): nsprof
ranks each shape on its own and writes each shape's winner into Triton's autotuning cache under
the key Triton computes for a call at that shape, so that afterwards `matmul(a, b)` at any of
these shapes, in any process, runs nsprof's winner for it without benchmarking.
"""

from __future__ import annotations

from matmul_triton import check, grid, make_inputs, matmul, matmul_kernel  # noqa: F401 (matmul: the user's call)

N = K = 4096
SHAPES = [{"M": m} for m in (1, 16, 128, 1024)]


def make_shape_inputs(shape: dict):
    """One call of the kernel at this shape (fresh random fp16 tensors on the GPU)."""
    return make_inputs(shape["M"], N, K)


def space():
    from nsprof.integrations.triton import autotune_space

    return autotune_space(
        matmul_kernel, make_shape_inputs, grid, check=check, shapes=SHAPES, name="matmul_shapes_triton"
    )


def one_shape():
    """The same space at M = 1024 alone: one shape's cost, beside the four shapes' (scripts/bench_shapes.py)."""
    from nsprof.integrations.triton import autotune_space

    return autotune_space(
        matmul_kernel,
        make_shape_inputs,
        grid,
        check=check,
        shapes=SHAPES[-1:],
        name="matmul_shapes_triton_m1024",
    )
