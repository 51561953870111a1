"""Facts about the GPU machine that nsprof's process handling relies on, checked there:

    source .device/setup.sh && python3 scripts/probe_process_facts.py

1. an inherited descriptor (subprocess pass_fds) reaches the program that ncu / nsys launch;
2. the GPU UUID that torch reports for cuda:0, against nvidia-smi's.
Prints one line per fact.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = (
    "import os, sys\nfd = int(sys.argv[1])\ntry:\n    os.fstat(fd)\n    print('FD-OK', flush=True)\n"
    "except OSError as exc:\n    print('FD-MISSING', exc, flush=True)\n"
)


def main() -> None:
    from nsprof.host.tools import find_ncu, find_nsys

    read_end, write_end = os.pipe()
    tools = {"bare": []}
    ncu, nsys = find_ncu(required=False), find_nsys(required=False)
    if ncu:
        tools["ncu"] = [str(ncu.path), "--target-processes", "all"]
    if nsys:
        tools["nsys"] = [
            str(nsys.path),
            "profile",
            "-t",
            "cuda,nvtx",
            "-s",
            "none",
            "--cpuctxsw=none",
            "-o",
            "/tmp/probe_fd",
            "--force-overwrite",
            "true",
        ]
    for name, prefix in tools.items():
        done = subprocess.run(
            [*prefix, sys.executable, "-c", CHILD, str(read_end)],
            pass_fds=(read_end,),
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("FD-")]
        print(f"fd through {name}: {lines[-1] if lines else 'no output'} (rc {done.returncode})")
    os.close(write_end)
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    print(f"torch uuid: {props.uuid!s} name: {props.name} | nvidia-smi: {smi}")


if __name__ == "__main__":
    main()
