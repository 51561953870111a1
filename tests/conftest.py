"""Shared fixtures, and the one place that decides whether GPU tests run."""

from __future__ import annotations

import functools
import lzma
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).parent / "standins.py"


@functools.cache
def gpu_available() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def pytest_configure(config):
    """Every child process of a test imports this checkout's nsprof, whatever its cwd: the checkout
    comes first on PYTHONPATH for the whole run (one environment for all, so that a server and the
    clients a test starts find each other fit)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if paths[:1] != [str(REPO)]:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *paths])
    # nsprof keeps the temporary folder whose logs explain a failure (and a SIGKILLed nsprof cannot
    # remove its own): the suite's go to a folder of the run's own, removed at its end, not into the
    # machine's $TMPDIR. Child processes inherit it; tempfile reads $TMPDIR once, hence the reset.
    config._nsprof_tmp = tempfile.mkdtemp(prefix="nsprof-tests-")
    os.environ["TMPDIR"] = config._nsprof_tmp
    tempfile.tempdir = None
    # A suite started as a background job of a script (`pytest ... &`) inherits SIGINT ignored, and
    # so would every nsprof a test starts and then Ctrl-Cs: it would ignore the Ctrl-C, as a Python
    # started so does, and the test hang. As in an interactive run: a KeyboardInterrupt here, and
    # the default (Python's KeyboardInterrupt) in every child.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config):
    folder = getattr(config, "_nsprof_tmp", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_nsprof(
    *args,
    env: dict[str, str | None] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 300,
    standins: bool = False,
    **run_kwargs,
) -> subprocess.CompletedProcess:
    """nsprof's command line in a child process, run to its end: `python -m nsprof ARGS`, or with
    `standins` `python tests/standins.py ARGS` (every ncu and nsys session a stand-in: no tool needed).

    env: variables set over os.environ's (a value None removes one). stdout and stderr are captured, as
    text unless text=False; the other run_kwargs (input, stdin) go to subprocess.run.
    """
    environment = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = str(value)
    program = [str(STANDINS)] if standins else ["-m", "nsprof"]
    run_kwargs.setdefault("text", True)
    return subprocess.run(
        [sys.executable, *program, *map(str, args)],
        capture_output=True,
        env=environment,
        cwd=cwd,
        timeout=timeout,
        **run_kwargs,
    )


def wait_for(predicate, timeout_s: float = 60.0) -> bool:
    """Whether predicate() came true within timeout_s (generous: a busy machine must not fail a test;
    a hang never ends at all), polling every 50 ms."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan killed by a test may wait for PID 1 to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.fixture(autouse=True)
def own_gpu_lock_folder(tmp_path, monkeypatch):
    """Every test gets its own GPU-lock folder: a real nsprof (or another test run) holding the
    machine-wide lock must never make a test wait or fail, and no test may take that lock."""
    folder = tmp_path / "gpu-locks"
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def ncu_rep_dir(tmp_path_factory) -> Path:
    """The .ncu-rep fixtures, decompressed (they are stored xz-compressed: 10 MB -> 0.2 MB)."""
    out = tmp_path_factory.mktemp("ncu_rep")
    for packed in FIXTURES.glob("*.ncu-rep.xz"):
        (out / packed.name[: -len(".xz")]).write_bytes(lzma.decompress(packed.read_bytes()))
    return out
