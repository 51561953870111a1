"""A fused SwiGLU activation in Triton as an nsprof config space: out = silu(gate) * up.

gate, up and out are fp16 tensors of (tokens x 14336), an MLP's intermediate width, read as one
flat vector; silu and the product are computed in fp32 (silu(g) = g * sigmoid(g), written with
exp alone). One program handles BLOCK consecutive elements, the last block masked.

Shapes: tokens 1, 256 and 8192 at width 14336 (14 K, 3.7 M and 117 M elements).
Config axes: BLOCK 256/512/1024/2048/4096 x num_warps 1/2/4/8 (20 configs; no loop, so no
num_stages); each is valid at every shape.

    nsprof tune examples/swiglu_triton.py:space --backend nsys --mode graph
"""

from __future__ import annotations

import functools
import itertools

from suite_checks import elementwise, powers_of_two

from nsprof.space import Space

WIDTH = 14336
SHAPES = [{"tokens": tokens, "width": WIDTH} for tokens in (1, 256, 8192)]


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def swiglu_kernel(out_ptr, gate_ptr, up_ptr, n_elements, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n_elements
        gate = tl.load(gate_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(up_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        out = gate / (1.0 + tl.exp(-gate)) * up
        tl.store(out_ptr + offsets, out.to(tl.float16), mask=mask)

    return swiglu_kernel


def check_config(config: dict, shape: dict) -> None:
    """Raise ValueError for a config that cannot run at this shape (tl.arange needs a power of 2)."""
    powers_of_two(config, "BLOCK")


def build(config: dict, shape: dict):
    import torch

    check_config(config, shape)
    return elementwise(_kernel(), config, shape, lambda gate, up: torch.nn.functional.silu(gate) * up, 2e-2)


CONFIGS = [
    {"BLOCK": block, "num_warps": warps}
    for block, warps in itertools.product((256, 512, 1024, 2048, 4096), (1, 2, 4, 8))
]

space = Space(name="swiglu_triton", configs=CONFIGS, build=build, shapes=SHAPES)
