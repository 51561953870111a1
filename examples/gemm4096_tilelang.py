"""A compute-bound 4096 x 4096 x 4096 fp16 TileLang GEMM as an nsprof config space.

The control of `nsprof validate`'s goals: ~0.5 ms per call, where every timer and both
tools rank configs the same way (Kendall τ = 1.0 was measured on such a space
on the H200).
The kernel is examples/gemm_tilelang.py's, at another shape and tile sizes.

    nsprof validate examples/gemm4096_tilelang.py:space
"""

from __future__ import annotations

import itertools

from gemm_tilelang import build as build_gemm
from gemm_tilelang import make_kernel

from nsprof.space import Space

SHAPE = (4096, 4096, 4096)


def compile_config(config: dict):
    return make_kernel(
        config["block_N"], config["block_K"], config["num_stages"], shape=SHAPE, block_M=config["block_M"]
    )


def build(config: dict):
    return build_gemm(config, shape=SHAPE, kernel=compile_config(config))


CONFIGS = [
    {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st}
    for bm, bn, bk, st in itertools.product((64, 128), (64, 128), (32, 64), (2, 3))
]

space = Space(name="gemm4096_tilelang", configs=CONFIGS, build=build, compile=compile_config)
