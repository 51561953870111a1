"""A run whose every config failed to compile leaves nsys a report with no kernel table (seen
on the H200 with examples/gemm_tilelang.py's configs 0 and 1: "No valid warp partition"). The
result is the configs' compile failures, each with its error, and exit status 2 as for any run that
measured nothing: not "no CUDA kernel table", which says nothing of why.

The stand-in nsys (tests/standins.py's StatusDriver: lossy, and a report without a config in it is
a ReportError, as a real report without a kernel table is) runs the real worker on
tests/targets/compile_ahead_faults.py:failing, whose two configs fail to compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

from nsprof.drivers import registry  # noqa: E402
from nsprof.drivers.nsys import NsysDriver  # noqa: E402

TESTS = Path(__file__).parent
TARGET = str(TESTS / "targets" / "compile_ahead_faults.py") + ":failing"
SIMULATED = "compile failed: ValueError: no valid tile (simulated)"


class NsysLike(StatusDriver):
    labels_like = NsysDriver

    def __init__(self) -> None:
        super().__init__(lossy=True, empty_is_error=True, config_ns=False)


def install() -> None:
    registry.register("nsys", NsysLike)


@pytest.fixture
def standin_nsys(tmp_path, monkeypatch):
    monkeypatch.setenv("NSPROF_TEST_AHEAD_DIR", str(tmp_path))
    install()
    yield
    registry.register("nsys", "nsprof.drivers.nsys:NsysDriver")


def test_every_config_failing_to_compile_is_the_result_not_the_empty_report(standin_nsys, tmp_path):
    from nsprof.errors import NsprofError
    from nsprof.profile import check_measured, profile_result
    from nsprof.settings import ProfileSettings

    result = profile_result(
        TARGET,
        ProfileSettings(
            backend="nsys", modes=("direct",), reps=2, warmup=0, timeout_s=60, work_dir=tmp_path / "work"
        ),
    )
    assert set(result.failures) == {0, 1}
    assert all(SIMULATED in reason for reason in result.failures.values()), result.failures
    with pytest.raises(NsprofError, match=r"no config was measured: all 2 failed \(config 0: compile failed"):
        check_measured(result.frame)


def test_the_command_line_says_so_with_exit_status_2(tmp_path):
    script = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "from test_no_kernels_all_failed import install\n"
        "install()\n"
        "from nsprof.cli import main\n"
        "sys.argv[0] = 'nsprof'\n"
        "main()\n"
    )
    env = {
        **os.environ,
        "NSPROF_TEST_AHEAD_DIR": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "profile",
            TARGET,
            "--backend",
            "nsys",
            "--configs",
            "0,1",
            "--mode",
            "direct",
            "--reps",
            "2",
            "--timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "no CUDA kernel table" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert (
        f"nsprof: config 0 failed: {SIMULATED}" in lines and f"nsprof: config 1 failed: {SIMULATED}" in lines
    )
    assert lines[-1].startswith(f"nsprof: error: no config was measured: all 2 failed (config 0: {SIMULATED}")
