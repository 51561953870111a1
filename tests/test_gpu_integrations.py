"""End to end on a GPU (marker `gpu`): nsprof tune -> the user's own autotuned call runs nsprof's winner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]

CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tilelang.autotuner.tuner import AutoTuner
def refuse(*args, **kwargs):
    raise SystemExit("TileLang benchmarked again")
AutoTuner._benchmark_target = refuse   # a cache hit never benchmarks
from autotune_tilelang import matmul
kernel = matmul.compile(1, 1024, 1024)
print(json.dumps(next(iter(matmul._tuner_cache.values()))[1]))
"""


def test_tilelang_autotune_returns_nsprofs_winner(tmp_path):
    pytest.importorskip("tilelang")
    tune = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsprof",
            "tune",
            "examples/autotune_tilelang.py:space",
            "--backend",
            "ncu",
            "--mode",
            "graph",
            "--store",
            str(tmp_path / "r.sqlite"),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert tune.returncode == 0, tune.stderr[-2000:]
    document = json.loads(tune.stdout)
    assert any("handed to TileLang" in note for note in document["notes"]), document["notes"]
    pick = document["tuner_pick"]  # TileLang's own benchmark, in a child that wrote no cache entry
    assert pick["config_id"] in range(18) and pick["timer"] == "TileLang's own benchmark"
    check = subprocess.run(
        [sys.executable, "-c", CHECK, str(ROOT / "examples")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    chosen = json.loads(check.stdout.strip().splitlines()[-1])
    assert {k: chosen[k] for k in document["best_config"]} == document["best_config"]


CHECK_TRITON = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from triton.runtime.autotuner import Autotuner
def refuse(*args, **kwargs):
    raise SystemExit("Triton benchmarked again")
Autotuner._bench = refuse   # a cache hit never benchmarks
import torch
from matmul_triton import matmul, matmul_kernel, M, N, K
from nsprof.integrations.triton import config_dict
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
c = matmul(a, b)
torch.cuda.synchronize()
error = ((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()
assert error < 1e-2, error
print(json.dumps(config_dict(matmul_kernel.best_config)))
"""


def test_triton_autotune_returns_nsprofs_winner(tmp_path):
    pytest.importorskip("triton")
    tune = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsprof",
            "tune",
            "examples/matmul_triton.py:space",
            "--backend",
            "ncu",
            "--mode",
            "graph",
            "--store",
            str(tmp_path / "r.sqlite"),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert tune.returncode == 0, tune.stderr[-2000:]
    document = json.loads(tune.stdout)
    assert any("handed to Triton's autotuner" in note for note in document["notes"]), document["notes"]
    pick = document["tuner_pick"]
    assert pick["config_id"] in range(18) and "do_bench" in pick["timer"], pick
    print(
        "TRITON PICK:",
        json.dumps(pick["config"]),
        "nsprof best:",
        json.dumps(document["best_config"]),
        [n for n in document["notes"] if "picks config" in n],
    )
    check = subprocess.run(
        [sys.executable, "-c", CHECK_TRITON, str(ROOT / "examples")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    chosen = json.loads(check.stdout.strip().splitlines()[-1])
    assert chosen == document["best_config"]


CHECK_SOFTMAX = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from triton.runtime.autotuner import Autotuner
def refuse(*args, **kwargs):
    raise SystemExit("Triton benchmarked again")
Autotuner._bench = refuse   # a cache hit never benchmarks
import torch
from softmax_triton import softmax, autotuned, ROWS, COLS
from nsprof.integrations.triton import config_dict
x = torch.randn(ROWS, COLS, device="cuda", dtype=torch.float16)
y = softmax(x)
torch.cuda.synchronize()
assert (y.float() - torch.softmax(x.float(), dim=1)).abs().max().item() < 1e-2
print(json.dumps(config_dict(autotuned().best_config)))
"""


def test_triton_softmax_autotune_returns_nsprofs_winner_under_nsys(tmp_path):
    pytest.importorskip("triton")
    tune = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsprof",
            "tune",
            "examples/softmax_triton.py:tuned_space",
            "--backend",
            "nsys",
            "--mode",
            "graph",
            "--no-store",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert tune.returncode == 0, tune.stderr[-2000:]
    document = json.loads(tune.stdout)
    assert any("handed to Triton's autotuner" in note for note in document["notes"]), document["notes"]
    print(
        "SOFTMAX:",
        [n for n in document["notes"] if "picks config" in n],
        "nsprof best:",
        document["best_config"],
    )
    check = subprocess.run(
        [sys.executable, "-c", CHECK_SOFTMAX, str(ROOT / "examples")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    assert json.loads(check.stdout.strip().splitlines()[-1]) == document["best_config"]


def test_a_second_tune_replaces_the_first_winner_in_tilelangs_cache(tmp_path):
    """Two tunes with different winners (disjoint config sets: block_N=32 only, then 128 only), then
    a fresh process: it must run the second winner, from TileLang's cache on disk."""
    pytest.importorskip("tilelang")
    winners = []
    for backend, configs in (("nsys", "0,1,2,3,4,5"), ("ncu", "12,13,14,15,16,17")):
        tune = subprocess.run(
            [
                sys.executable,
                "-m",
                "nsprof",
                "tune",
                "examples/autotune_tilelang.py:space",
                "--backend",
                backend,
                "--mode",
                "graph",
                "--configs",
                configs,
                "--no-tuner-pick",
                "--store",
                str(tmp_path / "r.sqlite"),
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
        assert tune.returncode == 0, tune.stderr[-2000:]
        document = json.loads(tune.stdout)
        note = next(n for n in document["notes"] if "handed to TileLang" in n)
        winners.append(document["best_config"])
        assert note.endswith(str(document["best_config"])), (
            note
        )  # the note names the entry read back from disk
    assert winners[0] != winners[1]
    check = subprocess.run(
        [sys.executable, "-c", CHECK, str(ROOT / "examples")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    chosen = json.loads(check.stdout.strip().splitlines()[-1])
    assert {k: chosen[k] for k in winners[1]} == winners[1]
