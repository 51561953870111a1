"""examples/matmul_shapes_triton.py's space, with Triton's post-compile hook logging each compile
this process makes to $NSPROF_TEST_LOG (one JSON line: pid, whether it was a warmup, the kernel's
repr), for tests/test_gpu_triton_compile.py: a worker that compiles ahead makes every compile a
warmup, and none at a config's first launch."""

import json
import os
import sys
from pathlib import Path

from triton import knobs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import matmul_shapes_triton  # noqa: E402


def _logged(**call):
    with open(os.environ["NSPROF_TEST_LOG"], "a") as log:
        log.write(
            json.dumps({"pid": os.getpid(), "warmup": call["is_manual_warmup"], "kernel": call["repr"]})
            + "\n"
        )


knobs.runtime.jit_post_compile_hook = _logged
space = matmul_shapes_triton.space
