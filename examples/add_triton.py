"""A fused elementwise add + GELU in Triton as an nsprof config space: out = gelu(x + y).

x, y and out are fp16 tensors of (tokens x 14336), an MLP's intermediate width, read as one flat
vector; the sum and the GELU (tanh approximation, as torch's gelu(approximate="tanh")) are
computed in fp32. One program handles BLOCK consecutive elements, as in Triton's vector-add
tutorial (python/tutorials/01-vector-add.py); the last block is masked (14336 is not a multiple
of 4096).

Shapes: tokens 1, 128 and 4096 at width 14336 (14 K, 1.8 M and 59 M elements).
Config axes: BLOCK 512/1024/2048/4096 x num_warps 2/4/8/16 (16 configs; no loop, so no
num_stages); each is valid at every shape.

    nsprof tune examples/add_triton.py:space --backend nsys --mode graph
"""

from __future__ import annotations

import functools
import itertools

from suite_checks import elementwise, powers_of_two

from nsprof.space import Space

WIDTH = 14336
SHAPES = [{"tokens": tokens, "width": WIDTH} for tokens in (1, 128, 4096)]


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def add_gelu_kernel(out_ptr, x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        z = x + y
        # 0.5 * z * (1 + tanh(u)) == z * sigmoid(2u), written with exp alone: it needs no
        # libdevice tanh, whose module path has moved between Triton releases
        u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        out = z / (1.0 + tl.exp(-2.0 * u))
        tl.store(out_ptr + offsets, out.to(tl.float16), mask=mask)

    return add_gelu_kernel


def check_config(config: dict, shape: dict) -> None:
    """Raise ValueError for a config that cannot run at this shape (tl.arange needs a power of 2)."""
    powers_of_two(config, "BLOCK")


def build(config: dict, shape: dict):
    import torch

    check_config(config, shape)
    return elementwise(
        _kernel(), config, shape, lambda x, y: torch.nn.functional.gelu(x + y, approximate="tanh"), 2e-2
    )


CONFIGS = [
    {"BLOCK": block, "num_warps": warps}
    for block, warps in itertools.product((512, 1024, 2048, 4096), (2, 4, 8, 16))
]

space = Space(name="add_gelu_triton", configs=CONFIGS, build=build, shapes=SHAPES)
