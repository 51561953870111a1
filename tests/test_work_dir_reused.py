"""A --work-dir used again never loses what an earlier run measured there: each run's reports go
under names of their own, taken when the run starts, and what the run prints names them. nsprof's
CLI in real child processes, its profilers the stand-ins (tests/standins.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_nsprof

TARGET = """
import nsprof.space


class Launch:
    def __init__(self, config):
        self.config = config

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{"ns": 1000.0 + 100 * i} for i in range(3)], build=Launch, device="cpu")
"""

# the session's phases (nsprof.session.PHASES_FILE) are the latest run's by design: not a measurement
NOT_KEPT = {"phases.json"}


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in NOT_KEPT
    }


def _profile(tmp_path: Path, backend: str):
    done = run_nsprof(
        "profile",
        "t.py:space",
        "--backend",
        backend,
        "--mode",
        "direct",
        "--reps",
        "2",
        "--work-dir",
        "wd",
        cwd=tmp_path,
        env={"NSPROF_LOCK_DIR": str(tmp_path / "locks")},
        standins=True,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_a_second_profile_into_the_same_work_dir_keeps_the_first_runs_reports_byte_for_byte(
    tmp_path, backend
):
    (tmp_path / "t.py").write_text(TARGET)
    first = _profile(tmp_path, backend)
    before = _files(tmp_path / "wd")
    reports = [name for name in before if name.endswith(".standin.json")]
    assert reports, before.keys()
    second = _profile(tmp_path, backend)
    after = _files(tmp_path / "wd")
    assert {name: after.get(name) for name in before} == before  # every file of the first run, unchanged
    new = sorted(set(after) - set(before))
    new_reports = [name for name in new if name.endswith(".standin.json")]
    assert new_reports, new
    # each run names the folder and the reports it wrote, and only those
    kept = [line.split("reports kept in wd: ", 1)[1] for line in (first.stdout, second.stdout)]
    assert kept[0].splitlines()[0].split(", ") == reports, first.stdout
    assert kept[1].splitlines()[0].split(", ") == new_reports, second.stdout
