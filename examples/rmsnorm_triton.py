"""RMSNorm forward in Triton as an nsprof config space, at the token counts an LLM server sees.

y = x / sqrt(mean(x**2) + eps) * w, row by row: x is fp16 (rows x hidden), w an fp16 weight
vector of `hidden`, y fp16; the sum of squares is accumulated in fp32. One program normalises one
row, walking it in BLOCK-wide chunks twice (sum of squares, then scale and store), as
Triton's layer-norm tutorial (python/tutorials/05-layer-norm.py) walks its rows.

Shapes: rows (tokens) 1, 128 and 4096 at hidden 4096 (decode, small batch, prefill).
Config axes: BLOCK 1024/2048/4096 x num_warps 4/8/16 x num_stages 1/2 (18 configs); each is
valid at every shape (a BLOCK wider than the row is masked).

    nsprof tune examples/rmsnorm_triton.py:space --backend nsys --mode graph
"""

from __future__ import annotations

import functools
import itertools

from suite_checks import checked, powers_of_two

from nsprof.space import Space

HIDDEN = 4096
EPS = 1e-6
SHAPES = [{"rows": rows, "hidden": HIDDEN} for rows in (1, 128, 4096)]


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def rmsnorm_kernel(y_ptr, x_ptr, w_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x_row = x_ptr + row * stride
        y_row = y_ptr + row * stride
        squares = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, n_cols, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            squares += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / n_cols + eps)
        for off in range(0, n_cols, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(tl.float16), mask=mask)

    return rmsnorm_kernel


def check_config(config: dict, shape: dict) -> None:
    """Raise ValueError for a config that cannot run at this shape (tl.arange needs a power of 2)."""
    powers_of_two(config, "BLOCK")


def build(config: dict, shape: dict):
    import torch

    check_config(config, shape)
    kernel = _kernel()
    rows, hidden = shape["rows"], shape["hidden"]
    torch.manual_seed(0)
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.float16)
    # a trained norm's weights sit near 1; random, so that a wrong column shows in the check
    w = (1.0 + 0.1 * torch.randn(hidden, device="cuda")).to(torch.float16)
    y = torch.empty_like(x)
    grid = (rows,)

    def launch():
        kernel[grid](
            y,
            x,
            w,
            x.stride(0),
            hidden,
            EPS,
            BLOCK=config["BLOCK"],
            num_warps=config["num_warps"],
            num_stages=config["num_stages"],
        )

    xf = x.float()
    want = xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + EPS) * w.float()
    return checked(launch, y, want, 2e-2)


CONFIGS = [
    {"BLOCK": block, "num_warps": warps, "num_stages": stages}
    for block, warps, stages in itertools.product((1024, 2048, 4096), (4, 8, 16), (1, 2))
]

space = Space(name="rmsnorm_triton", configs=CONFIGS, build=build, shapes=SHAPES)
