"""Which ncu, nsys and nvidia-smi nsprof runs, and doctor's reading of what they print.

An empty or relative PATH entry (`PATH=/usr/bin:`, a common slip) stands for whatever folder nsprof
runs in, which another user may write: a program found only there is never run. The tool nsprof checks
is the one it runs. A tool that prints what doctor does not expect is one FAIL line, not a traceback.
Fake tools are shell scripts in the test's own folders."""

from __future__ import annotations

import os
import stat

import pytest

from nsprof.host import tools
from nsprof.host.tools import find_ncu


def _program(path, body: str = "exit 0") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("entry", ["", ".", "bin"])
def test_a_tool_found_only_through_an_empty_or_relative_path_entry_is_not_taken(tmp_path, monkeypatch, entry):
    _program(tmp_path / "ncu")
    _program(tmp_path / "bin" / "ncu")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NSPROF_NCU", raising=False)
    monkeypatch.setattr(tools, "_NCU_GLOBS", ())
    monkeypatch.setenv("PATH", f"/nonexistent-bin{os.pathsep}{entry}")
    assert find_ncu(required=False) is None


def test_a_tool_on_an_absolute_path_entry_is_found_by_its_absolute_path(tmp_path, monkeypatch):
    _program(tmp_path / "bin" / "ncu")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NSPROF_NCU", raising=False)
    monkeypatch.setenv("PATH", f"{os.pathsep}{tmp_path / 'bin'}")
    found = find_ncu(required=False)
    assert found is not None and found.path == tmp_path / "bin" / "ncu" and found.path.is_absolute()


def test_a_relative_tool_variable_names_the_file_it_was_checked_as(tmp_path, monkeypatch):
    _program(tmp_path / "ncu")
    _program(tmp_path / "elsewhere" / "ncu")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NSPROF_NCU", "ncu")
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    found = find_ncu()
    assert found.path == tmp_path / "ncu" and found.path.is_absolute()


def test_a_folder_at_an_install_path_is_no_tool(tmp_path, monkeypatch):
    (tmp_path / "cuda-13.0" / "bin" / "ncu").mkdir(parents=True)
    _program(tmp_path / "cuda-12.4" / "bin" / "ncu")
    monkeypatch.delenv("NSPROF_NCU", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent-bin")
    monkeypatch.setattr(tools, "_NCU_GLOBS", (str(tmp_path / "cuda-*" / "bin" / "ncu"),))
    assert find_ncu().path == tmp_path / "cuda-12.4" / "bin" / "ncu"


@pytest.mark.parametrize(
    "printed",
    [
        "echo 'Unable to determine the device handle for GPU0000:01:00.0: Unknown Error'",
        r"printf '\377\376garbage\n'",
    ],
)
def test_doctor_says_in_one_line_what_an_odd_nvidia_smi_printed(tmp_path, monkeypatch, printed):
    from nsprof.doctor import gpu_check
    from nsprof.host.gpu import _smi_gpus

    _program(tmp_path / "bin" / "nvidia-smi", printed)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    check = gpu_check()
    assert not check.ok and "nvidia-smi" in check.detail and "\n" not in check.detail
    _smi_gpus.cache_clear()
    try:
        assert _smi_gpus() == ()  # nothing it could read: no GPU named, no traceback
    finally:
        _smi_gpus.cache_clear()


def test_a_tool_version_that_is_not_text_is_read_as_far_as_it_goes(tmp_path):
    _program(tmp_path / "ncu", r"printf 'NVIDIA \377 Nsight Compute 2025.3.1\n'")
    assert tools.tool_version(tmp_path / "ncu").endswith("Nsight Compute 2025.3.1")


def test_doctor_reads_torch_from_what_it_prints_not_its_warnings(tmp_path, monkeypatch):
    from nsprof.doctor import torch_check

    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "torch.py").write_text(
        "import sys\nprint('UserWarning: a warning of the library at import', file=sys.stderr)\n"
        "__version__ = '9.9'\nclass cuda:\n    is_available = staticmethod(lambda: True)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(fake))
    check = torch_check()
    assert check.ok and check.detail == "9.9, CUDA available: True", check.detail
