"""What the regret suite's Triton spaces (examples/*_triton.py with shapes) share: a config's static
check, and a build's check of its kernel's result against a torch reference, so that a config that
computes a wrong result is recorded by nsprof as failed instead of being timed."""

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
