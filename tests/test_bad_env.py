"""Bad input that names no file or setting nsprof can use: nsprof's own environment variables set to what they
cannot mean, and a target that names a folder: one line naming what is wrong and a non-zero exit, never a
value silently taken as another (NSPROF_CSV_ENGINE, NSPROF_SERVE) or a message that misnames the problem."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, run_nsprof

TARGET = f"{FIXTURES.parent / 'targets' / 'faulty_cpu.py'}:space"
PROFILE = ("profile", TARGET, "--backend", "nsys", "--configs", "0", "--mode", "direct", "--reps", "1")


def _one_line_naming(done, name: str) -> None:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0], done.stderr


def test_an_unknown_csv_engine_is_refused_before_anything_is_measured(tmp_path):
    report = FIXTURES / "fixture_node_raw.csv"
    done = run_nsprof("analyze", report, env={"NSPROF_CSV_ENGINE": "bogus"}, cwd=tmp_path, in_process=True)
    _one_line_naming(done, "NSPROF_CSV_ENGINE")
    env = {"NSPROF_CSV_ENGINE": "bogus", "NSPROF_LOCK_DIR": str(tmp_path / "locks")}
    done = run_nsprof(
        *PROFILE[:3],
        "ncu",
        *PROFILE[4:],
        "--work-dir",
        "w",
        env=env,
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    _one_line_naming(done, "NSPROF_CSV_ENGINE")
    assert not (tmp_path / "w").exists()  # refused before the session


@pytest.mark.parametrize("value", ["bogus", "2"])
def test_an_nsprof_serve_that_is_neither_on_nor_off_is_refused(tmp_path, value):
    env = {"NSPROF_SERVE": value, "NSPROF_LOCK_DIR": str(tmp_path / "locks")}
    _one_line_naming(
        run_nsprof(*PROFILE, env=env, cwd=tmp_path, standins=True, in_process=True), "NSPROF_SERVE"
    )


def test_a_lock_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "afile").write_text("")
    env = {"NSPROF_LOCK_DIR": str(tmp_path / "afile")}
    _one_line_naming(
        run_nsprof(*PROFILE, env=env, cwd=tmp_path, standins=True, in_process=True), "NSPROF_LOCK_DIR"
    )


def test_a_target_that_names_a_folder_says_so(tmp_path):
    done = run_nsprof("tune", f"{tmp_path}:space", "--no-store", cwd=tmp_path, in_process=True)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a folder" in lines[0], done.stderr


def test_a_lock_dir_every_user_may_write_without_the_sticky_bit_is_refused(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(0o777)
    done = run_nsprof(
        *PROFILE, env={"NSPROF_LOCK_DIR": str(folder)}, cwd=tmp_path, standins=True, in_process=True
    )
    _one_line_naming(done, "NSPROF_LOCK_DIR")
    assert not list(folder.iterdir())
    folder.chmod(0o1777)  # sticky, as /tmp: used
    done = run_nsprof(
        *PROFILE, env={"NSPROF_LOCK_DIR": str(folder)}, cwd=tmp_path, standins=True, in_process=True
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("args", [("tune", "--help"), ("tune", "-V"), ("doctor", "--help"), ("--help",)])
def test_help_and_version_are_shown_whatever_the_environment_says(tmp_path, args):
    done = run_nsprof(*args, env={"NSPROF_CSV_ENGINE": "bogus", "NSPROF_SERVE": "maybe"}, in_process=True)
    assert done.returncode == 0, done.stderr
