"""The seed GEMM (examples/seed_gemm.py's kernel) as an nsprof config space (TileLang).

M=1, N=1024, K=1024, fp16 in, fp32 accumulate: a µs kernel where fast timers disagree.
32 configs: block_N × block_K × num_stages. Some may fail to compile or run; nsprof
records those as failed configs and measures the rest.

    nsprof profile examples/gemm_tilelang.py:space --backend ncu --mode both
"""

from __future__ import annotations

import itertools

from nsprof.space import Space

M, N, K = 1, 1024, 1024
BLOCK_M = 16
THREADS = 128


def make_kernel(block_N: int, block_K: int, num_stages: int, *, shape=(M, N, K), block_M: int = BLOCK_M):
    """The TileLang GEMM kernel (fp16 in, fp32 accumulate) for one config; also used by
    examples/gemm4096_tilelang.py with another shape."""
    import tilelang
    import tilelang.language as T

    @tilelang.jit()
    def matmul(M, N, K, block_M, block_N, block_K, num_stages, dtype=T.float16, accum_dtype=T.float32):
        @T.prim_func
        def gemm(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor((K, N), dtype),
            C: T.Tensor((M, N), dtype),
        ):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=THREADS) as (bx, by):
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

    return matmul(*shape, block_M, block_N, block_K, num_stages)


def compile_config(config: dict):
    return make_kernel(config["block_N"], config["block_K"], config["num_stages"])


def build(config: dict, *, shape=(M, N, K), kernel=None):
    """Compile (from TileLang's cache), make random inputs, check the result, return the launch."""
    import torch

    M, N, K = shape
    if kernel is None:
        kernel = compile_config(config)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    error = ((c.float() - ref).norm() / ref.norm()).item()
    if not error < 1e-2:  # NaN fails too
        raise ValueError(f"wrong result: relative error {error:.3g}")
    return lambda: kernel(a, b, c)


CONFIGS = [
    {"block_N": bn, "block_K": bk, "num_stages": st}
    for bn, bk, st in itertools.product((16, 32, 64, 128), (32, 64, 128, 256), (2, 4))
]

space = Space(name="seed_gemm_tilelang", configs=CONFIGS, build=build, compile=compile_config)
