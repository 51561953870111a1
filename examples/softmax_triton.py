"""A memory-bound Triton softmax as an nsprof config space (8192 x 2048 fp16 rows).

`space` measures the kernel at each config directly; `tuned_space` is the same space as a
user's `@triton.autotune` kernel, for `nsprof tune`, which also feeds its winner back to
Triton's autotuner (see examples/matmul_triton.py):

    nsprof tune examples/softmax_triton.py:tuned_space --backend nsys --mode graph

The second kernel of `nsprof validate`'s goals: 17-36 µs per call on an H200, many
configs within 1% of each other (measured on the H200: BENCHMARKS.md), so even the ground truths' own repeatability
is lower than for the seed GEMM.

    nsprof validate examples/softmax_triton.py:space
"""

from __future__ import annotations

import functools
import itertools

from nsprof.space import Space

ROWS, COLS = 8192, 2048


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr):
        start = tl.program_id(0) * ROWS_PER_PROGRAM
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        for r in range(ROWS_PER_PROGRAM):
            row = start + r
            valid = mask & (row < n_rows)
            x = tl.load(in_ptr + row * n_cols + cols, mask=valid, other=-float("inf")).to(tl.float32)
            x = x - tl.max(x, axis=0)
            e = tl.exp(x)
            y = e / tl.sum(e, axis=0)
            tl.store(out_ptr + row * n_cols + cols, y.to(tl.float16), mask=valid)

    return softmax_kernel


def make_launch(config: dict, rows: int, cols: int):
    """(launch, x, y): a rows x cols fp16 input x, its output y, and the call that writes y = softmax(x)
    row by row under `config` (cols a power of 2: one row is one tl.arange block)."""
    import torch
    import triton

    kernel = _kernel()
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    rows_per_program = config["rows_per_program"]
    grid = (triton.cdiv(rows, rows_per_program),)

    def launch():
        kernel[grid](
            y,
            x,
            rows,
            cols,
            ROWS_PER_PROGRAM=rows_per_program,
            BLOCK=cols,
            num_warps=config["num_warps"],
            num_stages=config["num_stages"],
        )

    return launch, x, y


def build(config: dict):
    import torch

    launch, x, y = make_launch(config, ROWS, COLS)
    launch()
    torch.cuda.synchronize()
    error = ((y.float() - torch.softmax(x.float(), dim=1)).abs().max()).item()
    if not error < 1e-2:
        raise ValueError(f"wrong result: max abs error {error:.3g}")
    return launch


CONFIGS = [
    {"rows_per_program": r, "num_warps": w, "num_stages": s}
    for r, w, s in itertools.product((1, 2, 4, 8, 16), (4, 8, 16), (1, 2))
]

space = Space(name="softmax_triton", configs=CONFIGS, build=build)


@functools.cache
def autotuned():
    """The kernel as a user's `@triton.autotune` kernel over the same configs."""
    import triton

    configs = [
        triton.Config(
            {"ROWS_PER_PROGRAM": c["rows_per_program"]}, num_warps=c["num_warps"], num_stages=c["num_stages"]
        )
        for c in CONFIGS
    ]
    return triton.autotune(configs=configs, key=["n_rows", "n_cols"], cache_results=True)(_kernel())


def _grid(meta):
    return ((meta["n_rows"] + meta["ROWS_PER_PROGRAM"] - 1) // meta["ROWS_PER_PROGRAM"],)


def softmax(x):
    """The user's call: Triton's autotuner picks (or loads from its cache) the config."""
    import torch
    import triton

    x = x.contiguous()  # the kernel addresses rows as row * n_cols
    y = torch.empty_like(x)
    autotuned()[_grid](y, x, x.shape[0], x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def _inputs():
    import torch

    x = torch.randn(ROWS, COLS, device="cuda", dtype=torch.float16)
    return (torch.empty_like(x), x, ROWS, COLS), {"BLOCK": COLS}


def _check(args, kwargs):
    import torch

    y, x = args[:2]
    error = ((y.float() - torch.softmax(x.float(), dim=1)).abs().max()).item()
    if not error < 1e-2:
        raise ValueError(f"wrong result: max abs error {error:.3g}")


def tuned_space():
    from nsprof.integrations.triton import autotune_space

    return autotune_space(autotuned(), _inputs, _grid, check=_check, name="softmax_triton_autotune")
