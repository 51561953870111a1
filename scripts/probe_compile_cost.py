"""Where the seed space's compile step spends its time with TileLang's kernel cache warm (GPU machine):

    source .device/setup.sh && python3 scripts/probe_compile_cost.py

Prints the cost of importing tilelang and the example, then of compiling every config of
examples/seed_gemm.py:space two ways: in 8 threads (what the compile step, nsprof.worker.compile, does),
then sequentially (everything in TileLang's caches by then), then the whole build, and of torch's CUDA init.
Run it twice in one shell: the first run fills the disk cache."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def timed(label, fn):
    began = time.monotonic()
    out = fn()
    print(f"{label:42s} {time.monotonic() - began:8.3f} s", flush=True)
    return out


def _compile(gemm, config):
    try:
        return gemm.compile_config(config)
    except Exception as exc:  # some configs of the space do not compile (nsprof records them as failed)
        return exc


def _build(gemm, config):
    try:
        return gemm.build(config)
    except Exception as exc:
        return exc


def main() -> None:
    timed("import torch", lambda: __import__("torch"))
    import torch

    timed(
        "torch CUDA init (first synchronize)",
        lambda: (torch.zeros(1, device="cuda"), torch.cuda.synchronize()),
    )
    timed("import tilelang", lambda: __import__("tilelang"))
    gemm = timed("import examples/gemm_tilelang", lambda: __import__("gemm_tilelang"))
    configs = gemm.CONFIGS
    with ThreadPoolExecutor(8) as pool:
        out = timed(
            f"compile {len(configs)} configs, 8 threads",
            lambda: list(pool.map(lambda c: _compile(gemm, c), configs)),
        )
    print("failed to compile:", sum(isinstance(o, Exception) for o in out))
    timed(f"compile {len(configs)} configs, sequential", lambda: [_compile(gemm, c) for c in configs])
    timed(
        f"build {len(configs)} configs (compile, inputs, check)", lambda: [_build(gemm, c) for c in configs]
    )


if __name__ == "__main__":
    main()
