"""Fault injection on a real GPU (marker `gpu`): every other config measured, nothing lost."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from nsprof.drivers.base import ProfileSettings
from nsprof.profile import config_summary, profile

pytestmark = pytest.mark.gpu
TARGET = str(FIXTURES.parent / "targets" / "faulty_gpu.py") + ":space"


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_faults_are_recorded_and_the_rest_measured(backend, tmp_path):
    pytest.importorskip("triton")
    frame = profile(TARGET, ProfileSettings(backend=backend, reps=3, warmup=1, timeout_s=20, work_dir=tmp_path))
    failures = frame.attrs["failures"]
    assert set(failures) == {1, 2, 3}, failures
    assert "illegal" in failures[1].lower() or "cuda" in failures[1].lower(), failures[1]
    assert failures[2].startswith("timeout"), failures[2]
    assert "memory" in failures[3].lower(), failures[3]
    summary = config_summary(frame)
    measured = summary[summary["error"].isna()]
    assert sorted(set(measured["config_id"])) == [0, 4]
    assert (measured["reps"] == 3).all()
    print(f"FAULTS {backend}: injected 3, configs measured {sorted(set(measured['config_id']))}, "
          f"reasons {failures}")
