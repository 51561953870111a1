"""The Python children nsprof starts never import nsprof's own modules, or torch, from the folder nsprof
runs in: a folder another user may write (/tmp, shared scratch) could hold an `nsprof` or a `torch.py` of
theirs, run as this user (`python -m` and `-c` put the current folder first). A target named as a module
of that folder is still found there, as before. Real child processes: the stand-in profilers' workers,
the target's describing child, the compile step, doctor's torch check."""

from __future__ import annotations

import os
import sys

from conftest import FIXTURES, run_nsprof

PLANT = "import pathlib, sys\npathlib.Path({marker!r}).write_text(' '.join(sys.argv))\n"


def _planted(folder, marker) -> None:
    """An `nsprof` package (its worker, compile step, space view and feed-back) and a torch of the
    other user's in `folder`, each leaving `marker` when imported."""
    code = PLANT.format(marker=str(marker))
    for relative in (
        "nsprof/__init__.py",
        "nsprof/worker/__init__.py",
        "nsprof/worker/__main__.py",
        "torch.py",
    ):
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    for module in ("space_view", "feedback", "worker/compile"):
        (folder / "nsprof" / f"{module}.py").write_text(code)


TARGET = """
import nsprof.space
configs = [{"ns": 1000.0 + 100 * i} for i in range(3)]
space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
"""


def test_a_planted_nsprof_in_the_current_folder_is_never_imported_and_a_module_target_still_is(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    marker = tmp_path / "planted-code-ran"
    _planted(shared, marker)
    (shared / "my_kernels.py").write_text(TARGET)
    for target in ("my_kernels:space", str(shared / "my_kernels.py") + ":space"):
        done = run_nsprof(
            "tune", target, "--backend", "nsys", "--mode", "direct", "--reps", "1", "--no-tuner-pick",
            "--no-feed-back", "--work-dir", tmp_path / "w", cwd=shared, standins=True, in_process=True,
        )  # fmt: skip
        assert not marker.exists(), f"{target}: {marker.read_text()}"
        assert done.returncode == 0, done.stderr
        assert "winner" in done.stdout or "best" in done.stdout, done.stdout


def test_a_target_file_elsewhere_never_imports_a_module_planted_in_the_current_folder(tmp_path):
    """A file target imports as `python file.py` would: its own folder first, not the current one, where
    another user's `numpy.py` would run as this user in place of the one the target asked for."""
    shared, mine = tmp_path / "shared", tmp_path / "mine"
    shared.mkdir()
    mine.mkdir()
    marker = tmp_path / "planted-code-ran"
    (shared / "plantedmod.py").write_text(PLANT.format(marker=str(marker)))
    (mine / "kernels.py").write_text("try:\n    import plantedmod\nexcept ImportError:\n    pass\n" + TARGET)
    done = run_nsprof(
        "tune", str(mine / "kernels.py") + ":space", "--backend", "nsys", "--mode", "direct", "--reps", "1",
        "--no-tuner-pick", "--no-feed-back", "--no-store", "--work-dir", tmp_path / "w", cwd=shared, standins=True,
        in_process=True,
    )  # fmt: skip
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, done.stderr


def test_a_file_target_that_needs_a_package_of_the_current_folder_says_how_to_get_it(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "t.py").write_text("import mypkg\n" + TARGET)
    done = run_nsprof("tune", "examples/t.py:space", "--backend", "nsys", "--no-store", cwd=tmp_path, standins=True,
                      in_process=True)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert "No module named 'mypkg'" in lines[0] and "PYTHONPATH=." in lines[0], lines[0]


def test_doctor_checks_the_installed_torch_not_one_in_the_current_folder(tmp_path, monkeypatch):
    from nsprof.doctor import torch_check

    marker = tmp_path / "planted-code-ran"
    _planted(tmp_path, marker)
    monkeypatch.chdir(tmp_path)
    torch_check()  # a GPU machine's doctor runs it: `python -c "import torch ..."`
    assert not marker.exists(), marker.read_text()


def test_the_worker_command_drops_the_current_folder_before_any_import(tmp_path):
    from nsprof.host.children import python_module

    marker = tmp_path / "planted-code-ran"
    _planted(tmp_path, marker)
    code = python_module(sys.executable, "nsprof.worker")
    import subprocess

    done = subprocess.run(code, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert not marker.exists()
    assert done.returncode == 2 and "usage: python -m nsprof.worker" in done.stderr
    assert os.path.isabs(code[0]) and FIXTURES.exists()


def test_a_user_who_asked_python_for_a_safe_path_gets_no_current_folder_back(tmp_path):
    import subprocess

    if sys.version_info < (3, 11):
        import pytest

        pytest.skip("PYTHONSAFEPATH is Python 3.11's")
    (tmp_path / "my_kernels.py").write_text(TARGET)
    code = "from nsprof.space import load_target\nload_target('my_kernels:space')\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )  # fmt: skip
    assert done.returncode != 0 and "No module named 'my_kernels'" in done.stderr, done.stderr[-500:]
