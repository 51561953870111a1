"""The seed TileLang GEMM (examples/gemm_tilelang.py's kernel, fp16 in, fp32 accumulate) at the
shapes a server tunes: N = K = 4096, M = 1, 16, 128 and 1024, every (shape, config) in one session.

    nsprof tune examples/gemm_shapes_tilelang.py:space --backend nsys --mode graph       # a plain Space
    nsprof tune examples/gemm_shapes_tilelang.py:autotuned --backend ncu --mode graph    # @tilelang.autotune

`space` is a plain nsprof Space with shapes (build(config, shape)); `autotuned` is the same kernel
as examples/autotune_tilelang.py's `@tilelang.autotune` matmul over the same shapes
(nsprof.integrations.tilelang.autotune_shapes): each shape's winner goes into TileLang's
autotuner cache under the key TileLang computes for that call, so `matmul(M, 4096, 4096)` in
any process then returns nsprof's winner for that M without benchmarking.

`regret` is the regret suite's part of it (scripts/bench_regret.py): three shapes (M = 1, 128,
1024) and the 16 configs with block_K 128 or 256, the close contenders; the whole space's 128
points take one `nsprof validate` (two runs of each truth, every timer) longer than a lent GPU's
10-minute call.
"""

from __future__ import annotations

from gemm_tilelang import CONFIGS, build, make_kernel

from nsprof.space import Space

N = K = 4096
SHAPES = [(m, N, K) for m in (1, 16, 128, 1024)]


def compile_config(config: dict, shape):
    return make_kernel(config["block_N"], config["block_K"], config["num_stages"], shape=tuple(shape))


def build_at(config: dict, shape):
    return build(config, shape=tuple(shape), kernel=compile_config(config, shape))


space = Space(
    name="gemm_shapes_tilelang", configs=CONFIGS, shapes=SHAPES, build=build_at, compile=compile_config
)


regret = Space(
    name="gemm_shapes_tilelang_regret",
    configs=[c for c in CONFIGS if c["block_K"] >= 128],
    shapes=[s for s in SHAPES if s[0] != 16],
    build=build_at,
    compile=compile_config,
)


def autotuned():
    from autotune_tilelang import matmul

    from nsprof.integrations.tilelang import autotune_shapes

    return autotune_shapes(matmul, SHAPES)
