"""What the regret suite's Triton spaces (examples/*_triton.py with shapes) share: a config's static
check, a build's check of its kernel's result against a torch reference, so that a config that
computes a wrong result is recorded by nsprof as failed instead of being timed, and the checked
launch of a two-input elementwise kernel (add_triton, swiglu_triton)."""

from __future__ import annotations


def powers_of_two(config: dict, *keys: str, least: int = 1) -> None:
    """Raise ValueError unless each of `keys` of `config` is a power of 2 of at least `least`
    (tl.arange takes powers of 2; tl.dot wants operands at least 16 wide)."""
    for key in keys:
        value = config[key]
        if value < least or value & (value - 1):
            raise ValueError(
                f"{key}={value} is not a power of 2" + (f" of at least {least}" if least > 1 else "")
            )


def checked(launch, got, want, tolerance: float):
    """`launch` once, then `got` (the output tensor it writes) against `want` (the reference, in
    fp32): a max abs error of `tolerance` or more raises ValueError. Returns `launch`."""
    import torch

    launch()
    torch.cuda.synchronize()
    error = (got.float() - want).abs().max().item()
    if not error < tolerance:
        raise ValueError(f"wrong result: max abs error {error:.3g}")
    return launch


def elementwise(kernel, config: dict, shape: dict, reference, tolerance: float):
    """The checked launch of an elementwise `kernel(out, a, b, n_elements, BLOCK)` over two fp16
    inputs of shape (tokens x width), read as flat vectors, BLOCK elements per program (the last
    block masked): `reference(a, b)` in fp32 is what out must hold."""
    import torch
    import triton

    torch.manual_seed(0)
    a = torch.randn(shape["tokens"], shape["width"], device="cuda", dtype=torch.float16)
    b = torch.randn_like(a)
    out = torch.empty_like(a)
    n_elements = a.numel()
    grid = (triton.cdiv(n_elements, config["BLOCK"]),)

    def launch():
        kernel[grid](out, a, b, n_elements, BLOCK=config["BLOCK"], num_warps=config["num_warps"])

    return checked(launch, out, reference(a.float(), b.float()), tolerance)
