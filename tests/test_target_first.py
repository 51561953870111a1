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


RAISING = {
    "SystemExit": ("raise SystemExit(3)\n", "SystemExit: 3"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
    "a BaseException of its own": (
        "class Stop(BaseException):\n    pass\n\n\nraise Stop('no GPU here')\n",
        "Stop: no GPU here",
    ),
}


@pytest.mark.parametrize("raised", list(RAISING))
@pytest.mark.parametrize("command", ["profile", "tune", "validate"])
def test_a_target_raising_a_base_exception_at_import_is_one_line_naming_it_with_no_traceback(
    raised, command, tmp_path
):
    """The child that imports the target to describe it catches what no `except Exception` does:
    sys.exit(), a KeyboardInterrupt the target raises itself (the child is a session of its own: no
    Ctrl-C of the user's reaches it), a BaseException subclass; its Python traceback is never printed."""
    from conftest import run_nsprof

    source, words = RAISING[raised]
    (tmp_path / "t.py").write_text(source)
    done = run_nsprof(command, "t.py:space", *(["--no-store"] if command == "tune" else []), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("nsprof: error: ") and "t.py" in line and line.endswith(f"failed: {words}"), line
