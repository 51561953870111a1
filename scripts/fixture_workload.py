"""The small program that scripts/capture_fixtures.py runs under ncu and nsys.

Launches, inside NVTX ranges:
- two configs of the seed TileLang GEMM (M=1, N=1024, K=1024, fp16: examples/seed_gemm.py), and
- a torch op that launches two kernels (matmul then relu),
each as plain launches ("direct") and as replays of a captured CUDA graph ("graph").
Ranges live in the "nsprof" domain (registered strings) nested in an outer range
"nsprof"; one extra default-domain push/pop range and one start/end range exercise the
other NVTX kinds. Warm-up and graph capture happen outside every range.
"""

from __future__ import annotations

import argparse

import nvtx
import torch

DOMAIN = "nsprof"


def tilelang_gemm(block_n: int, block_k: int):
    import tilelang
    import tilelang.language as T

    @tilelang.jit()
    def matmul(M, N, K, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
        @T.prim_func
        def gemm(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor((K, N), dtype),
            C: T.Tensor((M, N), dtype),
        ):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
                A_shared = T.alloc_shared((block_M, block_K), dtype)
                B_shared = T.alloc_shared((block_K, block_N), dtype)
                C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=4):
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C[by * block_M, bx * block_N])

        return gemm

    return matmul(1, 1024, 1024, 16, block_n, block_k)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    a = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    c = torch.empty(1, 1024, device="cuda", dtype=torch.float16)
    x = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    w = torch.randn(512, 512, device="cuda", dtype=torch.float16)

    calls = {}
    for name, (bn, bk) in {"gemm_n32_k128": (32, 128), "gemm_n64_k64": (64, 64)}.items():
        kernel = tilelang_gemm(bn, bk)
        calls[name] = lambda kernel=kernel: kernel(a, b, c)
    calls["mm_relu"] = lambda: torch.relu(x @ w)

    # Warm up and capture outside every range, so ncu replays nothing here.
    graphs = {}
    for name, fn in calls.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        graphs[name] = graph
    torch.cuda.synchronize()
    ref = (a.float() @ b.float()).half()
    calls["gemm_n32_k128"]()
    torch.cuda.synchronize()
    err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
    assert err < 1e-2, f"gemm result wrong: relative error {err}"

    nvtx.push_range("nsprof", domain=DOMAIN)
    for index, name in enumerate(calls):
        for mode in ("direct", "graph"):
            for rep in range(args.reps):
                nvtx.push_range(f"cfg{index}.{mode}.r{rep}", domain=DOMAIN)
                if mode == "direct":
                    calls[name]()
                else:
                    graphs[name].replay()
                torch.cuda.synchronize()
                nvtx.pop_range(domain=DOMAIN)
    # A default-domain push/pop range (torch's, unregistered string) inside the outer one.
    torch.cuda.nvtx.range_push("torch_push")
    calls["gemm_n32_k128"]()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    nvtx.pop_range(domain=DOMAIN)

    # A start/end range in the default domain, outside the nsprof ranges.
    handle = torch.cuda.nvtx.range_start("startend")
    calls["mm_relu"]()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_end(handle)
    print("workload done; configs:", ", ".join(f"cfg{i}={n}" for i, n in enumerate(calls)))


if __name__ == "__main__":
    main()
