"""Shapes end to end on a GPU (marker `gpu`): one `nsprof tune` over every shape, then a fresh process
calls the user's own kernel at each shape and runs nsprof's winner for that shape without benchmarking."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]

CHECK_TRITON = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from triton.runtime.autotuner import Autotuner
def refuse(*args, **kwargs):
    raise SystemExit("Triton benchmarked again")
Autotuner._bench = refuse   # a cache hit never benchmarks
import torch
from matmul_shapes_triton import SHAPES, N, K, matmul, matmul_kernel
from nsprof.integrations.triton import config_dict
chosen = []
for shape in SHAPES:
    a = torch.randn(shape["M"], K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = matmul(a, b)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
    chosen.append(config_dict(matmul_kernel.best_config))
print(json.dumps(chosen))
"""


def _tune(target: str, backend: str, tmp_path: Path) -> dict:
    tune = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsprof",
            "tune",
            target,
            "--backend",
            backend,
            "--mode",
            "graph",
            "--store",
            str(tmp_path / "r.sqlite"),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    assert tune.returncode == 0, tune.stderr[-3000:]
    document = json.loads(tune.stdout)
    assert len(document["shapes"]) == 4
    return document


def test_triton_autotune_returns_nsprofs_winner_at_every_shape(tmp_path):
    pytest.importorskip("triton")
    document = _tune("examples/matmul_shapes_triton.py:space", "nsys", tmp_path)
    for shape in document["shapes"]:
        assert any("handed to Triton's autotuner" in note for note in shape["notes"]), shape["notes"]
    check = subprocess.run(
        [sys.executable, "-c", CHECK_TRITON, str(ROOT / "examples")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    chosen = json.loads(check.stdout.strip().splitlines()[-1])
    print("TRITON SHAPES:", [(s["shape_value"], s["best_config"]) for s in document["shapes"]])
    assert chosen == [shape["best_config"] for shape in document["shapes"]]


CHECK_TILELANG = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tilelang.autotuner.tuner import AutoTuner
def refuse(*args, **kwargs):
    raise SystemExit("TileLang benchmarked again")
AutoTuner._benchmark_target = refuse   # a cache hit never benchmarks
looked = []
load = AutoTuner._load_result_from_disk
def spy(self, key):   # which key this process looked up, whether it was on disk, whether it loaded
    result = load(self, key)
    looked.append({"key": key, "on_disk": (self.cache_dir / key).exists(), "loaded": result is not None})
    return result
AutoTuner._load_result_from_disk = spy
from gemm_shapes_tilelang import SHAPES
from autotune_tilelang import matmul
chosen = []
for shape in SHAPES:
    matmul._tuner_cache.clear()  # what this call finds, it found on disk under this call's key
    try:
        matmul.compile(*shape)
        chosen.append(next(iter(matmul._tuner_cache.values()))[1])
    except (Exception, SystemExit) as exc:   # reported below, per shape, with what was on disk
        chosen.append({"failed": f"{type(exc).__name__}: {exc}"[:300]})
entries = sorted(p.name for p in AutoTuner._get_cache_dir().iterdir()) if AutoTuner._get_cache_dir().exists() else []
print(json.dumps({"chosen": chosen, "looked": looked, "entries": entries}, default=str))
"""


def test_tilelang_autotune_returns_nsprofs_winner_at_every_shape(tmp_path):
    pytest.importorskip("tilelang")
    document = _tune("examples/gemm_shapes_tilelang.py:autotuned", "ncu", tmp_path)
    for shape in document["shapes"]:
        assert any("handed to TileLang" in note for note in shape["notes"]), shape["notes"]
    check = subprocess.run(
        [sys.executable, "-c", CHECK_TILELANG, str(ROOT / "examples")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    found = json.loads(check.stdout.strip().splitlines()[-1])
    print(
        "TILELANG SHAPES:",
        [(s["shape_value"], s["best_config"]) for s in document["shapes"]],
        json.dumps(found),
    )
    chosen = found["chosen"]
    assert not [c for c in chosen if "failed" in c], (found, [s["notes"] for s in document["shapes"]])
    for got, shape in zip(chosen, document["shapes"]):
        assert {k: got[k] for k in shape["best_config"]} == shape["best_config"]
