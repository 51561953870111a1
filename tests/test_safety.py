"""What nsprof touches: reports only read, no shell, no unpickling, any file name, and no
temporary folders left behind after a clean run."""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import FIXTURES

from nsprof.errors import ToolFailed
from nsprof.reports import read_report
from nsprof.session import run_session
from nsprof.settings import ProfileSettings

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "nsprof"
TARGET = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":space"
# A folder and file names that break naive quoting, URIs and encodings.
ODD_FOLDER = "dir with spaces, 'quotes\" & ünïcödé ✓"
ODD_STEM = 'it\'s a "report" #1 ?x=y ü'


def python_sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


# --- reports are only read ----------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.mark.parametrize("read_only", ["file", "folder"])
def test_nsys_reader_never_writes_the_report(tmp_path, read_only):
    folder = tmp_path / "reports"
    folder.mkdir()
    report = folder / "fixture.sqlite"
    shutil.copy2(FIXTURES / "fixture.sqlite", report)
    report.chmod(stat.S_IRUSR | stat.S_IRGRP)
    if read_only == "folder":
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    before = _snapshot(folder)
    try:
        frame = read_report(report)
        again = read_report(report)  # a second open sees the same untouched file
        after = _snapshot(folder)
    finally:
        folder.chmod(stat.S_IRWXU)
    assert len(frame) == len(again) == 65
    # Same bytes, same mtime, and no journal/-wal/-shm file appeared beside it.
    assert after == before


def test_every_parser_leaves_its_input_alone(tmp_path, ncu_rep_dir):
    pytest.importorskip("ncu_report")
    inputs = [
        FIXTURES / "fixture_node_raw.csv",
        FIXTURES / "fixture_node_details.csv",
        ncu_rep_dir / "fixture_node.ncu-rep",
    ]
    for source in inputs:
        copy = tmp_path / source.name
        shutil.copy2(source, copy)
        copy.chmod(stat.S_IRUSR)
        before = _snapshot(tmp_path)
        assert len(read_report(copy)) == 27
        assert _snapshot(tmp_path) == before, source.name


# --- no shell, no unpickling ---------------------------------------------------------------


def test_no_shell_strings():
    """Commands are argument lists: no shell=True, os.system, os.popen or getoutput anywhere."""
    found = []
    for path in python_sources():
        text = path.read_text()
        if "shell=True" in text:
            found.append(f"{path.relative_to(REPO)}: shell=True")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            if name in (
                "os.system",
                "os.popen",
                "subprocess.getoutput",
                "subprocess.getstatusoutput",
                "system",
                "popen",
                "getoutput",
                "getstatusoutput",
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}()")
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                ):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: shell=...")
    assert not found, found


def test_no_unpickling():
    """Nothing nsprof reads can run code: no pickle (or its wrappers), no read_pickle, no
    numpy.load(allow_pickle=True), no torch.load."""
    found = []
    for path in python_sources():
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                for module in modules:
                    if module.split(".")[0] in (
                        "pickle",
                        "cPickle",
                        "_pickle",
                        "dill",
                        "cloudpickle",
                        "shelve",
                        "joblib",
                        "marshal",
                    ):
                        found.append(f"{where}:{node.lineno}: import {module}")
            if isinstance(node, ast.ImportFrom) and any(a.name == "read_pickle" for a in node.names):
                found.append(f"{where}:{node.lineno}: import read_pickle")
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if (
                    name.endswith("read_pickle")
                    or name in ("torch.load", "np.load", "numpy.load")
                    and any(k.arg == "allow_pickle" for k in node.keywords)
                    or name == "torch.load"
                ):
                    found.append(f"{where}:{node.lineno}: {name}()")
    assert not found, found


def test_the_scans_find_what_they_look_for(tmp_path, monkeypatch):
    """The two scans above are not vacuous: they flag a planted offender."""
    fake = tmp_path / "nsprof"
    fake.mkdir()
    (fake / "bad.py").write_text(
        "import pickle\nimport os\nimport numpy as np\nimport subprocess\n"
        "os.system('ls')\nsubprocess.run('ls', shell=True)\n"
        "np.load('x.npy', allow_pickle=True)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    with pytest.raises(AssertionError, match="os.system"):
        test_no_shell_strings()
    with pytest.raises(AssertionError, match="import pickle"):
        test_no_unpickling()


# --- file names ----------------------------------------------------------------------------


def test_odd_paths_work_for_every_report_kind(tmp_path, ncu_rep_dir):
    """Spaces, quotes, '#', '?' and non-ASCII in folder and file names, every kind, via the CLI."""
    pytest.importorskip("ncu_report")
    folder = tmp_path / ODD_FOLDER
    folder.mkdir()
    sources = {
        ".csv": FIXTURES / "fixture_node_raw.csv",
        " details.csv": FIXTURES / "fixture_node_details.csv",
        ".sqlite": FIXTURES / "fixture.sqlite",
        ".ncu-rep": ncu_rep_dir / "fixture_node.ncu-rep",
        ".nsys-rep": FIXTURES / "fixture.nsys-rep",
    }
    # .nsys-rep is exported by nsys: a stand-in copies the fixture's own export to -o's path.
    nsys = tmp_path / "bin" / "nsys"
    nsys.parent.mkdir()
    nsys.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
        f'cp {shlex.quote(str(FIXTURES / "fixture.sqlite"))} "$out"\n'
    )
    nsys.chmod(0o755)
    env = {
        **os.environ,
        "NSPROF_NSYS": str(nsys),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    procs = {}
    for suffix, source in sources.items():
        path = folder / f"{ODD_STEM}{suffix}"
        shutil.copy(source, path)
        procs[suffix] = (
            path,
            subprocess.Popen(
                [sys.executable, "-m", "nsprof", "analyze", str(path), "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            ),
        )
    for suffix, (path, proc) in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (suffix, err)
        rows = json.loads(out)
        assert rows and {row["file"] for row in rows} == {str(path)}, suffix
        assert all(row["duration_ns"] > 0 for row in rows), suffix
    # the .nsys-rep was exported into nsprof's own folder: nothing new beside the reports
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{ODD_STEM}{suffix}" for suffix in sources)


# --- temporary folders ---------------------------------------------------------------------


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's folder redirected, so that other processes' nsprof-* folders do not count."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _settings(**kwargs) -> ProfileSettings:
    return ProfileSettings(backend="none", modes=("direct",), reps=1, warmup=0, timeout_s=3, **kwargs)


def test_clean_run_removes_its_temporary_folder(private_tmp):
    result = run_session(TARGET, 9, _settings(), config_ids=[0, 2, 4])
    assert not result.failures
    assert result.work_dir is None and result.reports == []
    assert list(private_tmp.iterdir()) == []


def test_faulty_run_keeps_its_temporary_folder_and_names_it(private_tmp):
    result = run_session(TARGET, 9, _settings(), config_ids=[0, 1, 2])
    assert set(result.failures) == {1}
    assert result.work_dir is not None and result.work_dir.is_dir()
    assert result.work_dir.parent == private_tmp and result.work_dir.name.startswith("nsprof-")
    assert "illegal memory access" in (result.work_dir / "part0.log").read_text()


def test_failed_session_names_the_kept_folder(private_tmp):
    with pytest.raises(ToolFailed) as info:
        run_session(str(private_tmp / "missing.py") + ":space", 1, _settings())
    kept = [p for p in private_tmp.iterdir() if p.name.startswith("nsprof-")]
    assert len(kept) == 1 and str(kept[0]) in str(info.value)


def test_a_named_work_dir_is_always_kept(tmp_path, private_tmp):
    result = run_session(TARGET, 9, _settings(work_dir=tmp_path / "mine"), config_ids=[0])
    assert result.work_dir == tmp_path / "mine" and (tmp_path / "mine" / "part0.log").exists()
    assert list(private_tmp.iterdir()) == []


def test_a_profile_result_follows_the_folder(private_tmp):
    from nsprof.profile import profile_result

    clean = profile_result(TARGET, _settings(), config_ids=[0, 2])
    assert clean.work_dir is None and clean.reports == []
    faulty = profile_result(TARGET, _settings(), config_ids=[0, 5])
    assert faulty.work_dir and Path(faulty.work_dir).is_dir()
    assert set(faulty.failures) == {5}
