"""nsprof's own environment variables, set to what they cannot mean: one line naming the variable and a
non-zero exit, never a value silently taken as another (NSPROF_CSV_ENGINE, NSPROF_SERVE) or a message
that does not say which setting is wrong (NSPROF_LOCK_DIR naming a file)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, run_nsprof

TARGET = f"{FIXTURES.parent / 'targets' / 'faulty_cpu.py'}:space"
PROFILE = ("profile", TARGET, "--backend", "nsys", "--configs", "0", "--mode", "direct", "--reps", "1")


def _one_line_naming(done, name: str) -> None:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0], done.stderr


def test_an_unknown_csv_engine_is_refused(tmp_path):
    report = FIXTURES / "fixture_node_raw.csv"
    done = run_nsprof("analyze", report, env={"NSPROF_CSV_ENGINE": "bogus"}, cwd=tmp_path, in_process=True)
    _one_line_naming(done, "NSPROF_CSV_ENGINE")


@pytest.mark.parametrize("value", ["bogus", "2"])
def test_an_nsprof_serve_that_is_neither_on_nor_off_is_refused(tmp_path, value):
    env = {"NSPROF_SERVE": value, "NSPROF_LOCK_DIR": str(tmp_path / "locks")}
    _one_line_naming(run_nsprof(*PROFILE, env=env, cwd=tmp_path, standins=True), "NSPROF_SERVE")


def test_a_lock_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "afile").write_text("")
    env = {"NSPROF_LOCK_DIR": str(tmp_path / "afile")}
    _one_line_naming(run_nsprof(*PROFILE, env=env, cwd=tmp_path, standins=True), "NSPROF_LOCK_DIR")
