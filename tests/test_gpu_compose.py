"""Every tune feature with shapes, end to end on a GPU (marker `gpu`): a Triton and a TileLang target
at 4 shapes each, ranked by ncu and nsys; every shape's rankings get adaptive reps (or say why none
were needed), every disagreement between the truths is probed at its own shape, and the tuner's
own pick (Triton's, TileLang's) is asked at every shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nsprof.analysis import adaptive as rules

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
# every reason adaptive reps may stop for, but those of a run that did not do them
ADAPTIVE_STOPS = set(rules.STOP_REASONS) - {rules.OFF, rules.FAST_TIMER}


def _tune(target: str, tmp_path: Path) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsprof",
            "tune",
            target,
            "--truth",
            "ncu,nsys",
            "--mode",
            "graph",
            "--budget-s",
            "20",
            "--store",
            str(tmp_path / "r.sqlite"),
            "--no-feed-back",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _check_every_shape(document: dict) -> None:
    assert len(document["shapes"]) == 4
    for shape in document["shapes"]:
        for ranking in shape["truths"]:
            adaptive = ranking["adaptive"]
            assert adaptive is not None and adaptive["stopped"] in ADAPTIVE_STOPS, (shape["shape"], adaptive)
        assert [pair["a"] for pair in shape["agreement"]] == ["ncu"]
        disagreements = [p for p in shape["agreement"] if p["verdict"] == "disagree"]
        assert len(shape["explanations"]) == len(disagreements)
        for explanation in shape["explanations"]:
            # a disagreement at this shape was probed here: ncu changes its clocks and caches
            assert explanation["probes"], (shape["shape"], explanation)
        assert not any("per shape yet" in note for note in shape["notes"]), shape["notes"]


def test_triton_at_four_shapes_gets_adaptive_reps_probes_and_its_own_pick_per_shape(tmp_path):
    pytest.importorskip("triton")
    document = _tune("examples/matmul_shapes_triton.py:space", tmp_path)
    _check_every_shape(document)
    for shape in document["shapes"]:
        assert any("Triton's autotuner" in note and "picks config" in note for note in shape["notes"]), shape[
            "notes"
        ]


def test_tilelang_at_four_shapes_gets_adaptive_reps_probes_and_its_own_pick_per_shape(tmp_path):
    pytest.importorskip("tilelang")
    document = _tune("examples/gemm_shapes_tilelang.py:autotuned", tmp_path)  # the tuner can pick
    _check_every_shape(document)
    for shape in document["shapes"]:
        assert any("TileLang's autotuner" in note and "picks config" in note for note in shape["notes"]), (
            shape["notes"]
        )
