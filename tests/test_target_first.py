"""A target that cannot be loaded is named before nsprof looks for its tools: a missing
file, a missing attribute or a module that does not import is one line naming it, even where the
profiler is missing too (NSPROF_NCU and NSPROF_NSYS pointing nowhere stand for a machine without
ncu and nsys, whatever this machine has)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nsprof.cli import cli
from nsprof.errors import TargetError


@pytest.fixture
def no_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("NSPROF_NCU", str(tmp_path / "no such folder" / "ncu"))
    monkeypatch.setenv("NSPROF_NSYS", str(tmp_path / "no such folder" / "nsys"))


def _targets(tmp_path):
    (tmp_path / "no_space.py").write_text("import nsprof.space\nother = 1\n")
    (tmp_path / "broken.py").write_text(
        "import nsprof.space\nraise ImportError('no module named kernels_x')\n"
    )
    return [
        (str(tmp_path / "nothere.py") + ":space", f"target file {tmp_path / 'nothere.py'} does not exist"),
        (str(tmp_path / "no_space.py") + ":space", f"{tmp_path / 'no_space.py'} has no attribute 'space'"),
        (
            str(tmp_path / "broken.py") + ":space",
            f"importing {tmp_path / 'broken.py'} failed: ImportError: no module named kernels_x",
        ),
    ]


COMMANDS = {
    "profile ncu": ["profile", "--backend", "ncu"],
    "profile nsys": ["profile", "--backend", "nsys"],
    "tune": ["tune", "--no-store"],
    "tune --truth": ["tune", "--truth", "ncu,nsys", "--no-store"],
    "validate": ["validate"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_target_that_cannot_load_is_named_before_the_missing_tool(command, tmp_path, no_tools):
    for target, message in _targets(tmp_path):
        name, *options = COMMANDS[command]
        result = CliRunner().invoke(cli, [name, target, *options])
        # nsprof.cli.main prints a library error as one line, exit status 2 (the subprocess test below)
        assert isinstance(result.exception, TargetError), (command, target, result.exception, result.output)
        assert str(result.exception) == message


def test_the_command_line_prints_the_one_line(tmp_path, no_tools):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "nsprof", "tune", str(tmp_path / "nothere.py") + ":space"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"nsprof: error: target file {tmp_path / 'nothere.py'} does not exist"
    ]


def test_a_loadable_target_still_meets_the_missing_tool(tmp_path, no_tools):
    (tmp_path / "fine.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{}], build=lambda c: (lambda: None), "
        "device='cpu')\n"
    )
    result = CliRunner().invoke(cli, ["profile", str(tmp_path / "fine.py") + ":space"])
    assert (
        str(result.exception) == f"NSPROF_NCU={tmp_path / 'no such folder' / 'ncu'} is not an executable file"
    )
