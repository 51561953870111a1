"""Probe (GPU): the autotuner cache key TileLang 0.1.15 computes for `matmul.compile(*shape)` at each of
examples/gemm_shapes_tilelang.py's shapes, in three process histories, and what the key is made of:
  fresh     one fresh process per shape (as nsprof's feed-back computes it);
  sequence  one process calling every shape in turn (as a user's server does);
  compiled  one process that compiled a config at another shape first.
TileLang's tuner is stopped right after it computed the key (nothing is tuned or written).

    source .device/setup.sh && python3 scripts/probe_tilelang_keys.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, inspect, json, sys
sys.path.insert(0, sys.argv[1])
import tilelang.autotuner.tuner as tu
from tilelang.autotuner.tuner import AutoTuner

class Stop(Exception):
    pass

seen = []
original = AutoTuner.generate_cache_key
def spy(self, parameters, extra):
    key = original(self, parameters, extra)
    parts = {"op_parameters": repr([p.default for p in parameters.values() if p.default is not inspect.Parameter.empty]
                                   + list(tu._normalize_value(self._kernel_parameters or ()))),
             "extra": repr(extra), "source": hashlib.sha1(inspect.getsource(self.fn).encode()).hexdigest()[:10],
             "configs": hashlib.sha1(json.dumps(self.configs, sort_keys=True, default=str).encode()).hexdigest()[:10],
             "compile_args": repr(self.compile_args), "profile_args": hash(self.profile_args) % 10**10}
    seen.append({"key": key, **parts})
    raise Stop
AutoTuner.generate_cache_key = spy
from gemm_shapes_tilelang import SHAPES, compile_config
from autotune_tilelang import matmul
order, first = json.loads(sys.argv[2]), sys.argv[3]
if first != "-":
    compile_config({"block_N": 32, "block_K": 128, "num_stages": 4}, SHAPES[int(first)])
for i in order:
    try:
        matmul.compile(*SHAPES[i])
    except Stop:
        pass
print("KEYS " + json.dumps(seen))
"""


def keys(order: list[int], first: str = "-") -> list[dict]:
    # In a folder of its own: TileLang's autotuner opens ./autotuner.log in its cwd (it left one at the root).
    with tempfile.TemporaryDirectory(prefix="nsprof-probe-keys-") as folder:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT / "examples"), json.dumps(order), first],
            capture_output=True,
            text=True,
            cwd=folder,
            timeout=300,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            },
        )
    for line in done.stdout.splitlines():
        if line.startswith("KEYS "):
            return json.loads(line[5:])
    raise SystemExit(f"the probe failed: {done.stderr[-2000:]}")


def main() -> int:
    fresh = [keys([i])[0] for i in range(4)]
    sequence = keys([0, 1, 2, 3])
    compiled = keys([0, 1], first="3")
    print("shape  fresh        sequence     compiled-first")
    for i in range(4):
        print(
            f"{i:5}  {fresh[i]['key'][:10]}   {sequence[i]['key'][:10]}   "
            f"{compiled[i]['key'][:10] if i < len(compiled) else '-'}"
        )
    for name, runs in (("sequence", sequence), ("compiled", compiled)):
        for i, run in enumerate(runs):
            differ = {k: (fresh[i][k], run[k]) for k in run if k != "key" and run[k] != fresh[i][k]}
            if differ:
                print(f"{name} shape {i} differs from fresh in: {json.dumps(differ)[:1500]}")
    print(json.dumps({"fresh": fresh, "sequence": sequence, "compiled": compiled})[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
