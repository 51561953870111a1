"""A GPU config space whose every launch also waits on the CPU, so that a run lasts long enough
to signal nsprof in the middle of it under nsys too (where the kernels alone take microseconds)."""

import time

import nsprof.space


def build(config):
    import torch

    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)

    def launch():
        torch.add(x, y, out=out)
        time.sleep(config["sleep_s"])

    return launch


space = nsprof.space.Space(name="slow_gpu", configs=[{"sleep_s": 0.2}] * 12, build=build)
