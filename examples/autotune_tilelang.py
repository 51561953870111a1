"""A user's `@tilelang.autotune` kernel (the seed GEMM), tuned by nsprof instead of TileLang's timer.

    nsprof tune examples/autotune_tilelang.py:space --backend ncu --mode graph

After that, `matmul(1, 1024, 1024)` in any process returns nsprof's best config from
TileLang's autotuner cache without benchmarking (nsprof.integrations.tilelang.feed_back).
"""

from __future__ import annotations

import itertools

import tilelang
import tilelang.language as T

from nsprof.integrations.tilelang import autotune_space

CONFIGS = [
    {"block_N": bn, "block_K": bk, "num_stages": st}
    for bn, bk, st in itertools.product((32, 64, 128), (64, 128, 256), (2, 4))
]


@tilelang.autotune(configs=CONFIGS)
@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_N=32, block_K=128, num_stages=4, dtype=T.float16, accum_dtype=T.float32):
    block_M = 16

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def space():
    return autotune_space(matmul, 1, 1024, 1024)
