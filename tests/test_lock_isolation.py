"""No test takes the machine-wide GPU lock: not even a module-scoped fixture, which runs before the
per-test lock folder (conftest.own_gpu_lock_folder) is set, so that a real nsprof running on the
machine, or a second test run, never makes the suite wait or fail."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(scope="module")
def lock_dir_of_a_module_fixture():
    return os.environ.get("NSPROF_LOCK_DIR")


def test_a_module_fixture_runs_with_a_lock_folder_of_the_runs_own(lock_dir_of_a_module_fixture):
    assert lock_dir_of_a_module_fixture is not None, "a module fixture would take the machine-wide lock"
    # the run's own temporary folder (conftest points TMPDIR there), never a shared place
    assert os.path.commonpath([lock_dir_of_a_module_fixture, tempfile.gettempdir()]) == tempfile.gettempdir()
