"""A Space.compile_in_worker's compile step (a Triton space's): run by the measuring worker itself,
ahead of the windows in a pool of threads, never beside the session nor in nsprof's own process.
Real child processes: nsprof's CLI with the stand-in profiler (tests/standins.py)."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TARGET = HERE / "targets" / "pool_compile.py"
sys.path.insert(0, str(HERE))

from conftest import run_nsprof  # noqa: E402


def _profile(tmp_path, space: str, *more: str, command: str = "profile"):
    """`nsprof profile` (or `command`) of `space` under the stand-in nsys, --json: (the run, its
    document, the log's lines)."""
    log = tmp_path / "log.jsonl"
    log.touch()
    done = run_nsprof(
        command,
        f"{TARGET}:{space}",
        "--backend",
        "nsys",
        "--mode",
        "direct",
        "--reps",
        "1",
        "--work-dir",
        tmp_path / "work",
        "--json",
        *more,
        standins=True,
        env={"NSPROF_TEST_LOG": str(log), "NSPROF_LOCK_DIR": str(tmp_path / "locks")},
        cwd=tmp_path,
        timeout=120,
    )
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return done, (json.loads(done.stdout) if done.stdout.strip() else []), lines


def test_the_worker_compiles_every_point_before_the_first_window_each_shapes_first_alone(tmp_path):
    done, rows, lines = _profile(tmp_path, "space")
    assert done.returncode == 0, done.stderr
    # one process compiled and built everything: the worker (no compile step beside it, not nsprof)
    assert len({line["pid"] for line in lines}) == 1 and lines[0]["pid"] != os.getpid()
    events = [(line["what"], line["config"], line["n"]) for line in lines]
    compiles = [(c, n) for what, c, n in events if what == "compile"]
    assert sorted(compiles) == [(c, n) for c in range(3) for n in (1, 2)]  # each point once
    # each shape's first point alone, first; the rest after
    assert events[:4] == [("compile", 0, 1), ("compiled", 0, 1), ("compile", 0, 2), ("compiled", 0, 2)]
    first_build = next(i for i, event in enumerate(events) if event[0] == "build")
    assert all(what == "build" for what, _, _ in events[first_build:])  # no compile runs beside a window
    # the wait is the first window's: every `wait` line names the job's first point
    (status,) = (tmp_path / "work").rglob("*.status")
    waits = {line for line in status.read_text().splitlines() if line.startswith("wait ")}
    assert waits == {"wait 0"}, waits
    failed = {(row["config_id"], row["shape"]): row for row in rows if row["error"]}
    assert set(failed) == {(1, 0), (1, 1)}
    for row in failed.values():
        assert row["failure_kind"] == "compile"
        assert row["error"].startswith("compile failed: ValueError: no valid tile"), row["error"]
    measured = {(row["config_id"], row["shape"]) for row in rows if row["error"] is None}
    assert measured == {(c, s) for c in (0, 2) for s in (0, 1)}


def test_the_worker_compiles_in_a_pool_of_at_least_two_threads(tmp_path):
    # config 1's compile waits until config 2's has begun: one compile after another, it fails
    done, rows, lines = _profile(tmp_path, "parallel")
    assert done.returncode == 0, done.stderr
    assert rows and all(row["error"] is None for row in rows), rows
    threads = {line["config"]: line["thread"] for line in lines if line["what"] == "compile"}
    assert threads[1] != threads[2]


def test_a_compile_that_kills_the_worker_costs_its_config_alone(tmp_path):
    # config 2's compile aborts the worker before any window: which of the compiles running at once
    # killed it is not known, so the next part compiles each config at its first launch, in its own
    # window, where the crash is charged to config 2 alone and the others are measured
    done, rows, lines = _profile(tmp_path, "dying")
    assert done.returncode == 0, done.stderr
    failed = {row["config_id"]: row for row in rows if row["error"]}
    assert list(failed) == [2] and failed[2]["failure_kind"] == "crash", failed
    assert {row["config_id"] for row in rows if row["error"] is None} == {0, 1, 3}
    assert len({line["pid"] for line in lines}) >= 2  # the worker that died, and the next part's


def test_a_tune_whose_worker_died_compiling_ahead_says_so_in_its_notes(tmp_path):
    # the session's own note (why each config was compiled at its first launch) reaches the tune's
    # result, not only stderr: a benchmark or a script reading --json sees how the run was taken
    done, document, _ = _profile(tmp_path, "dying", "--no-feed-back", command="tune")
    assert done.returncode == 0, done.stderr
    notes = document["notes"]
    assert any(
        note.startswith("the worker died compiling ahead (worker killed by signal") for note in notes
    ), notes


HANG_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import os, standins
standins.install()
if hasattr(os, "sched_setaffinity"):  # one CPU: the worker's compile pool has 2 threads
    os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
from nsprof.session import run_session
from nsprof.settings import ProfileSettings
from nsprof.space import load_target
space = load_target({target!r})
settings = ProfileSettings(backend="nsys", modes=("direct",), reps=1, work_dir={work!r}, {settings})
measured = run_session({target!r}, len(space.configs), settings, n_shapes=len(space.shapes), compiles=space.compiles)
print("NOTES", measured.notes)
print("FAILURES", measured.failures)
print("MEASURED", sorted(set(int(c) for c in measured.frame[measured.frame["error"].isna()]["config_id"])))
"""


def _session(tmp_path, space: str, settings: str, program: str = HANG_SCRIPT) -> str:
    """`program`'s (HANG_SCRIPT's: run_session) measurement of `space` with `settings` (ProfileSettings
    keywords), in a child process, bounded: its stdout."""
    script = tmp_path / "session.py"
    target, work = f"{TARGET}:{space}", str(tmp_path / "work")
    script.write_text(program.format(tests=str(HERE), target=target, work=work, settings=settings))
    env = {
        **os.environ,
        "NSPROF_TEST_LOG": str(tmp_path / "log.jsonl"),
        "NSPROF_LOCK_DIR": str(tmp_path / "locks"),
    }
    env["PYTHONPATH"] = str(HERE.parent)
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("nsprof still waited for a compile after 60 s")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _failures(out: str) -> dict:
    """The session's failures, {point: why}, from its FAILURES line."""
    return ast.literal_eval(out.split("FAILURES ", 1)[1].splitlines()[0])


def test_a_compile_that_kills_the_worker_with_no_restart_left_still_costs_its_config_alone(tmp_path):
    # with no restart left (adaptive sessions allow none) the turn that compiles in windows is no
    # restart: config 2 crashes in its window, config 3 is not run (the crash was the restart), 0 and 1
    # are measured, and a note says why the compiles moved
    out = _session(tmp_path, "dying", "max_restarts=0")
    assert "FAILURES {2: " in out and "3: 'not run" in out and "MEASURED [0, 1]" in out, out
    assert "the worker died compiling ahead (worker killed by signal SIGABRT)" in out, out


def test_a_worker_compiling_many_shapes_first_compiles_keeps_telling_it_is_alive(tmp_path):
    # 5 shapes' first compiles, 0.7 s each and one after another, outlast a 2 s bound on a phase
    # without a line: the wait lines go on across them, so the worker is not stopped as stalled
    out = _session(tmp_path, "slow_firsts", "phase_timeout_s=2")
    assert "NOTES []" in out and "FAILURES {}" in out, out
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len({line["pid"] for line in lines}) == 1  # one worker: none stopped


def test_a_compile_that_hangs_in_the_pool_is_bounded_and_the_rest_measured(tmp_path):
    # configs 1-3's compiles never return, more of them than the pool's 2 threads: compile_timeout_s
    # (2 s) fails each, a new thread takes each stuck one's place, so config 4 is compiled and
    # measured, as is config 0 (a compile finished within the last two bounds: no stall); and the
    # worker exits (the pool's threads are daemons)
    out = _session(tmp_path, "hanging", "compile_timeout_s=2")
    late = "compile timed out: not compiled after 2 s (its compile still runs in the worker)"
    assert f"FAILURES {dict.fromkeys(range(1, 4), late)}" in out, out
    assert "MEASURED [0, 4]" in out, out


def test_a_pool_whose_every_compile_hangs_is_a_stall_and_the_rest_fail_at_once(tmp_path):
    # configs 1-11 all hang, more than the pool's 2 threads: once no compile has finished for two
    # bounds (the compiles that took the first hung ones' places hang too), the pool is stalled,
    # and the points not compiled yet fail at once, not each after waiting out its own bound in turn
    out = _session(tmp_path, "stalled", "compile_timeout_s=2")
    assert "MEASURED [0]" in out, out
    failures = _failures(out)
    assert sorted(failures) == list(range(1, 12)), failures
    stalled = {
        c for c, why in failures.items() if why == "not compiled: no compile of the worker's finished in 4 s"
    }
    assert stalled and max(failures) in stalled, failures
    assert all(why.startswith("compile timed out") for c, why in failures.items() if c not in stalled), (
        failures
    )


def test_first_compiles_past_their_bound_one_after_another_are_no_stall(tmp_path):
    # each of 5 shapes' first compiles (0.7 s, alone) outlasts a 0.5 s bound: each may fail for that,
    # but the pool that follows is no stall, and config 1 is compiled and measured at every shape
    out = _session(tmp_path, "slow_firsts", "compile_timeout_s=0.5")
    assert "MEASURED [1]" in out or "MEASURED [0, 1]" in out, out
    failures = _failures(out)
    assert all(why.startswith("compile timed out") for why in failures.values()), failures
    assert all(point % 2 == 0 for point in failures), failures  # config 0's points (config 1: odd ids)


TIMER_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import standins
standins.install()
from pathlib import Path
from nsprof.measure import FastTimers, Request
from nsprof.settings import ProfileSettings
from nsprof.space import load_target
space = load_target({target!r})
timers = FastTimers(["event"], ProfileSettings(), Path({work!r}), timer_reps=3)
request = Request({target!r}, space.points.all(), len(space.configs), len(space.shapes), compiles=space.compiles)
print("NOTES", timers.measure(request).notes)
"""


def test_a_fast_timers_worker_that_died_compiling_ahead_says_so_in_its_notes(tmp_path):
    # a fast timer's session has the same fallback as a profiled one (each config compiled at its
    # first launch, in its own window): its Measured says so, beside the throttle check's notes
    out = _session(tmp_path, "dying", "", program=TIMER_SCRIPT)
    assert "the worker died compiling ahead (worker killed by signal SIGABRT)" in out, out


@pytest.mark.parametrize("served", [False, True])
def test_a_space_says_where_its_compile_runs_and_the_session_routes_it(served, monkeypatch):
    from nsprof.session import run as run_module
    from nsprof.space import Space, read_changes

    beside = Space(configs=[{}], build=lambda c: lambda: None, compile=lambda c: None)
    worker = Space(configs=[{}], build=lambda c: lambda: None, compile=lambda c: None, compile_in_worker=True)
    assert (beside.compiles, worker.compiles, Space(configs=[{}], build=lambda c: None).compiles) == (
        "beside",
        "worker",
        "",
    )
    assert read_changes(worker.as_read(), {**worker.as_read(), "compiles": True}) is None  # older reads
    routes = []
    monkeypatch.setattr(
        run_module, "find_server", lambda driver, settings: ({"pid": 1} if served else None, None)
    )
    monkeypatch.setattr(run_module, "_in_folder", lambda request, server: routes.append(("served", request)))
    monkeypatch.setattr(run_module, "_standalone", lambda request, *a: routes.append(("standalone", request)))
    monkeypatch.setattr(
        run_module, "_compiled_beside", lambda request, *a: routes.append(("beside", request))
    )

    class Driver:
        serves = True

    from nsprof.settings import ProfileSettings

    for compiles in ("beside", "worker", ""):
        run_module.run_session(
            "t.py:space", 1, ProfileSettings(backend="nsys"), driver=Driver(), compiles=compiles
        )
    standalone = {"beside": "beside", "worker": "standalone", "": "standalone"}
    assert [route for route, _ in routes] == (["served"] * 3 if served else list(standalone.values()))
    here = [bool((request["job_extra"] or {}).get("compile_here")) for _, request in routes]
    assert here == ([True, True, False] if served else [False, True, False])


def test_a_compile_thread_measures_on_the_main_threads_cuda_device_and_an_unreadable_error_has_a_reason(
    monkeypatch,
):
    # a thread starts on CUDA device 0; a target may have chosen another in the main thread
    import types

    from nsprof.worker import windows
    from nsprof.worker.compile import compile_reason

    chosen = []
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True, current_device=lambda: 3, set_device=chosen.append
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    windows._main_device()()
    assert chosen == [3]

    class Unreadable(Exception):
        def __str__(self):
            raise ValueError("no text")

    assert compile_reason(Unreadable()).startswith("compile failed: Unreadable: (no message")
