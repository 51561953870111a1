"""A row-wise sum in Triton as an nsprof config space: out[r] = sum(x[r, :]).

x is fp16 (rows x 4096), out fp32 (one sum per row), accumulated in fp32. One program sums
ROWS_PER_PROGRAM rows at once, walking them in BLOCK-wide column chunks: a [ROWS_PER_PROGRAM,
BLOCK] tile per step, reduced along the columns. The row-per-program tiling follows Triton's
fused-softmax tutorial (python/tutorials/02-fused-softmax.py) and the chunked walk its
layer-norm tutorial (python/tutorials/05-layer-norm.py).

Shapes: rows 16, 512 and 8192 at 4096 columns.
Config axes: ROWS_PER_PROGRAM 1/2/4/8 x BLOCK 512/1024/2048 x num_warps 4/8 (24 configs); each
is valid at every shape (rows past the end are masked).

    nsprof tune examples/reduce_triton.py:space --backend nsys --mode graph
"""

from __future__ import annotations

import functools
import itertools

from suite_checks import checked, powers_of_two

from nsprof.space import Space

COLS = 4096
SHAPES = [{"rows": rows, "cols": COLS} for rows in (16, 512, 8192)]


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def row_sum_kernel(
        out_ptr, x_ptr, n_rows, n_cols, stride, ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr
    ):
        rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
        row_ok = rows < n_rows
        total = tl.zeros([ROWS_PER_PROGRAM], dtype=tl.float32)
        for off in range(0, n_cols, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = row_ok[:, None] & (cols[None, :] < n_cols)
            x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
            total += tl.sum(x.to(tl.float32), axis=1)
        tl.store(out_ptr + rows, total, mask=row_ok)

    return row_sum_kernel


def check_config(config: dict, shape: dict) -> None:
    """Raise ValueError for a config that cannot run at this shape (tl.arange needs powers of 2)."""
    powers_of_two(config, "ROWS_PER_PROGRAM", "BLOCK")


def build(config: dict, shape: dict):
    import torch
    import triton

    check_config(config, shape)
    kernel = _kernel()
    rows, cols = shape["rows"], shape["cols"]
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    out = torch.empty(rows, device="cuda", dtype=torch.float32)
    rows_per_program = config["ROWS_PER_PROGRAM"]
    grid = (triton.cdiv(rows, rows_per_program),)

    def launch():
        kernel[grid](
            out,
            x,
            rows,
            cols,
            x.stride(0),
            ROWS_PER_PROGRAM=rows_per_program,
            BLOCK=config["BLOCK"],
            num_warps=config["num_warps"],
        )

    want = x.float().sum(dim=1)
    # sums of 4096 unit normals are ~64 in size; fp32 sums in another order differ by ~1e-5
    return checked(launch, out, want, 1e-2)


CONFIGS = [
    {"ROWS_PER_PROGRAM": rows, "BLOCK": block, "num_warps": warps}
    for rows, block, warps in itertools.product((1, 2, 4, 8), (512, 1024, 2048), (4, 8))
]

space = Space(name="row_sum_triton", configs=CONFIGS, build=build, shapes=SHAPES)
