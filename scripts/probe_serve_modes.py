"""A long-lived CUDA program driven from outside, to check on the GPU machine what nsys's
launch/start/stop and ncu's launch/attach modes do with it (docs/serve.md has the commands):

    python3 scripts/probe_serve_modes.py worker --dir D       # under `nsys launch`, `ncu --mode launch`, ...
    python3 scripts/probe_serve_modes.py send --dir D batch b1 20   # 20 launches + 20 graph replays in range b1
    python3 scripts/probe_serve_modes.py send --dir D profstart     # cudaProfilerStart(); profstop: Stop()
    python3 scripts/probe_serve_modes.py send --dir D exit

The worker makes its CUDA context, writes D/ready, then reads one command per line from the FIFO
D/commands (made by `send` or by the worker) and appends "<command> done <monotonic s>" to
D/done.log after each. A batch NAME N: N direct launches of a 1x1024x1024 fp16 matmul, each in
an NVTX range NAME.direct.r<i> of domain "nsprof" nested in the outer range "nsprof" (the ranges
nsprof's ncu filter selects), then N replays of a CUDA graph of the same call in NAME.graph.r<i>;
a synchronize after each. Warm-up and capture happen once, at start, outside every range.
Not part of nsprof: a probe, so that `nsprof serve` is built on facts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _fifo(folder: Path) -> Path:
    path = folder / "commands"
    if not path.exists():
        os.mkfifo(path)
    return path


def worker(folder: Path, outer: str | None = None) -> None:
    import nvtx
    import torch

    a = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    out = torch.empty(1, 1024, device="cuda", dtype=torch.float16)

    def launch() -> None:
        torch.matmul(a, b, out=out)

    for _ in range(3):
        launch()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    graph.replay()
    torch.cuda.synchronize()
    fifo = _fifo(folder)
    (folder / "ready").write_text(f"{os.getpid()} {time.monotonic():.6f}\n")
    done = open(folder / "done.log", "a", buffering=1)
    while True:
        with open(fifo) as commands:  # blocks until a sender opens it
            for line in commands:
                words = line.split()
                if not words:
                    continue
                if words[0] == "exit":
                    done.write(f"exit done {time.monotonic():.6f}\n")
                    return
                if words[0] == "batch":
                    name, n = words[1], int(words[2])
                    if outer:
                        nvtx.push_range(outer, domain="nsprof")
                    for mode, call in (("direct", launch), ("graph", graph.replay)):
                        for rep in range(n):
                            nvtx.push_range("nsprof", domain="nsprof")
                            nvtx.push_range(f"{name}.{mode}.r{rep}", domain="nsprof")
                            call()
                            torch.cuda.synchronize()
                            nvtx.pop_range(domain="nsprof")
                            nvtx.pop_range(domain="nsprof")
                    if outer:
                        torch.cuda.synchronize()
                        nvtx.pop_range(domain="nsprof")
                elif words[0] == "profstart":
                    torch.cuda.profiler.start()
                elif words[0] == "profstop":
                    torch.cuda.profiler.stop()
                done.write(f"{' '.join(words)} done {time.monotonic():.6f}\n")


def send(folder: Path, words: list[str], timeout_s: float) -> int:
    """Send one command and wait until the worker says it is done; print how long it took."""
    log = folder / "done.log"
    before = log.read_text().count("\n") if log.exists() else 0
    began = time.monotonic()
    with open(_fifo(folder), "w") as commands:
        commands.write(" ".join(words) + "\n")
    while time.monotonic() - began < timeout_s:
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) > before:
            print(f"{' '.join(words)}: done after {time.monotonic() - began:.3f} s", flush=True)
            return 0
        time.sleep(0.01)
    print(f"{' '.join(words)}: no answer within {timeout_s:g} s", flush=True)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["worker", "send"])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--outer", help="worker: one more range of this name around each whole batch")
    parser.add_argument("command", nargs="*")
    args = parser.parse_intermixed_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.role == "worker":
        worker(args.dir, args.outer)
        return 0
    return send(args.dir, args.command, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
