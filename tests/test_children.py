"""nsprof.host.children's waits on its children, with real child processes: a Ctrl-C handled inside
Popen.poll() or Popen.wait(timeout), just after they took the Popen's wait lock without blocking,
leaves that lock held for good; nsprof's own waits must not depend on it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from nsprof.host.children import exit_code, kill_group, wait_exit


def _child(seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True
    )


def _leak_wait_lock(proc: subprocess.Popen) -> None:
    proc._waitpid_lock.acquire()  # what a KeyboardInterrupt just after Popen's acquire leaves


def test_exit_code_and_wait_exit_see_a_child_end_whose_popen_wait_lock_is_held():
    proc = _child(0.5)
    _leak_wait_lock(proc)
    assert exit_code(proc) is None  # still running
    assert wait_exit(proc, 60) == 0
    assert exit_code(proc) == 0 and proc.returncode == 0


def test_wait_exit_says_none_for_a_child_still_running_at_its_bound():
    proc = _child(300)
    try:
        assert wait_exit(proc, 0.2) is None
    finally:
        kill_group(proc)
    assert proc.returncode == -signal.SIGKILL


def test_kill_group_returns_though_the_popen_wait_lock_is_held():
    proc = _child(300)
    _leak_wait_lock(proc)
    done = threading.Thread(target=kill_group, args=(proc,), daemon=True)
    done.start()
    done.join(60)  # a bound for the hang only: this returns at once unless it waits forever
    if done.is_alive():
        proc._waitpid_lock.release()  # let the thread end
    assert not done.is_alive(), "kill_group waited for good on the Popen's wait lock"
    assert proc.returncode == -signal.SIGKILL


def test_a_child_of_the_suite_starts_with_sigint_at_its_default():
    # the Ctrl-C tests signal real nsprofs: one that started with SIGINT ignored (the suite run as a
    # background job, see conftest.pytest_configure) would ignore it and the test hang
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True", out
