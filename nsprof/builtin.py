"""Built-in targets: a tiny kernel for `nsprof doctor`."""

from __future__ import annotations

from nsprof.space import Space


def tiny() -> Space:
    def build(config):
        import torch

        x = torch.randn(config["n"], device="cuda")
        y = torch.randn(config["n"], device="cuda")
        out = torch.empty_like(x)
        return lambda: torch.add(x, y, out=out)

    return Space(name="tiny_add", configs=[{"n": 1 << 20}], build=build)
