"""Environment faults, as users meet them: no GPU, no tool, counters not permitted, a broken
nsys importer, a full disk. Each ends in one clear line and a non-zero exit status.

Real child processes (`python -m nsprof ...`) with stand-in tools: small shell scripts named
ncu / nsys that print what the real tool prints in that situation and run the worker
command nsprof hands them (everything from the interpreter before `-c ... nsprof.worker`), so
the session logic runs for real on the CPU target tests/targets/faulty_cpu.py.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, run_nsprof, running, wait_for

from nsprof.drivers.ncu import PERMISSION_FIX

TARGET = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":space"
# Two configs that run cleanly, one rep, direct launches only (graph mode needs CUDA).
QUICK = ["--mode", "direct", "--configs", "0,2", "--reps", "1", "--warmup", "0", "--timeout", "30"]

# Shell: skip the profiler's own arguments up to the worker command, remembering the report
# path (ncu --export BASE, nsys --output BASE).
FIND_WORKER = """out=""
while [ $# -gt 0 ] && ! { [ "$2" = "-c" ] && [ "$4" = "nsprof.worker" ]; }; do
  case "$1" in --export|--output) out="$2" ;; esac
  shift
done
"""


def fake_tool(folder: Path, name: str, before: str = "", after: str = "", status: int = 0) -> Path:
    """An executable `name` in `folder`: prints `before`, runs the worker, then `after`."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text(
        f"#!/bin/sh\n# stand-in for {name} (tests/test_env_faults.py)\n"
        f'{FIND_WORKER}{before}\n"$@"\n{after}\nexit {status}\n'
    )
    tool.chmod(0o755)
    return tool


def bare_env(tmp_path: Path, **extra: str) -> dict[str, str | None]:
    """No NSPROF_NCU/NSYS, a PATH holding only tmp_path/bin (no nvidia-smi, ncu or nsys from
    the machine), temporary folders under tmp_path (run_nsprof's env: None removes a variable)."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {
        "NSPROF_NCU": None,
        "NSPROF_NSYS": None,
        "NSPROF_DEBUG": None,
        "PATH": str(tmp_path / "bin"),
        "TMPDIR": str(tmp_path / "tmp"),
        **extra,
    }


def one_error_line(result: subprocess.CompletedProcess, label: str | None = None) -> str:
    """Exit status 2 and exactly one error line on stderr, no traceback; the line.

    `label`: the progress bar's label, which click prints once on a non-terminal stderr.
    """
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("nsprof: error: ")]
    assert len(errors) == 1, result.stderr
    assert all(line in errors or line.strip() == label for line in lines), result.stderr
    return errors[0]


def tool_on_machine(name: str, env: dict[str, str], monkeypatch) -> bool:
    """Whether nsprof would still find `name` (an install folder outside PATH, on a GPU box)."""
    from nsprof.host.tools import find_ncu, find_nsys

    for key in ("PATH", "NSPROF_NCU", "NSPROF_NSYS"):
        if env.get(key) is not None:
            monkeypatch.setenv(key, env[key])
        else:
            monkeypatch.delenv(key, raising=False)
    return (find_ncu if name == "ncu" else find_nsys)(required=False) is not None


# --- no GPU --------------------------------------------------------------------------------


def test_doctor_without_gpu_says_so(tmp_path):
    result = run_nsprof("doctor", env=bare_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    gpu = next(line for line in result.stdout.splitlines() if " GPU " in line)
    assert gpu.startswith("[FAIL]") and "no NVIDIA driver here" in gpu
    assert result.stdout.strip().splitlines()[-1] == "[FAIL] verdict   no ground truth available here"


def test_doctor_with_a_broken_driver_says_so(tmp_path):
    # nvidia-smi is there but cannot reach the driver (module not loaded, GPU fell off the bus).
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn'\"'\"'t communicate with the "
        "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.'\nexit 9\n"
    )
    smi.chmod(0o755)
    result = run_nsprof("doctor", env=bare_env(tmp_path))
    assert result.returncode == 1, result.stderr
    gpu = next(line for line in result.stdout.splitlines() if " GPU " in line)
    assert gpu.startswith("[FAIL]") and "couldn't communicate with the NVIDIA driver" in gpu


# --- no ncu / no nsys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "message"),
    [("ncu", "ncu (Nsight Compute) not found"), ("nsys", "nsys (Nsight Systems) not found")],
)
def test_profile_without_the_tool_is_one_line(tmp_path, monkeypatch, backend, message):
    env = bare_env(tmp_path)
    if tool_on_machine(backend, env, monkeypatch):
        pytest.skip(f"{backend} is installed in a standard folder here")
    line = one_error_line(run_nsprof("profile", TARGET, "--backend", backend, *QUICK, env=env))
    assert line.startswith(f"nsprof: error: {message}")
    assert not list((tmp_path / "tmp").iterdir())  # nothing started, nothing left behind


@pytest.mark.parametrize("variable", ["NSPROF_NCU", "NSPROF_NSYS"])
def test_tool_variable_pointing_nowhere_is_one_line(tmp_path, variable):
    missing = tmp_path / "no such folder" / "tool"
    backend = "ncu" if variable == "NSPROF_NCU" else "nsys"
    line = one_error_line(
        run_nsprof(
            "profile",
            TARGET,
            "--backend",
            backend,
            *QUICK,
            env=bare_env(tmp_path, **{variable: str(missing)}),
        )
    )
    assert line == f"nsprof: error: {variable}={missing} is not an executable file"


# --- the tool runs, but cannot do its job --------------------------------------------------


def test_counters_not_permitted(tmp_path):
    # ncu prints ERR_NVGPUCTRPERM, lets the program run unprofiled and writes no report.
    fake_tool(
        tmp_path / "bin",
        "ncu",
        before=(
            "echo '==PROF== Connected to process 4242'\n"
            "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
            "Performance Counters on the target device 0. For instructions on enabling permissions and to get "
            "more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM'"
        ),
        after="echo '==PROF== Disconnected from process 4242'",
    )
    line = one_error_line(
        run_nsprof("profile", TARGET, "--backend", "ncu", *QUICK, env=bare_env(tmp_path)), "ncu"
    )
    assert PERMISSION_FIX in line
    assert "ncu wrote no report" in line


def test_nsys_importer_missing_a_library(tmp_path):
    # nsys leaves only the raw .qdstrm when its QdstrmImporter cannot start (a missing .so).
    bin_dir = tmp_path / "bin"
    fake_tool(
        bin_dir,
        "nsys",
        after=(
            ': > "$out.qdstrm"\n'
            "echo 'Generating '\"$out\"'.qdstrm'\n"
            "echo 'Importer error status: Importation failed.'"
        ),
    )
    importer = bin_dir / "QdstrmImporter"
    # The loader's line is not the last one: nsprof must find it anywhere in the output.
    importer.write_text(
        "#!/bin/sh\necho 'Processing...'\n"
        'echo "$0: error while loading shared libraries: libdw.so.1: cannot open shared object '
        "file: No such file or directory\" >&2\necho 'Import failed.' >&2\nexit 127\n"
    )
    importer.chmod(0o755)
    line = one_error_line(
        run_nsprof("profile", TARGET, "--backend", "nsys", *QUICK, env=bare_env(tmp_path)), "nsys"
    )
    assert "QdstrmImporter cannot run: shared library libdw.so.1 is missing" in line


def test_nsys_importer_that_hangs_is_killed_after_its_bound(tmp_path):
    # nsys leaves the .qdstrm; the importer nsprof then runs never returns, and has a helper of its
    # own (a process group to kill). NSPROF_CONVERT_TIMEOUT_S: a tiny bound instead of the size's.
    bin_dir = tmp_path / "bin"
    fake_tool(
        bin_dir,
        "nsys",
        after=("printf qdstrm > \"$out.qdstrm\"\necho 'Importer error status: Importation failed.'"),
    )
    helper_pid = tmp_path / "helper.pid"
    importer = bin_dir / "QdstrmImporter"
    sleep = shlex.quote(shutil.which("sleep"))  # PATH holds only the stand-ins
    importer.write_text(f"#!/bin/sh\n{sleep} 3600 &\necho $! > {shlex.quote(str(helper_pid))}\nwait\n")
    importer.chmod(0o755)
    work = tmp_path / "wd"
    try:
        line = one_error_line(
            run_nsprof(
                "profile",
                TARGET,
                "--backend",
                "nsys",
                *QUICK,
                "--work-dir",
                str(work),
                env=bare_env(tmp_path, NSPROF_CONVERT_TIMEOUT_S="1"),
            ),
            "nsys",
        )
        qdstrm = work / "part0.qdstrm"
        assert "QdstrmImporter did not finish within 1 s ($NSPROF_CONVERT_TIMEOUT_S); killed it." in line, (
            line
        )
        assert f"{qdstrm} is kept, nothing measured is lost" in line, line
        assert qdstrm.read_text() == "qdstrm"  # kept as nsys left it, for a later import
        assert not (work / "part0.nsys-rep").exists()
        helper = int(helper_pid.read_text())
        assert wait_for(lambda: not running(helper)), "the importer's own child outlived the kill"
    finally:
        if helper_pid.exists() and running(int(helper_pid.read_text())):
            os.kill(int(helper_pid.read_text()), 9)


@pytest.mark.parametrize("report", ["none", "truncated"])
def test_disk_full(tmp_path, report):
    # The disk fills up while ncu writes the report: none at all, or a cut-off one.
    write = ": " if report == "none" else "printf 'NVR\\000\\002\\000\\000\\000' > \"$out.ncu-rep\"\n"
    fake_tool(
        tmp_path / "bin",
        "ncu",
        after=(
            f"{write}\n"
            "echo '==ERROR== Failed to save report to '\"$out\"'.ncu-rep: No space left on device' >&2"
        ),
        status=1,
    )
    line = one_error_line(
        run_nsprof("profile", TARGET, "--backend", "ncu", *QUICK, env=bare_env(tmp_path)), "ncu"
    )
    assert "is full (==ERROR== Failed to save report" in line and "No space left on device" in line
    assert "--work-dir" in line  # the way out


def test_fake_tools_run_the_real_worker(tmp_path):
    """The stand-ins above exercise the session for real: here one passes the worker's
    status file through, and the run ends as a clean one would, minus the report."""
    marker = tmp_path / "argv.txt"
    fake_tool(tmp_path / "bin", "ncu", before=f'echo "$@" > {shlex.quote(str(marker))}')
    result = run_nsprof("profile", TARGET, "--backend", "ncu", *QUICK, env=bare_env(tmp_path))
    argv = marker.read_text().split()
    assert argv[1] == "-c" and argv[-2:-1] == ["nsprof.worker"] and argv[-1].endswith(".job.json")
    assert "ncu wrote no report: worker exited with status 0" in one_error_line(result, "ncu")
