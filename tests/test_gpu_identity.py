"""Which GPU: every measurement locks the GPU it runs on, by its UUID, in one machine-wide folder,
and results are keyed by that GPU. Real child processes; a stand-in nvidia-smi lists two GPUs with
UUIDs made up for this test, so that no lock file here is one a real nsprof could use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from nsprof.store import ResultStore

ROOT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).parent / "standins.py"

CPU_TARGET = textwrap.dedent("""
    from nsprof.space import Space
    space = Space(name="cpu", configs=[{"ns": 2000}, {"ns": 1000}], build=lambda c: (lambda: None), device="cpu")
""")


@pytest.fixture
def two_gpus(tmp_path):
    """A PATH whose nvidia-smi lists GPU 0 (an H200) and GPU 1 (an H100), with fresh UUIDs."""
    uuids = [f"GPU-{uuid.uuid4()}", f"GPU-{uuid.uuid4()}"]
    names = ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        gpus = {list(zip(range(2), uuids, names))!r}
        args = sys.argv[1:]
        if "-i" in args:
            gpus = [g for g in gpus if str(g[0]) == args[args.index("-i") + 1]]
        query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), "")
        if "-L" in args:
            for index, uid, name in gpus:
                print(f"GPU {{index}}: {{name}} (UUID: {{uid}})")
        for index, uid, name in gpus if query else []:
            fields = {{"index": str(index), "uuid": uid, "name": name}}
            print(", ".join(fields.get(q, "N/A") for q in query.split(",")))
    """)
    )
    smi.chmod(0o755)
    yield {"path": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "uuids": uuids, "names": names}
    for uid in uuids:  # the machine-wide folder: leave nothing of this test's there
        (Path("/tmp") / f"nsprof-{uid}.lock").unlink(missing_ok=True)


HOLD = (
    "import sys, time\nfrom nsprof.host.lock import gpu_lock\nwith gpu_lock(int(sys.argv[1])) as p:\n"
    "    print(p, flush=True)\n    time.sleep(120)\n"
)
TRY = (
    "import sys\nfrom nsprof.host.lock import gpu_lock\nwith gpu_lock(int(sys.argv[1])) as p:\n    print(p)\n"
)


def _env(tmp_path, two_gpus, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NSPROF_LOCK_DIR", "CUDA_VISIBLE_DEVICES")}
    env.update(PATH=two_gpus["path"], PYTHONPATH=str(ROOT), **extra)
    return env


def test_one_gpu_is_one_lock_whatever_the_job_calls_it(tmp_path, two_gpus):
    # Two batch jobs on one node, each with its own $TMPDIR; the first sees physical GPU 1 as
    # cuda:0 (CUDA_VISIBLE_DEVICES=1), the second as cuda:1.
    (tmp_path / "job1").mkdir()
    (tmp_path / "job2").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(tmp_path, two_gpus, TMPDIR=str(tmp_path / "job1"), CUDA_VISIBLE_DEVICES="1"),
    )
    try:
        held = holder.stdout.readline().strip()
        assert held == f"/tmp/nsprof-{two_gpus['uuids'][1]}.lock"
        second = subprocess.run(
            [sys.executable, "-c", TRY, "1"],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(tmp_path, two_gpus, TMPDIR=str(tmp_path / "job2")),
        )
        assert second.returncode != 0
        assert "GpuBusy" in second.stderr and two_gpus["uuids"][1] in second.stderr
        other = subprocess.run(
            [sys.executable, "-c", TRY, "0"],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(tmp_path, two_gpus, TMPDIR=str(tmp_path / "job2")),
        )
        assert other.returncode == 0, other.stderr  # GPU 0 is free
    finally:
        holder.kill()
        holder.wait()


def test_results_are_keyed_by_the_gpu_that_ran(tmp_path, two_gpus):
    (tmp_path / "cpu.py").write_text(CPU_TARGET)
    env = _env(tmp_path, two_gpus, CUDA_VISIBLE_DEVICES="1", NSPROF_LOCK_DIR=str(tmp_path / "locks"))
    done = subprocess.run(
        [
            sys.executable,
            str(STANDINS),
            "tune",
            "cpu.py:space",
            "--backend",
            "ncu",
            "--mode",
            "direct",
            "--store",
            "r.sqlite",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    with ResultStore(tmp_path / "r.sqlite") as store:
        rows, runs = store.frame(), store.runs()
    assert set(rows["gpu"]) == {f"NVIDIA H100 80GB HBM3 {two_gpus['uuids'][1]}"}
    assert runs["gpu_uuid"].tolist() == [two_gpus["uuids"][1]]


@pytest.mark.parametrize(
    "command",
    [
        ["tune", "--backend", "event", "--no-store"],
        ["tune", "--backend", "ncu", "--prescreen", "graph", "--no-store"],
        ["validate", "--truth", "ncu"],
        ["profile", "--backend", "ncu"],
    ],
)
def test_every_command_that_measures_takes_the_gpu_lock(tmp_path, two_gpus, command):
    (tmp_path / "cpu.py").write_text(CPU_TARGET)
    env = _env(tmp_path, two_gpus, NSPROF_LOCK_DIR=str(tmp_path / "locks"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "0"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        holder.stdout.readline()
        name, *options = command
        busy = subprocess.run(
            [sys.executable, str(STANDINS), name, "cpu.py:space", *options],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
        assert busy.returncode == 2, busy.stderr
        assert (
            busy.stderr.strip()
            .splitlines()[-1]
            .startswith(
                f"nsprof: error: GPU 0 (NVIDIA H200, {two_gpus['uuids'][0]}) is being profiled by another nsprof (pid "
                f"{holder.pid}"
            )
        ), busy.stderr
        # --wait: blocks while the GPU is held, then measures
        waiting = subprocess.Popen(
            [sys.executable, str(STANDINS), name, "cpu.py:space", *options, "--wait", "--work-dir", "wd"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        time.sleep(2)
        assert waiting.poll() is None, waiting.communicate()
        # no worker started on the device (a worker started ahead, importing the target, may wait there)
        began = [
            path
            for path in (tmp_path / "wd").rglob("*.status")
            if _on_device(path.read_text(errors="replace"))
        ]
        assert not began, "measuring began while the GPU was held"
        holder.kill()
        holder.wait()
        waiting.communicate(timeout=300)
        assert list((tmp_path / "wd").rglob("*.status")), "it never measured after the GPU came free"
    finally:
        holder.kill()
        holder.wait()


def _on_device(status: str) -> bool:
    """Whether a worker's status says it initialised the device or began a config."""
    from nsprof.worker.protocol import parse_status

    read = parse_status(status)
    return read.device is not None or bool(read.started)


TURN = (
    "from nsprof.host.lock import open_lock_file\nimport nsprof.host.lock as lock\nopened = []\n"
    "lock.open_lock_file = lambda path: (opened.append(path), open_lock_file(path))[1]\n"
    "from nsprof.tune.turn import resume_turn\nwith resume_turn():\n    print(opened[0])\n"
)


@pytest.mark.parametrize("visible", ["0", "1"])
def test_a_resumes_turn_is_the_turn_of_the_gpu_it_runs_on(tmp_path, two_gpus, visible):
    """Resumes on two GPUs of one machine do not queue behind each other: the turn is a file beside
    the lock of the GPU that CUDA_VISIBLE_DEVICES names, as the GPU lock is."""
    done = subprocess.run(
        [sys.executable, "-c", TURN],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path, two_gpus, CUDA_VISIBLE_DEVICES=visible),
    )
    try:
        assert done.returncode == 0, done.stderr
        uid = two_gpus["uuids"][int(visible)]
        assert done.stdout.strip() == f"/tmp/nsprof-{uid}.lock.resume"
    finally:
        for uid in two_gpus["uuids"]:
            (Path("/tmp") / f"nsprof-{uid}.lock.resume").unlink(missing_ok=True)
