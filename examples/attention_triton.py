"""A FlashAttention-style forward in Triton as an nsprof config space, decode to prefill.

out = softmax(q @ k^T / sqrt(head_dim)) @ v per head, non-causal: q is fp16 (heads x seq_q x
head_dim), k and v fp16 (heads x seq_k x head_dim), out fp16, with 32 heads, each contiguous.
One program computes BLOCK_M query rows of one head, walking the keys BLOCK_N at a time with
the online softmax (running max and sum in fp32, base-2 exponentials). The kernel is the forward
of Triton's fused-attention tutorial (python/tutorials/06-fused-attention.py, `_attn_fwd` with
STAGE = 1, non-causal) written with plain pointers instead of block pointers or TMA descriptors,
and with the query rows masked, so that seq_q = 1 (decode) works.

Shapes (seq_q, seq_k, head_dim): (1, 4096, 128) decode, (128, 4096, 128) a chunked prefill,
(1024, 1024, 128) a prefill.
Config axes: BLOCK_M 16/64/128 x BLOCK_N 32/64 x num_warps 4/8 x num_stages 2/3 (24 configs);
each is valid at every shape (BLOCK_N divides every seq_k; the build refuses one that does not).

    nsprof tune examples/attention_triton.py:space --backend nsys --mode graph
"""

from __future__ import annotations

import functools
import itertools
import math

from suite_checks import checked, powers_of_two

from nsprof.space import Space

HEADS = 32
SHAPES = [
    {"seq_q": 1, "seq_k": 4096, "head_dim": 128},
    {"seq_q": 128, "seq_k": 4096, "head_dim": 128},
    {"seq_q": 1024, "seq_k": 1024, "head_dim": 128},
]


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def attention_kernel(
        out_ptr,
        q_ptr,
        k_ptr,
        v_ptr,
        seq_q,
        seq_k,
        qk_scale,
        HEAD_DIM: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        start_m = tl.program_id(0)
        head = tl.program_id(1)
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        row_ok = offs_m[:, None] < seq_q
        q_offsets = head * seq_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        q = tl.load(q_ptr + q_offsets, mask=row_ok, other=0.0)
        kv_base = head * seq_k * HEAD_DIM
        # k is read transposed ([HEAD_DIM, BLOCK_N]) so that q @ k is a plain tl.dot
        k_ptrs = k_ptr + kv_base + offs_n[None, :] * HEAD_DIM + offs_d[:, None]
        v_ptrs = v_ptr + kv_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        # the build checks that BLOCK_N divides seq_k: no key is masked
        for start_n in range(0, seq_k, BLOCK_N):
            k = tl.load(k_ptrs + start_n * HEAD_DIM)
            qk = tl.dot(q, k) * qk_scale
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptrs + start_n * HEAD_DIM)
            acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
            m_i = m_ij
        acc = acc / l_i[:, None]
        tl.store(out_ptr + q_offsets, acc.to(tl.float16), mask=row_ok)

    return attention_kernel


def check_config(config: dict, shape: dict) -> None:
    """Raise ValueError for a config that cannot run at this shape: tl.arange needs powers of 2,
    tl.dot operands at least 16 wide, and the kernel reads whole BLOCK_N-key tiles."""
    powers_of_two(config, "BLOCK_M", "BLOCK_N", least=16)
    if shape["seq_k"] % config["BLOCK_N"]:
        raise ValueError(f"BLOCK_N={config['BLOCK_N']} does not divide seq_k={shape['seq_k']}")
    powers_of_two(shape, "head_dim", least=16)


def build(config: dict, shape: dict):
    import torch
    import triton

    check_config(config, shape)
    kernel = _kernel()
    seq_q, seq_k, head_dim = shape["seq_q"], shape["seq_k"], shape["head_dim"]
    torch.manual_seed(0)
    q = torch.randn(HEADS, seq_q, head_dim, device="cuda", dtype=torch.float16)
    k = torch.randn(HEADS, seq_k, head_dim, device="cuda", dtype=torch.float16)
    v = torch.randn(HEADS, seq_k, head_dim, device="cuda", dtype=torch.float16)
    out = torch.empty_like(q)
    sm_scale = 1.0 / math.sqrt(head_dim)
    qk_scale = sm_scale * 1.4426950408889634  # log2(e): the kernel exponentiates in base 2
    grid = (triton.cdiv(seq_q, config["BLOCK_M"]), HEADS)

    def launch():
        kernel[grid](
            out,
            q,
            k,
            v,
            seq_q,
            seq_k,
            qk_scale,
            HEAD_DIM=head_dim,
            BLOCK_M=config["BLOCK_M"],
            BLOCK_N=config["BLOCK_N"],
            num_warps=config["num_warps"],
            num_stages=config["num_stages"],
        )

    scores = torch.softmax((q.float() @ k.float().transpose(1, 2)) * sm_scale, dim=-1)
    return checked(launch, out, scores @ v.float(), 1e-2)


CONFIGS = [
    {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
    for block_m, block_n, warps, stages in itertools.product((16, 64, 128), (32, 64), (4, 8), (2, 3))
]

space = Space(name="attention_triton", configs=CONFIGS, build=build, shapes=SHAPES)
