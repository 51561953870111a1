"""Review tests of the compile step beside the session (nsprof.session.compile_step.CompileAhead):
faults that cross processes, with real child processes (nsprof's CLI with the stand-in profiler, the real
worker and the real compile step)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES

TARGET = str(FIXTURES.parent / "targets" / "compile_ahead_faults.py")
STANDINS = FIXTURES.parent / "standins.py"
TARGETS = FIXTURES.parent / "targets"
ROOT = FIXTURES.parents[1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _start(tmp_path, space: str, *extra: str, runner: tuple[str, ...] = (str(STANDINS),)):
    folder = tmp_path / "ahead"
    folder.mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NSPROF_LOCK_DIR": str(tmp_path / "locks"),
        "NSPROF_TEST_AHEAD_DIR": str(folder),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            *runner,
            "profile",
            f"{TARGET}:{space}",
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--reps",
            "2",
            "--work-dir",
            str(tmp_path / "work"),
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc, folder


def _wait_for(check, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _waiting_on_1(tmp_path, folder):
    status = tmp_path / "work" / "part0.status"
    return (folder / "child.pid").exists() and status.exists() and "\nwait 1\n" in status.read_text()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_no_compiler_child_outlives_nsprof(tmp_path, signum):
    # config 1's compile runs a child process (as nvcc under a Triton/TileLang compile) while the
    # worker waits for its marker; nsprof is interrupted (Ctrl-C) or SIGKILLed there
    proc, folder = _start(tmp_path, "spawning")
    try:
        _wait_for(lambda: _waiting_on_1(tmp_path, folder))
        child = int((folder / "child.pid").read_text())
        proc.send_signal(signum)
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), (
            f"the compiler's child {child} outlived nsprof ({signal.Signals(signum).name})"
        )
    finally:
        if (folder / "child.pid").exists() and _alive(int((folder / "child.pid").read_text())):
            os.kill(int((folder / "child.pid").read_text()), signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_just_after_popen_took_its_wait_lock_still_ends_nsprof(tmp_path):
    # The flake of the test above: a Ctrl-C handled inside Popen.poll(), just after it took the
    # Popen's wait lock without blocking, leaves that lock held; nsprof's cleanup then waited on the
    # profiler for good (Popen.wait). The Ctrl-C is made to land at that instant (the runner's
    # ARMED file); nsprof must still end promptly, keep no compiler child, and say it was aborted.
    armed, fired = tmp_path / "armed", tmp_path / "fired"
    runner = (str(TARGETS / "interrupt_in_wait_lock.py"), str(armed), str(fired))
    proc, folder = _start(tmp_path, "spawning", runner=runner)
    try:
        _wait_for(lambda: _waiting_on_1(tmp_path, folder))
        child = int((folder / "child.pid").read_text())
        armed.write_text("")
        deadline = time.monotonic() + 5  # nsprof polls its profiler every 0.1 s
        while armed.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not fired.exists():  # nsprof no longer takes the lock that way: an ordinary Ctrl-C
            armed.unlink(missing_ok=True)
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("nsprof did not end within 60 s of a Ctrl-C handled inside Popen.poll()")
        assert proc.returncode == 130, err
        assert err.rstrip().endswith("nsprof: aborted"), err
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), f"the compiler's child {child} outlived nsprof"
    finally:
        if (folder / "child.pid").exists() and _alive(int((folder / "child.pid").read_text())):
            os.kill(int((folder / "child.pid").read_text()), signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_finish_of_a_running_step_leaves_no_folder_and_no_traceback(tmp_path, monkeypatch):
    # the session ended (an interrupt, an error) while the step still compiled: finish() kills it,
    # and the watch thread, seeing it die, writes `end` into the folder finish() is removing
    import threading

    from nsprof.session.compile_step import CompileAhead
    from nsprof.space import load_target

    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = tmp_path / "ahead"
    folder.mkdir()
    monkeypatch.setenv("NSPROF_TEST_AHEAD_DIR", str(folder))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    space = load_target(f"{TARGET}:spawning")
    left = []
    for _ in range(8):
        (folder / "child.pid").unlink(missing_ok=True)
        ahead = CompileAhead.start(f"{TARGET}:spawning", space.points, [0, 1, 2])
        _wait_for(lambda: (folder / "child.pid").exists())
        child = int((folder / "child.pid").read_text())
        ahead.finish()
        time.sleep(0.3)  # the watch thread's turn
        if _alive(child):
            os.kill(child, signal.SIGKILL)
        if ahead.folder.exists():
            left.append(sorted(p.name for p in ahead.folder.iterdir()))
    assert not errors, f"the watch thread raised: {errors[:2]}"
    assert not left, f"compile folders left behind by a stopped step: {left}"


COMPILED_TARGET = """
from pathlib import Path
import nsprof.space

ARTIFACTS = Path({artifacts!r})

def compile_config(config):
    (ARTIFACTS / f"artifact-{{config['id']}}").write_text("compiled")

def build(config):
    if not (ARTIFACTS / f"artifact-{{config['id']}}").exists():
        raise RuntimeError(f"config {{config['id']}} was never compiled")
    return lambda: None

space = nsprof.space.Space(configs={configs!r}, build=build, compile=compile_config, device="cpu")
"""


def test_a_resumed_tune_compiles_the_configs_its_adaptive_sessions_measure(tmp_path, monkeypatch):
    # tune --resume: every first-pass row comes from the store, so no profile_result runs before the
    # adaptive sessions build the contenders: each adaptive session runs the compile step beside
    # itself. The artifacts of the earlier run are gone (another machine, a cleared cache, a
    # compiler cache of the process that compiled).
    sys.path.insert(0, str(Path(__file__).parent))
    from standins import StatusDriver

    from nsprof.drivers import registry
    from nsprof.settings import TuneSettings
    from nsprof.tune import tune

    registry.register("noisy", StatusDriver)
    try:
        monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
        artifacts = tmp_path / "artifacts"
        artifacts.mkdir()
        configs = [{"id": i, "ns": 1000.0, "ns_sigma": 0.03, "seed": 7} for i in range(3)]  # ties
        (tmp_path / "t.py").write_text(COMPILED_TARGET.format(artifacts=str(artifacts), configs=configs))
        target = str(tmp_path / "t.py") + ":space"
        settings = dict(
            backend="noisy",
            mode="direct",
            reps=5,
            timeout_s=30,
            feed_back=False,
            tuner_pick=False,
            work_dir=tmp_path / "work",
            use_store=True,
            store=tmp_path / "results.sqlite",
        )
        first = tune(target, TuneSettings(**settings, budget_s=0))  # the first pass only, stored
        assert first.ranking.adaptive.sessions == 0
        for path in artifacts.iterdir():
            path.unlink()
        resumed = tune(target, TuneSettings(**settings, max_reps=10, resume=True))
        assert resumed.ranking.adaptive.sessions >= 1
        note = resumed.ranking.adaptive.note or ""
        assert "never compiled" not in note, f"an adaptive session measured configs never compiled: {note}"
        assert resumed.ranking.adaptive.history[0]["kept"] > 0
    finally:
        registry.unregister("noisy")


def _tune_with_event(tmp_path, monkeypatch, target_text) -> Path:
    """tune --backend event of the target target_text(artifacts) writes, which compiles into
    `artifacts` (returned); without a GPU the timers fail, which is said and ignored here."""
    from nsprof.errors import NsprofError
    from nsprof.settings import TuneSettings
    from nsprof.tune import tune

    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (tmp_path / "t.py").write_text(target_text(artifacts))
    try:
        tune(
            str(tmp_path / "t.py") + ":space",
            TuneSettings(
                backend="event",
                mode="direct",
                reps=2,
                timeout_s=30,
                use_store=False,
                feed_back=False,
                tuner_pick=False,
                work_dir=tmp_path / "work",
            ),
        )
    except NsprofError as exc:
        print("tune:", exc)
    return artifacts


def test_tune_with_a_fast_timer_as_its_backend_compiles_its_configs(tmp_path, monkeypatch):
    # tune --backend event (a fast timer ranks): its sessions are FastTimers', which do not go
    # through profile_result; each runs the compile step beside itself, and the worker waits for a
    # config's compile before building it. Without a GPU the timers fail; the compile runs anyway.
    artifacts = _tune_with_event(
        tmp_path,
        monkeypatch,
        lambda artifacts: COMPILED_TARGET.format(
            artifacts=str(artifacts), configs=[{"id": i} for i in range(2)]
        ),
    )
    assert sorted(p.name for p in artifacts.iterdir()) == ["artifact-0", "artifact-1"], "never compiled"


HANG_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import standins
standins.install()
from nsprof.profile import profile_result
from nsprof.settings import ProfileSettings
result = profile_result({target!r}, ProfileSettings(backend="nsys", modes=("direct",), reps=2, timeout_s=2,
                                                    phase_timeout_s=2, compile_timeout_s=2, work_dir={work!r}))
print("FAILURES", result.failures)
"""


def _hang_run(tmp_path, space: str, text: str = HANG_SCRIPT) -> str:
    """`text` (HANG_SCRIPT) on `space` in a child process, bounded: its stdout (a failed test, not a
    hang, when nsprof still waits after 30 s; its children die with it: parent-death signal, death pipe)."""
    folder = tmp_path / "ahead"
    folder.mkdir()
    script = tmp_path / "hang.py"
    script.write_text(
        text.format(tests=str(Path(__file__).parent), target=f"{TARGET}:{space}", work=str(tmp_path / "work"))
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NSPROF_LOCK_DIR": str(tmp_path / "locks"),
        "NSPROF_TEST_AHEAD_DIR": str(folder),
    }
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=60)
        pytest.fail("nsprof still waited for a compile after 30 s (compile timeout 2 s)")
    assert proc.returncode == 0, err
    return out


def test_a_compile_that_hangs_is_bounded(tmp_path):
    # config 1's compile never returns. The worker waits for its marker before its window (so
    # --timeout does not apply) writing a `wait` line a second (so the phase bound does not
    # either): nsprof waited forever, holding the GPU lock and the profiler. (Before a1785df the
    # compile ran first, also unbounded, but without the GPU.) Bounded by compile_timeout_s:
    # config 1 is one failed row, configs 0 and 2 are measured.
    assert "FAILURES {1: 'compile timed out: not compiled after 2 s" in _hang_run(tmp_path, "hanging")


def test_a_stalled_compile_step_fails_the_rest_at_once(tmp_path):
    # every compile hangs: config 0 waits out its bound with no compile finishing meanwhile, so the
    # step is stalled and configs 1 and 2 fail at once (not each after its own bound)
    text = _hang_run(tmp_path, "stuck")
    assert text.startswith("FAILURES {0: 'compile timed out: not compiled after 2 s"), text[-2000:]
    assert text.count("not compiled: the compile step made no progress for 2 s") == 2, text[-2000:]


COMPILE_HERE_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import standins
standins.install()
from nsprof.session import run_session
from nsprof.settings import ProfileSettings
settings = ProfileSettings(backend="nsys", modes=("direct",), reps=2, timeout_s=2, phase_timeout_s=2,
                           compile_timeout_s=2, work_dir={work!r})
measured = run_session({target!r}, 3, settings, job_extra={{"compile_here": True}})
print("FAILURES", measured.failures)
print("MEASURED", sorted(set(int(c) for c in measured.frame[measured.frame["error"].isna()]["config_id"])))
"""


def test_a_compile_that_hangs_in_the_worker_is_bounded(tmp_path):
    # Job.compile_here (a served job's worker compiles each config itself; here a standalone one's, as
    # the standalone rest of a served session): config 1's compile never
    # returns. It runs in a thread while the worker writes `wait` lines, so neither --timeout nor the
    # phase bound applies; compile_timeout_s fails it, and configs 0 and 2 are measured.
    out = _hang_run(tmp_path, "hanging", COMPILE_HERE_SCRIPT)
    assert (
        "FAILURES {1: 'compile timed out: not compiled after 2 s (its compile still runs in the worker)'}"
        in out
    ), out
    assert "MEASURED [0, 2]" in out, out


SHAPED_TARGET = """
from pathlib import Path
import nsprof.space

ARTIFACTS = Path({artifacts!r})

def compile_config(config, shape):
    (ARTIFACTS / f"artifact-{{config['id']}}-{{shape['n']}}").write_text("compiled")

def build(config, shape):
    if not (ARTIFACTS / f"artifact-{{config['id']}}-{{shape['n']}}").exists():
        raise RuntimeError(f"config {{config['id']}} at n={{shape['n']}} was never compiled")
    return lambda: None

space = nsprof.space.Space(configs=[{{"id": 0}}, {{"id": 1}}], shapes=[{{"n": 1}}, {{"n": 2}}], build=build,
                           compile=compile_config, device="cpu")
"""


def test_tune_of_a_target_with_shapes_and_a_fast_timer_compiles_its_points(tmp_path, monkeypatch):
    # as above, every (shape, config) point
    artifacts = _tune_with_event(
        tmp_path, monkeypatch, lambda artifacts: SHAPED_TARGET.format(artifacts=str(artifacts))
    )
    assert len(list(artifacts.iterdir())) == 4, "never compiled"


def test_a_new_part_after_a_crash_waits_on_the_same_markers_and_a_compile_failure_is_one_row(tmp_path):
    import json

    proc, folder = _start(tmp_path, "restarting")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    rows = json.loads(out)
    errors: dict[int, list] = {}
    for row in rows:
        errors.setdefault(row["config_id"], []).append(row["error"])
    assert {c for c, e in errors.items() if set(e) == {None}} == {0, 3, 5}
    for c in (1, 4):
        assert len(errors[c]) == 1 and errors[c][0].startswith("compile failed: ValueError"), errors[c]
    assert len(errors[2]) == 1 and errors[2][0] is not None
    assert sorted((folder / "compiled.log").read_text().split()) == sorted(
        "compiled 0 compiled 2 compiled 3 compiled 5".split()
    )
    assert (tmp_path / "work" / "part1.status").exists()  # the configs after the crash ran in a new part
    assert "\nstart 3\n" in (tmp_path / "work" / "part1.status").read_text()


def test_a_point_compiled_just_before_end_is_not_lost(tmp_path, monkeypatch):
    # state() looks for <p>.ok, then <p>.fail, then `end`. The step writes <p>.ok and then `end`:
    # if both land between the first look and the last, the compiled point reads as "lost"
    # (not compiled), and the worker fails a config that compiled.
    from nsprof.worker import compile as step

    real_marker = step.marker

    class Racing(type(Path())):
        def exists(self):
            found = super().exists()
            if not found and self.suffix == ".ok":  # the step finishes right after this look
                step.write_marker(real_marker(tmp_path, 0, True), "")
                step.write_marker(tmp_path / step.END, "")
            return found

    monkeypatch.setattr(step, "marker", lambda folder, point, ok: Racing(real_marker(folder, point, ok)))
    assert step.state(tmp_path, 0) in (None, ("ok", ""))


def _tune_aborting(tmp_path, *more: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSPROF_LOCK_DIR": str(tmp_path / "locks"),
           "NSPROF_TEST_AHEAD_DIR": str(tmp_path)}  # fmt: skip
    command = [sys.executable, str(STANDINS), "tune", f"{TARGET}:aborting", "--backend", "nsys", "--mode",
               "direct", "--reps", "2", "--store", str(tmp_path / "r.sqlite"), "--no-feed-back", *more]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def test_the_configs_a_crashed_compile_step_never_reached_are_compiled_in_their_windows(tmp_path):
    # The compile step dies on config 0 (os.abort). The configs it had not compiled by then did not fail
    # to compile: each is compiled at its first launch, in its own window, so that the config whose
    # compile kills the process is charged with it alone and the others are measured (before, all five
    # were stored as compile failures that a resume never retries).
    import sqlite3

    done = _tune_aborting(tmp_path)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        measured = {
            c for (c,) in db.execute("SELECT DISTINCT config_id FROM measurements WHERE error IS NULL")
        }
        failed = dict(db.execute("SELECT config_id, failure_kind FROM measurements WHERE error IS NOT NULL"))
    assert measured == {1, 2, 3, 4} and failed == {0: "crash"}, (measured, failed, done.stderr[-2000:])
