"""validate --l2-check on a real GPU (marker `gpu`, run on the H200): the seed GEMM's weights (2 MiB)
stay in L2 between launches, so ncu must count many more L2 hits unflushed than after its own flush,
and nsprof's cold timers' flush must leave the hit rate where ncu's own flush does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_nsprof

from nsprof.analysis.l2 import COLD_MARGIN

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]


def test_the_cold_timers_flush_is_cold_on_the_seed_gemm(tmp_path):
    saved = tmp_path / "v.json"
    ran = run_nsprof(
        "validate", "examples/seed_gemm.py:space", "--timers", "cupti", "--no-external", "--truth", "ncu",
        "--mode", "graph", "--reps", "3", "--no-repeat", "--l2-check", "--save", saved,
        cwd=ROOT, timeout=540,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = json.loads(saved.read_text())["l2_check"]
    assert rows, ran.stdout
    for row in rows:
        cold, flushed, warm = row["ncu's flush"], row["timers' flush"], row["no flush"]
        assert None not in (cold, flushed, warm), row
        assert warm >= cold + COLD_MARGIN, row  # the data stays in L2 when nothing flushes it
        assert flushed <= cold + COLD_MARGIN, row  # and nsprof's flush evicts it as ncu's does
        assert row["cold"] == "cold", row
    assert "measured cold: their flush left the hit rate within" in ran.stdout
