"""LayerNorm forward in Triton as an nsprof config space, at the token counts an LLM server sees.

y = (x - mean(x)) / sqrt(var(x) + eps) * w + b, row by row: x, w, b and y are fp16, the mean and
variance are accumulated in fp32. The kernel is the forward of Triton's layer-norm tutorial
(python/tutorials/05-layer-norm.py, `_layer_norm_fwd_fused`) without its mean/rstd outputs (an
inference forward needs none): one program per row, three BLOCK-wide passes over it.

Shapes: rows (tokens) 16, 512 and 8192 at hidden 8192.
Config axes: BLOCK 512/1024/2048/4096 x num_warps 4/8 x num_stages 1/2 (16 configs); each is
valid at every shape.

    nsprof tune examples/layernorm_triton.py:space --backend nsys --mode graph
"""

from __future__ import annotations

import functools
import itertools

from suite_checks import checked, powers_of_two

from nsprof.space import Space

HIDDEN = 8192
EPS = 1e-5
SHAPES = [{"rows": rows, "hidden": HIDDEN} for rows in (16, 512, 8192)]


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def layernorm_kernel(y_ptr, x_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x_row = x_ptr + row * stride
        y_row = y_ptr + row * stride
        total = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, n_cols, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            total += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        mean = tl.sum(total, axis=0) / n_cols
        # the variance from centred values (not E[x^2] - mean^2, which cancels badly in fp32)
        squares = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, n_cols, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            x = tl.where(cols < n_cols, x - mean, 0.0)
            squares += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / n_cols + eps)
        for off in range(0, n_cols, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(tl.float16), mask=mask)

    return layernorm_kernel


def check_config(config: dict, shape: dict) -> None:
    """Raise ValueError for a config that cannot run at this shape (tl.arange needs a power of 2)."""
    powers_of_two(config, "BLOCK")


def build(config: dict, shape: dict):
    import torch

    check_config(config, shape)
    kernel = _kernel()
    rows, hidden = shape["rows"], shape["hidden"]
    torch.manual_seed(0)
    # off-centre rows, as the tutorial's test makes them, so that the mean matters
    x = (-2.3 + 0.5 * torch.randn(rows, hidden, device="cuda")).to(torch.float16)
    w = torch.rand(hidden, device="cuda", dtype=torch.float16)
    b = torch.rand(hidden, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    grid = (rows,)

    def launch():
        kernel[grid](
            y,
            x,
            w,
            b,
            x.stride(0),
            hidden,
            EPS,
            BLOCK=config["BLOCK"],
            num_warps=config["num_warps"],
            num_stages=config["num_stages"],
        )

    want = torch.nn.functional.layer_norm(x.float(), (hidden,), w.float(), b.float(), EPS)
    return checked(launch, y, want, 2e-2)


CONFIGS = [
    {"BLOCK": block, "num_warps": warps, "num_stages": stages}
    for block, warps, stages in itertools.product((512, 1024, 2048, 4096), (4, 8), (1, 2))
]

space = Space(name="layernorm_triton", configs=CONFIGS, build=build, shapes=SHAPES)
