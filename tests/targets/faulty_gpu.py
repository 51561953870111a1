"""A GPU config space with one config per fault a real kernel can have (for the `gpu` tests).

cfg0, cfg4: a healthy elementwise add. cfg1: a Triton kernel that stores far out of bounds
(illegal address: the CUDA context is lost). cfg2: a Triton kernel that spins forever on a
flag nobody sets (timeout). cfg3: asks for more device memory than exists (out of memory).
"""

import nsprof.space


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def oob_store(ptr, far, BLOCK: tl.constexpr):
        # `far` is a runtime int64 argument: a constant this large does not fit Triton's int32.
        tl.store(ptr + far + tl.arange(0, BLOCK), tl.zeros((BLOCK,), dtype=tl.float32))

    @triton.jit
    def spin(flag_ptr, out_ptr):
        value = tl.load(flag_ptr, volatile=True)
        while value == 0:
            value = tl.load(flag_ptr, volatile=True)
        tl.store(out_ptr, value)

    return oob_store, spin


RELEASE_ENV = "NSPROF_TEST_RELEASE"  # the file whose existence lets a "held" config's build go on


def _held_until_released() -> None:
    """Block a build until the file named by $NSPROF_TEST_RELEASE exists (at most 120 s): a config that is
    surely still in its window when the test acts on its "start" line."""
    import os
    import time
    from pathlib import Path

    release = Path(os.environ[RELEASE_ENV])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def build(config):
    import torch

    kind = config["kind"]
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    if kind == "held":
        _held_until_released()
    if kind in ("ok", "held"):
        return lambda: torch.add(x, y, out=out)
    oob_store, spin = _kernels()
    if kind == "illegal_address":
        return lambda: oob_store[(1,)](out, 1 << 36, BLOCK=128)  # 64 G elements past the buffer
    if kind == "hang":
        flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        result = torch.empty(1, dtype=torch.int32, device="cuda")
        return lambda: spin[(1,)](flag, result)
    if kind == "oom":
        total = torch.cuda.get_device_properties(0).total_memory
        return lambda: torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    raise ValueError(kind)


space = nsprof.space.Space(
    name="faulty_gpu",
    configs=[{"kind": k} for k in ["ok", "illegal_address", "hang", "oom", "ok"]],
    build=build,
)

# Four healthy configs.
healthy = nsprof.space.Space(name="healthy_gpu", configs=[{"kind": "ok"}] * 4, build=build)

# Four healthy configs, config 2 held in its build until the profiler-killed test has killed the profiler:
# the kill lands in config 2's window, never in a later one.
held = nsprof.space.Space(
    name="held_gpu",
    configs=[{"kind": "ok"}, {"kind": "ok"}, {"kind": "held"}, {"kind": "ok"}],
    build=build,
)


# Fault injection from outside: kill the profiler process of a running session.


def profiler_pids(work_dir, tool: str) -> list[int]:
    """PIDs of `tool` (ncu, nsys) processes whose command line names `work_dir`."""
    from pathlib import Path

    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and Path(argv[0].decode(errors="replace")).name == tool
            and any(str(work_dir).encode() in a for a in argv)
        ):
            pids.append(int(proc.name))
    return pids


def kill_profiler_at(work_dir, tool: str, config_id: int, killed: list[int], release) -> None:
    """SIGKILL the session's profiler once its first worker starts `config_id`, then create `release`
    (which lets a held config's build go on) (for a thread)."""
    import os
    import signal
    import time
    from pathlib import Path

    status = Path(work_dir) / "part0.status"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if status.exists() and f"start {config_id}" in status.read_text():
            for pid in profiler_pids(work_dir, tool):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            Path(release).touch()
            return
        time.sleep(0.05)
