"""Ground truth on a real GPU (marker `gpu`; skipped without one). Run on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_nsprof

from nsprof.profile import config_summary, profile_result
from nsprof.settings import ProfileSettings

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
GEMM = str(ROOT / "examples" / "gemm_tilelang.py") + ":space"
SEED = 13  # block_N=32, block_K=128, num_stages=4: the seed request's config
# Measured by hand on the H200: ncu base clocks 5.19-5.73 µs (direct and graph node); nsys 2.88-3.23 µs.
RANGES_US = {"ncu": (4.6, 6.5), "nsys": (2.5, 3.8)}


def test_seed_config_is_the_seed_request():
    from nsprof.space import load_target

    assert load_target(GEMM).configs[SEED] == {"block_N": 32, "block_K": 128, "num_stages": 4}


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_seed_gemm_durations_match_design_ranges(backend, tmp_path):
    pytest.importorskip("tilelang")
    frame = profile_result(
        GEMM, ProfileSettings(backend=backend, reps=5, work_dir=tmp_path), config_ids=[SEED, 0]
    ).frame
    summary = config_summary(frame).set_index(["config_id", "mode"])
    low, high = RANGES_US[backend]
    for mode in ("direct", "graph"):
        row = summary.loc[(SEED, mode)]
        assert row["reps"] == 5 and row["kernels"] == 1
        assert low <= row["median_ns"] / 1e3 <= high, (backend, mode, row["median_ns"])
    if backend == "ncu":
        seed = frame[frame["config_id"] == SEED]
        assert set(seed["clock_control"]) == {"base"} and set(seed["cache_control"]) == {"all"}
        assert seed["cycles"].between(6000, 9500).all()
    else:
        graph_rows = frame[(frame["config_id"] == SEED) & (frame["mode"] == "graph")]
        assert graph_rows["graph_node"].notna().all()


def test_doctor_on_gpu_machine():
    result = run_nsprof("doctor", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ok  ] GPU" in result.stdout and "ground truth available from: ncu" in result.stdout
