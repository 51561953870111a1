"""The seed request's kernel: M=1, N=1024, K=1024 fp16 GEMM in TileLang.

The request measured it six ways (event 8.77 µs, cupti 4.64, do_bench 8.40,
do_bench_cudagraph 3.65, ncu 5.38, ncu in a graph 5.18) and asked which to trust.

    nsprof validate examples/seed_gemm.py:space

`space` is the 32-config block_N × block_K × num_stages space of examples/gemm_tilelang.py;
`seed` is the single config of the request (block_N=32, block_K=128, 4 stages).
"""

from __future__ import annotations

from gemm_tilelang import CONFIGS, build, compile_config

from nsprof.space import Space

space = Space(name="seed_gemm", configs=CONFIGS, build=build, compile=compile_config)
seed = Space(
    name="seed_gemm_one",
    configs=[{"block_N": 32, "block_K": 128, "num_stages": 4}],
    build=build,
    compile=compile_config,
)
