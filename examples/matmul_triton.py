"""A user's `@triton.autotune` matmul (fp16, 1024^3), tuned by nsprof's ground truth.

    nsprof tune examples/matmul_triton.py:space --backend ncu --mode graph
    nsprof tune examples/matmul_triton.py:space512 --truth ncu,nsys --mode graph   # the 512^3 case where the truths disagree

nsprof measures every config of `matmul_kernel`, says which one Triton's own autotuner picks
with its CUDA-event timer, and writes nsprof's best into Triton's autotuning cache: after
that, `matmul(a, b)` in any process runs nsprof's winner without benchmarking
(the kernel has `cache_results=True`).
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl

M = N = K = 1024

CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
    for (bm, bn, bk), (w, s) in itertools.product(
        [(64, 64, 32), (64, 128, 32), (128, 64, 32), (128, 128, 32), (128, 128, 64), (64, 64, 64)],
        [(4, 3), (4, 4), (8, 3)],
    )
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"], cache_results=True)
@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


def grid(meta):
    return (triton.cdiv(meta["M"], meta["BLOCK_M"]) * triton.cdiv(meta["N"], meta["BLOCK_N"]),)


def make_inputs(m=M, n=N, k=K):
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    return (
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    ), {}


def check(args, kwargs):
    a, b, c = args[:3]
    ref = a.float() @ b.float()
    error = ((c.float() - ref).norm() / ref.norm()).item()
    if not error < 1e-2:  # NaN fails too
        raise ValueError(f"wrong result: relative error {error:.3g}")


def matmul(a, b):
    """The user's call: Triton's autotuner picks (or loads) the config."""
    c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=torch.float16)
    matmul_kernel[grid](
        a,
        b,
        c,
        a.shape[0],
        b.shape[1],
        a.shape[1],
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )
    return c


def space():
    from nsprof.integrations.triton import autotune_space

    return autotune_space(matmul_kernel, make_inputs, grid, check=check)


# The case where the truths disagree: the same kernel at 512^3 over the 8 CUDA configs of Triton's matmul tutorial
# (03-matrix-multiplication), where ncu and nsys picked different winners.
TUTORIAL_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in [
        (128, 256, 64, 3, 8),
        (64, 256, 32, 4, 4),
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (128, 32, 32, 4, 4),
        (64, 32, 32, 5, 2),
        (32, 64, 32, 5, 2),
    ]
]
matmul_kernel_512 = triton.autotune(configs=TUTORIAL_CONFIGS, key=["M", "N", "K"], cache_results=True)(
    matmul_kernel.fn
)


def make_inputs_512():
    return make_inputs(512, 512, 512)


def space512():
    from nsprof.integrations.triton import autotune_space

    return autotune_space(matmul_kernel_512, make_inputs_512, grid, check=check, name="matmul_triton_512")
