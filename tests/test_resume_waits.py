"""`tune --resume --wait` while another nsprof run of the same target holds the GPU: what is missing is
decided once that run has ended, so that what it stored is not measured again. Two real nsprof processes
under the stand-in profiler; their order comes from the first one's status file and the kernel's table of
file locks (/proc/locks), never from the clock."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_nsprof, wait_for

STANDINS = Path(__file__).parent / "standins.py"
TARGET = """
import os, time
import nsprof.space


class Launch:
    def __init__(self, config):
        while not os.path.exists({gate!r}):  # the first run holds the GPU until the test opens the gate
            time.sleep(0.02)

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{{"ns": 1000.0 + 100 * i}} for i in range(4)], build=Launch, device="cpu")
"""


def _waiting_on_a_lock(lock_dir: Path) -> bool:
    """Whether a process waits for a file lock on one of lock_dir's files (a `->` line of /proc/locks)."""
    inodes = {str(p.stat().st_ino) for p in lock_dir.iterdir() if p.is_file()}
    waits = [line for line in Path("/proc/locks").read_text().splitlines() if "->" in line]
    return any(line.split()[-3].split(":")[-1] in inodes for line in waits)


def _starter(tmp_path: Path, locks: Path):
    """A stand-in `tune` of t.py in `tmp_path` with these locks, its output piped, more options given."""
    env = {**os.environ, "NSPROF_LOCK_DIR": str(locks), "NSPROF_SERVE": "0"}
    common = "tune t.py:space --backend ncu --mode direct --store r.sqlite --no-tuner-pick".split()

    def start(*more):
        return subprocess.Popen(
            [sys.executable, str(STANDINS), *common, *more], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

    return start


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_resume_that_waited_for_the_gpu_measures_nothing_the_other_run_stored(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    gate = tmp_path / "gate"
    (tmp_path / "t.py").write_text(TARGET.format(gate=str(gate)))
    start = _starter(tmp_path, locks)

    first = start("--work-dir", "wa")
    assert wait_for(lambda: "start 0" in "".join(p.read_text() for p in (tmp_path / "wa").glob("*.status")))
    second = start("--work-dir", "wb", "--resume", "--wait")
    try:
        assert wait_for(lambda: _waiting_on_a_lock(locks)), "the second run never waited for the GPU"
    finally:
        gate.touch()
    out_first, out_second = first.communicate(timeout=120)[0], second.communicate(timeout=120)[0]
    assert first.returncode == 0 and second.returncode == 0, out_first + out_second
    assert "resumed: 4 of 4 configs came from the results store" in out_second, out_second
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        runs = db.execute("SELECT run_id, COUNT(DISTINCT config_id) FROM measurements GROUP BY 1").fetchall()
    assert runs == [(1, 4)]


HOLDER = """
import sys, time
from nsprof.host.lock import gpu_lock

with gpu_lock(0):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it
"""


def test_a_resume_with_nothing_missing_does_not_wait_for_whoever_holds_the_gpu(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    gate = tmp_path / "gate"
    gate.touch()
    (tmp_path / "t.py").write_text(TARGET.format(gate=str(gate)))
    env = {"NSPROF_LOCK_DIR": str(locks), "NSPROF_SERVE": "0"}
    command = "tune t.py:space --backend ncu --mode direct --store r.sqlite --no-tuner-pick".split()
    assert run_nsprof(*command, cwd=tmp_path, env=env, standins=True).returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], env={**os.environ, **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    other = None
    try:
        assert holder.stdout.readline().strip() == "held"
        # another target's resume, with configs to measure: it takes its turn and waits for the GPU
        (tmp_path / "u.py").write_text(TARGET.format(gate=str(gate)))
        other_command = [*command[:1], "u.py:space", *command[2:], "--resume", "--wait", "--work-dir", "wu"]
        other = subprocess.Popen(
            [sys.executable, str(STANDINS), *other_command], cwd=tmp_path, env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert wait_for(lambda: _waiters(locks) >= 1), "the other target's resume never waited"
        # a hang here (the run waiting for an unrelated holder, or behind that resume) ends at the
        # timeout, as a failure
        resumed = run_nsprof(
            *command, "--resume", "--wait", cwd=tmp_path, env=env, standins=True, timeout=120
        )
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        if other is not None:
            other.communicate(timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: 4 of 4 configs came from the results store" in resumed.stdout


GATED = """
import os, time
import nsprof.space


class Launch:
    def __init__(self, config):
        gate = {first!r} if config["i"] < 2 else {second!r}
        while not os.path.exists(gate):  # each run that measures holds the GPU until the test opens the gate
            time.sleep(0.02)

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{{"ns": 1000.0 + 100 * i, "i": i}} for i in range(4)], build=Launch,
                           device="cpu")
"""


def _waiters(lock_dir: Path, pattern: str = "*") -> int:
    """How many waits for a file lock on lock_dir's files (those matching `pattern`) there are (`->`
    lines of /proc/locks)."""
    inodes = {str(p.stat().st_ino) for p in lock_dir.glob(pattern) if p.is_file()}
    waits = [line for line in Path("/proc/locks").read_text().splitlines() if "->" in line]
    return sum(line.split()[-3].split(":")[-1] in inodes for line in waits)


def _statuses(folder: Path) -> str:
    return "".join(p.read_text() for p in folder.glob("*.status")) if folder.is_dir() else ""


def _two_resumes_behind_a_run(tmp_path: Path, locks: Path):
    """A run of t.py's configs 0 and 1 (held at its gate), and two `--resume --wait` runs, once both wait."""
    start = _starter(tmp_path, locks)
    holder = start("--work-dir", "wa", "--configs", "0,1")  # stores configs 0 and 1 only
    assert wait_for(lambda: "start 0" in _statuses(tmp_path / "wa"))
    resumes = [start("--work-dir", work, "--resume", "--wait") for work in ("wb", "wc")]
    assert wait_for(lambda: _waiters(locks) >= 2), "the two resumes never both waited"
    return holder, resumes


def _ended(tmp_path: Path, holder, resumes) -> tuple[dict, list[str]]:
    """Once the three runs end (each with status 0): how many runs measured each config, and their outputs."""
    outs = [run.communicate(timeout=120)[0] for run in (holder, *resumes)]
    assert [run.returncode for run in (holder, *resumes)] == [0, 0, 0], "\n".join(outs)
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        runs = dict(db.execute("SELECT config_id, COUNT(DISTINCT run_id) FROM measurements GROUP BY 1"))
    return runs, outs


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_two_resumes_that_wait_together_measure_each_missing_config_once(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    first_gate, second_gate = tmp_path / "gate-0-1", tmp_path / "gate-2-3"
    (tmp_path / "t.py").write_text(GATED.format(first=str(first_gate), second=str(second_gate)))
    holder, resumes = _two_resumes_behind_a_run(tmp_path, locks)
    try:
        first_gate.touch()  # the holder ends; one resume measures configs 2 and 3, held at their gate
        assert wait_for(lambda: any("start 2" in _statuses(tmp_path / w) for w in ("wb", "wc")))
        assert wait_for(lambda: _waiters(locks) >= 1), "the other resume never waited"
    finally:
        first_gate.touch()
        second_gate.touch()
    runs, outs = _ended(tmp_path, holder, resumes)
    assert runs == {0: 1, 1: 1, 2: 1, 3: 1}, "\n".join(outs)  # nothing measured twice
    assert sum("resumed: 4 of 4 configs came from the results store" in out for out in outs[1:]) == 1, outs


# Configs 2 and 3 are the fastest and 0.1% apart: a close winner, checked in a second process by the
# run that measured them. Every build of config 2 after its first (that check's session) waits at a gate.
CHECKED = """
import os, time
import nsprof.space


class Launch:
    def __init__(self, config):
        if config["i"] < 2:
            gate = {first!r}
        else:
            with open({builds!r} + str(config["i"]), "a") as log:
                log.write("b\\n")
            with open({builds!r} + str(config["i"])) as log:
                built = len(log.read().splitlines())
            gate = {second!r} if config["i"] == 2 and built > 1 else None
        while gate and not os.path.exists(gate):
            time.sleep(0.02)

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{{"ns": ns, "i": i}} for i, ns in enumerate([2000.0, 2100.0, 1000.0, 1001.0])],
                           build=Launch, device="cpu")
"""


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_waiting_resume_takes_its_turn_after_the_other_ones_adaptive_reps_too(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    first_gate, second_gate, builds = tmp_path / "gate-0-1", tmp_path / "gate-check", tmp_path / "builds-"
    (tmp_path / "t.py").write_text(
        CHECKED.format(first=str(first_gate), second=str(second_gate), builds=str(builds))
    )
    holder, resumes = _two_resumes_behind_a_run(tmp_path, locks)
    try:
        first_gate.touch()  # one resume measures configs 2 and 3, then checks 2 against 3: held at the gate
        built = Path(f"{builds}2")
        assert wait_for(lambda: built.exists() and len(built.read_text().splitlines()) >= 2)
        # the other waits for its turn until that check is stored, rather than checking 2 itself
        assert wait_for(lambda: _waiters(locks, "*.resume") >= 1), "the other resume did not wait its turn"
    finally:
        first_gate.touch()
        second_gate.touch()
    runs, outs = _ended(tmp_path, holder, resumes)
    assert runs == {0: 1, 1: 1, 2: 2, 3: 2}, "\n".join(outs)  # a first pass and one check, once each


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_two_resumes_with_nothing_missing_check_a_close_winner_once(tmp_path):
    """Both find every config stored, with a close winner (configs 2 and 3) never checked: one checks
    it (held at the gate), the other takes its turn after that check is stored, and checks nothing."""
    locks = tmp_path / "locks"
    locks.mkdir()
    first_gate, second_gate, builds = tmp_path / "gate-0-1", tmp_path / "gate-check", tmp_path / "builds-"
    first_gate.touch()
    (tmp_path / "t.py").write_text(
        CHECKED.format(first=str(first_gate), second=str(second_gate), builds=str(builds))
    )
    start = _starter(tmp_path, locks)
    unchecked = start("--work-dir", "wa", "--budget-s", "0")  # the first pass only
    assert unchecked.wait(timeout=120) == 0, unchecked.communicate()[0]
    resumes = [start("--work-dir", work, "--resume", "--wait") for work in ("wb", "wc")]
    try:
        built = Path(f"{builds}2")
        assert wait_for(lambda: len(built.read_text().splitlines()) >= 2), "no resume checked config 2"
        # the other waits (for its turn; before, for the GPU, to run the same check with the same reps)
        assert wait_for(lambda: _waiters(locks) >= 1), "the other resume never waited"
    finally:
        second_gate.touch()
    outs = [run.communicate(timeout=120)[0] for run in resumes]
    assert [run.returncode for run in resumes] == [0, 0], "\n".join(outs)
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        runs = dict(db.execute("SELECT config_id, COUNT(DISTINCT run_id) FROM measurements GROUP BY 1"))
    assert runs == {0: 1, 1: 1, 2: 2, 3: 2}, "\n".join(outs)  # the first pass and one check, once each
