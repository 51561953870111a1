"""A compute-bound 4096 x 4096 x 4096 fp16 TileLang GEMM as an nsprof config space.

The control of `nsprof validate`'s goals: ~0.5 ms per call, where every timer and both
tools rank configs the same way (DESIGN.md measured Kendall τ = 1.0 on such a space).

    nsprof validate examples/gemm4096_tilelang.py:space
"""

from __future__ import annotations

import itertools

from nsprof.space import Space

M = N = K = 4096


def compile_config(config: dict):
    import tilelang
    import tilelang.language as T

    block_M, block_N, block_K, num_stages = (config[k] for k in ("block_M", "block_N", "block_K", "num_stages"))

    @tilelang.jit()
    def matmul(M, N, K, block_M, block_N, block_K, num_stages, dtype=T.float16, accum_dtype=T.float32):
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

    return matmul(M, N, K, block_M, block_N, block_K, num_stages)


def build(config: dict):
    import torch

    kernel = compile_config(config)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    error = ((c.float() - ref).norm() / ref.norm()).item()
    if not error < 1e-2:
        raise ValueError(f"wrong result: relative error {error:.3g}")
    return lambda: kernel(a, b, c)


CONFIGS = [
    {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st}
    for bm, bn, bk, st in itertools.product((64, 128), (64, 128), (32, 64), (2, 3))
]

space = Space(name="gemm4096_tilelang", configs=CONFIGS, build=build, compile=compile_config)
