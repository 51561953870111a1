"""A user's `@tilelang.autotune` elementwise add (4096 x 4096, fp16): a memory-bound kernel whose
configs are near-equivalent, tuned by nsprof instead of TileLang's timer.

    nsprof tune examples/autotune_add_tilelang.py:space --backend nsys --mode graph

After that, `add(4096, 4096)` in any process returns nsprof's best config from TileLang's
autotuner cache without benchmarking (nsprof.integrations.tilelang.feed_back).
"""

# No `from __future__ import annotations`: TileLang evaluates the kernel's annotations, and `dtype`
# appears only there, so it must be a value, not a name to look up later.
import itertools

import tilelang
import tilelang.language as T

from nsprof.integrations.tilelang import autotune_space

CONFIGS = [
    {"block_M": bm, "block_N": bn, "threads": th}
    for bm, bn, th in itertools.product((32, 64, 128), (128, 256), (64, 128, 256))
]


@tilelang.autotune(configs=CONFIGS)
@tilelang.jit(out_idx=[-1])
def add(M, N, block_M=64, block_N=128, threads=128, dtype=T.float16):
    @T.prim_func
    def elementwise_add(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = (
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
                )

    return elementwise_add


def space():
    return autotune_space(add, 4096, 4096)
