"""The one-profiler-per-GPU lock, between real processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nsprof.errors import GpuBusy, NsprofError
from nsprof.host.gpu import Gpu, which_gpu
from nsprof.host.lock import gpu_lock, holder_record, lock_path, open_lock_file, record_path

ROOT = Path(__file__).resolve().parents[1]

# Run as a script named "nsprof" so that the holder's command line reads like the real one.
HOLDER = textwrap.dedent("""
    import sys, time
    from nsprof.host.lock import gpu_lock
    hold_s = float(sys.argv[-1])
    with gpu_lock(0):
        print("locked", flush=True)
        time.sleep(hold_s)
""")


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path / "locks"


@pytest.fixture
def holder(tmp_path):
    """Start a process that takes GPU 0's lock and keeps it for hold_s; killed at teardown."""
    script = tmp_path / "nsprof"
    script.write_text(HOLDER)
    started: list[subprocess.Popen] = []

    def start(hold_s: float = 120.0) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, str(script), "tune", "x.py:space", str(hold_s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(child)
        assert child.stdout.readline() == "locked\n", child.stderr.read()
        return child

    yield start
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()


def test_second_acquirer_fails_fast_naming_the_holder(holder):
    child = holder()
    began = time.monotonic()
    with pytest.raises(GpuBusy) as caught:
        with gpu_lock(0):
            pytest.fail("took a lock another process holds")
    assert time.monotonic() - began < 1.0
    message = str(caught.value)
    pattern = (
        rf"GPU 0 is being profiled by another nsprof \(pid {child.pid}, started \d\d:\d\d:\d\d: "
        r"nsprof tune x\.py:space 120\.0\); wait for it or pass --wait"
    )
    assert re.fullmatch(pattern, message), message
    assert isinstance(caught.value, NsprofError)
    assert caught.value.holder["pid"] == child.pid and caught.value.device == 0
    with gpu_lock(1) as path:  # other GPUs are free
        assert path.name == "nsprof-gpu1.lock"


@pytest.mark.parametrize("squatted", [False, True], ids=["", "its record's name squatted"])
def test_a_lock_file_moved_away_by_its_maker_under_a_holder_is_still_busy(holder, lock_dir, squatted):
    """The lock file's maker (another user, in a sticky /tmp) may rename it while nsprof holds it: a new file
    at the name is not a free GPU while the holder still holds the old one, with or without --wait; also
    where something at the name of the holder's record (another user's) kept it from being written there."""
    if squatted:
        record_path(lock_path(0), os.geteuid()).mkdir(parents=True)
    child = holder()
    lock_path(0).rename(lock_dir / "moved-away")
    with pytest.raises(GpuBusy) as caught:
        with gpu_lock(0):
            pytest.fail("took the GPU while the holder of the moved lock file holds it")
    assert caught.value.holder["pid"] == child.pid, caught.value.holder
    with pytest.raises(GpuBusy):
        with gpu_lock(0, wait=True, timeout_s=0.5):
            pytest.fail("took the GPU while the holder of the moved lock file holds it")
    child.kill()
    child.wait(timeout=30)
    with gpu_lock(0):  # its holder gone, the GPU is free
        pass


def test_a_moved_lock_held_by_a_killed_holders_child_is_still_busy(tmp_path, lock_dir):
    """The kernel names the pid that took the flock even after it died, while a child it passed the lock
    to (a profiler) still holds it: moving the file away frees nothing then either."""
    script = tmp_path / "holds_through_a_child.py"
    script.write_text(
        textwrap.dedent("""
        import subprocess, sys, time
        from nsprof.host.lock import gpu_lock, held_fds
        with gpu_lock(0):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=held_fds())
            print(child.pid, flush=True)
            time.sleep(120)
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    child_pid = int(parent.stdout.readline())
    try:
        parent.kill()
        parent.wait(timeout=30)
        lock_path(0).rename(lock_dir / "moved-away")
        with pytest.raises(GpuBusy):
            with gpu_lock(0):
                pytest.fail("took the GPU while the killed holder's child holds the moved lock file")
    finally:
        os.kill(child_pid, signal.SIGKILL)


def test_a_planted_record_of_impossible_numbers_is_ignored(lock_dir):
    lock_dir.mkdir(parents=True, exist_ok=True)
    record_path(lock_path(0), os.geteuid()).write_text('{"pid": 1, "lock": [1180591620717411303424, 5]}')
    (lock_dir / f".{lock_path(0).name}.planted.tmp").write_text('{"pid": 1, "lock": [-1, 5]}')
    with gpu_lock(0):
        pass


def test_wait_takes_the_lock_once_the_holder_lets_go(holder, capfd):
    child = holder(hold_s=1.0)
    began = time.monotonic()
    with gpu_lock(0, wait=True, timeout_s=60) as path:
        waited_s = time.monotonic() - began
        record = holder_record(path)
        assert record["pid"] == os.getpid()
    assert child.wait(timeout=30) == 0
    assert 0.3 < waited_s < 30
    assert capfd.readouterr() == ("", "")  # waiting is silent
    assert holder_record(lock_path(0)) is None  # released: nobody named
    assert not record_path(lock_path(0), os.geteuid()).exists() and lock_path(0).read_text() == ""


def test_wait_without_timeout_blocks_until_release(holder):
    holder(hold_s=0.5)
    began = time.monotonic()
    with gpu_lock(0, wait=True):
        assert time.monotonic() - began > 0.2


def test_a_wait_in_another_thread_can_be_interrupted_from_outside(holder):
    # A Dask batch waits for its GPU's lock in a worker thread; cancelling it raises KeyboardInterrupt there
    # asynchronously (nsprof.cluster_batch), which lands only between Python instructions: a wait blocked
    # in flock itself never saw it, and the cancelled batch kept waiting until the holder let go.
    import threading

    from nsprof.cluster_batch import _async_raise

    holder()
    outcome: list[str] = []

    def waiter() -> None:
        try:
            with gpu_lock(0, wait=True):
                outcome.append("locked")
        except KeyboardInterrupt:
            outcome.append("interrupted")

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    time.sleep(0.5)  # into its wait (the holder keeps the lock for minutes: no race with a release)
    _async_raise(thread.ident, KeyboardInterrupt)
    thread.join(60)
    assert outcome == ["interrupted"], outcome


def test_wait_gives_up_after_its_timeout(holder):
    child = holder()
    began = time.monotonic()
    with pytest.raises(GpuBusy, match=rf"pid {child.pid}.*still busy after 0\.3 s"):
        with gpu_lock(0, wait=True, timeout_s=0.3):
            pytest.fail("took a lock another process holds")
    assert 0.3 <= time.monotonic() - began < 5


def test_a_sigkilled_holder_frees_the_gpu(holder):
    child = holder()
    with pytest.raises(GpuBusy):
        with gpu_lock(0):
            pass
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert holder_record(lock_path(0))["pid"] == child.pid  # its record is still there...
    with gpu_lock(0) as path:  # ...but the lock died with it
        assert holder_record(path)["pid"] == os.getpid()


PROBE = "from nsprof.host.lock import gpu_lock\nwith gpu_lock(0):\n    print('free')\n"


def probe() -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return result.stdout.strip() or result.stderr.strip().splitlines()[-1]


def test_lock_is_released_when_the_body_raises():
    with pytest.raises(RuntimeError):
        with gpu_lock(0):
            assert "GPU 0 is being profiled" in probe()
            raise RuntimeError("kernel crashed")
    assert probe() == "free"


def test_the_same_process_cannot_lock_a_gpu_twice():
    with gpu_lock(0):
        with pytest.raises(GpuBusy, match="already locked by this process"):
            with gpu_lock(0, wait=True):  # would otherwise wait on itself forever
                pass
    with gpu_lock(0):
        pass


def test_lock_file_location(lock_dir, monkeypatch):
    assert lock_path(3) == lock_dir / "nsprof-gpu3.lock"
    with gpu_lock(3):
        assert (lock_dir / "nsprof-gpu3.lock").exists()
    monkeypatch.delenv("NSPROF_LOCK_DIR")
    # one folder for the machine, whatever $TMPDIR a batch job was given
    monkeypatch.setenv("TMPDIR", str(lock_dir / "job-tmp"))
    assert lock_path(0) == Path("/tmp") / "nsprof-gpu0.lock"


def test_cuda_visible_devices_maps_to_the_physical_gpu(lock_dir, monkeypatch):
    monkeypatch.setattr("nsprof.host.gpu._smi_gpus", lambda: ())  # no nvidia-smi: indices as given
    assert which_gpu(0, {"CUDA_VISIBLE_DEVICES": "2,3"}) == Gpu(2)
    assert which_gpu(1, {"CUDA_VISIBLE_DEVICES": " 2, 3 "}) == Gpu(3)
    assert which_gpu(1, {}) == Gpu(1)
    assert which_gpu(0, {"CUDA_VISIBLE_DEVICES": "GPU-8f6c1a2b"}) == Gpu(None, "GPU-8f6c1a2b")
    assert which_gpu(5, {"CUDA_VISIBLE_DEVICES": "2,3"}) == Gpu(5)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with gpu_lock(0) as path:
        assert path == lock_dir / "nsprof-gpu2.lock"


def test_each_threads_session_passes_on_and_sweeps_only_its_own_gpus_lock(tmp_path):
    """Several sessions in one process (a Dask worker's threads), one GPU each: a thread's children
    inherit its own GPU's lock only (held_fds), and its sweep of orphaned holders sees only them."""
    import subprocess
    import threading

    from nsprof.host.lock import gpu_lock, held_fds
    from nsprof.host.lock_holders import orphaned_holders

    ready, release = threading.Barrier(2), threading.Event()
    seen: dict[int, tuple] = {}

    orphans: dict[int, int] = {}

    def orphan_holding(fds) -> int:
        # A child holding the lock that is no longer a descendant (setsid, its shell gone): what a
        # killed profiler's agent is.
        child = subprocess.Popen(
            ["sh", "-c", "setsid sleep 30 & echo $!"], stdout=subprocess.PIPE, text=True, pass_fds=fds
        )
        pid = int(child.stdout.readline())
        child.wait()
        return pid

    def session(device: int) -> None:
        with gpu_lock(device):
            seen[device] = held_fds()
            orphans[device] = orphan_holding(seen[device])
            ready.wait(10)
            release.wait(10)

    other = threading.Thread(target=session, args=(1,))
    other.start()
    try:
        with gpu_lock(0):
            mine = held_fds()
            ready.wait(10)
            assert len(mine) == 1 and len(seen[1]) == 1 and mine != seen[1]
            orphans[0] = orphan_holding(mine)
            # This thread's sweep sees its own session's orphan, not the other thread's.
            assert [pid for pid, _ in orphaned_holders(held_fds())] == [orphans[0]]
    finally:
        release.set()
        other.join()
        for pid in orphans.values():
            os.kill(pid, signal.SIGKILL)


def test_a_relative_lock_folder_is_refused_in_one_line(tmp_path):
    """Two nsprof started in two folders would each take their own lock (and look for their own server) for
    one GPU."""
    from conftest import run_nsprof

    target = f"{Path(__file__).parent / 'targets' / 'faulty_cpu.py'}:space"
    done = run_nsprof(
        "profile",
        target,
        "--backend",
        "nsys",
        "--configs",
        "0",
        "--reps",
        "1",
        "--work-dir",
        tmp_path / "w",
        env={"NSPROF_LOCK_DIR": "locks"},
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "NSPROF_LOCK_DIR" in line and "absolute" in line
    assert not (tmp_path / "locks").exists()


@pytest.mark.parametrize("mode", [0o777, 0o775], ids=["open to all", "open to a shared group"])
def test_a_lock_folder_others_may_write_must_be_sticky(tmp_path, monkeypatch, mode):
    """Without the sticky bit, anyone who may write the folder may rename the lock file away while it is
    held; a group-writable folder counts where its group is not its owner's alone."""
    import grp

    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(mode)
    if mode == 0o775:
        shared = next((g for g in grp.getgrall() if g.gr_name != "root" and g.gr_gid != os.getegid()), None)
        if shared is None:
            pytest.skip("no group other than this user's own here")
        os.chown(folder, -1, shared.gr_gid)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(folder))
    with pytest.raises(NsprofError, match="not sticky") as caught:
        with gpu_lock(0):
            pytest.fail("took a lock in a folder others may rename it out of")
    assert str(folder) in str(caught.value)
    folder.chmod(mode | 0o1000)
    with gpu_lock(0):  # sticky: fine
        pass


USERNS_PROBE = (
    "import sys\nsys.path.insert(0, sys.argv[1])\nfrom nsprof.host import lock\n"
    "try:\n"
    "    lock.open_lock_file(lock.lock_path(0)); print('opened')\n"
    "except Exception as exc:\n"
    "    print(type(exc).__name__, exc)\n"
)


def test_the_default_lock_folder_is_usable_in_an_unprivileged_user_namespace():
    """In a rootless container (an unprivileged user namespace), the host's root shows as the overflow uid
    (65534): /tmp, and / itself, are "a folder of uid 65534", and the lock folder's owner check refused every
    lock folder there. The overflow uid stands for root there (a process of the namespace cannot be it)."""
    import shutil
    import tempfile

    python = "/usr/bin/python3"  # readable by another uid (this test's may lie under a home of mode 0700)
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        pytest.skip("needs root (to drop to another uid) and util-linux's unshare and setpriv")
    if not os.access(python, os.X_OK):
        pytest.skip(f"no {python}")
    copy = Path(tempfile.mkdtemp(prefix="nsprof-userns-", dir="/tmp"))
    try:
        copy.chmod(0o755)
        shutil.copytree(Path(__file__).resolve().parents[1] / "nsprof", copy / "nsprof")
        for path in [copy, *copy.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        command = ["setpriv", "--reuid=54321", "--regid=54321", "--clear-groups", "unshare", "--user"]
        command += ["--map-current-user", "env", "-u", "NSPROF_LOCK_DIR", "HOME=/tmp"]
        done = subprocess.run(
            [*command, python, "-c", USERNS_PROBE, str(copy)],
            capture_output=True,
            text=True,
            cwd="/",
            timeout=60,
        )
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    if "unshare" in done.stderr or "setpriv" in done.stderr:
        pytest.skip(f"no unprivileged user namespace here: {done.stderr.strip()[:200]}")
    assert done.stdout.strip() == "opened", done.stdout + done.stderr


def test_the_overflow_uid_is_trusted_only_where_no_process_of_the_namespace_can_have_it(monkeypatch):
    """In a rootless container mapped as `0 1000 1` + `1 100000 65536` (podman's default), uid 65534 is mapped:
    the container's own `nobody`, whose folders are no root's. The overflow uid counts as root's only where
    no uid of the namespace maps to it (a 1777 lock folder of that `nobody` was taken as root's)."""
    from pathlib import Path

    from nsprof.host import owned

    files = {
        "/proc/self/uid_map": "         0       1000          1\n         1     100000      65536\n",
        "/proc/sys/kernel/overflowuid": "65534\n",
    }
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: files.get(str(self)) or real(self, *a, **k))
    assert owned._overflow_uid() is None


def test_no_lock_folder_is_made_inside_a_folder_the_lock_could_not_use(tmp_path, monkeypatch):
    """NSPROF_LOCK_DIR pointing into another user's folder is refused, and root left its own folders behind
    there first (mkdir -p before the check)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a folder of another uid")
    hers = tmp_path / "hers"
    hers.mkdir()
    os.chown(hers, 54321, 54321)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(hers / "locks" / "deeper"))
    with pytest.raises(NsprofError, match="uid 54321"):
        with gpu_lock(0):
            pytest.fail("took a lock in a folder of another user's")
    assert list(hers.iterdir()) == []


def test_a_dangling_link_above_the_lock_folder_is_one_line(tmp_path):
    """A link to nothing above NSPROF_LOCK_DIR: one line, as a file there is."""
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(NsprofError):
        open_lock_file(tmp_path / "gone" / "locks" / "nsprof-gpu-0.lock")


@pytest.mark.parametrize("mode", [0o644, 0o666])
def test_a_file_above_the_lock_folder_is_still_not_a_directory(tmp_path, mode):
    """A file where a folder of NSPROF_LOCK_DIR should be: the one line it was ('Not a directory'), never a
    message that calls the file a folder (others may write it / a folder of uid N)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    os.chmod(blocker, mode)
    if os.geteuid() == 0:
        os.chown(blocker, 54321, 54321)
    with pytest.raises(NsprofError, match="Not a directory"):
        open_lock_file(blocker / "locks" / "nsprof-gpu-0.lock")
