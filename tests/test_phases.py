"""Where a profiled run's time goes (Measured.phases): the worker's `at` lines and nsprof's own
times, through real worker processes (bare, and under tests/targets/fake_profiler.py with the
stand-in driver of tests/standins.py). Known delays (a slow profiler start, target import, build,
launch, exit, report write) must show up in their own phase: lower bounds only, never a
wall-clock threshold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import FIXTURES

from nsprof.session import PHASES, PHASES_FILE, run_session
from nsprof.session.supervise import POLL_S
from nsprof.settings import ProfileSettings
from nsprof.worker.phases import run_phases
from nsprof.worker.protocol import RunStatus, parse_status

TARGETS = FIXTURES.parent / "targets"
PHASES_TARGET = str(TARGETS / "phases.py")
STANDINS = FIXTURES.parent / "standins.py"
ROOT = FIXTURES.parents[1]

WORKER_RUN = [
    "tool_start",
    "worker_start",
    "target_import",
    "cuda_init",
    "build",
    "measure",
    "between",
    "worker_exit",
    "tool_exit",
    "cleanup",
    "export",
    "parse",
]


def _standin(monkeypatch, **kwargs):
    monkeypatch.syspath_prepend(str(FIXTURES.parent))
    from standins import StatusDriver

    driver = StatusDriver.for_session(**kwargs)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    return driver


def _check_sums(result) -> None:
    assert all(seconds >= 0 for seconds in result.phases.values()), result.phases
    assert sum(result.phases.values()) <= result.wall_s, (result.phases, result.wall_s)
    for times in result.config_phases.values():
        assert set(times) == {"build", "measure"} and min(times.values()) >= 0
    assert sum(t["build"] for t in result.config_phases.values()) == pytest.approx(result.phases["build"])
    assert sum(t["measure"] for t in result.config_phases.values()) == pytest.approx(result.phases["measure"])


@pytest.mark.parametrize("profiled", [False, True], ids=["bare", "profiled"])
def test_every_phase_of_a_clean_run_is_there_in_order_and_fits_the_wall(tmp_path, monkeypatch, profiled):
    if profiled:
        _standin(monkeypatch, profiler_flags=[])
    settings = ProfileSettings(
        backend="nsys" if profiled else "none",
        modes=("direct",),
        reps=2,
        warmup=1,
        timeout_s=30,
        work_dir=tmp_path,
    )
    result = run_session(PHASES_TARGET + ":healthy", 4, settings)
    assert (
        list(result.phases) == WORKER_RUN == [p for p in PHASES if p != "compile_wait"]
    )  # nothing to compile
    _check_sums(result)
    assert sorted(result.config_phases) == [0, 1, 2, 3]
    # the log says the same, in one line per worker run
    line = [
        ln for ln in (tmp_path / "part0.log").read_text().splitlines() if ln.startswith("==NSPROF== phases:")
    ]
    assert len(line) == 1 and all(name in line[0] for name in WORKER_RUN)
    record = json.loads((tmp_path / PHASES_FILE).read_text())
    assert record["phases"] == pytest.approx(result.phases) and len(record["runs"]) == 1
    assert record["ended"] - record["began"] == pytest.approx(result.wall_s)
    assert set(record["configs"]) == {"0", "1", "2", "3"}


def test_known_delays_land_in_their_own_phases(tmp_path, monkeypatch):
    """A profiler that takes 1 s to start and 1 s to write its report, a target import of 1 s, a
    0.3 s build (config 0), a 0.5 s launch (config 1) and a 1 s exit each show in their phase."""
    _standin(monkeypatch, profiler_flags=["--start-delay", "1", "--exit-delay", "1"])
    monkeypatch.setenv("NSPROF_TEST_SLOW_IMPORT", "1")
    monkeypatch.setenv("NSPROF_TEST_SLOW_EXIT", "1")
    settings = ProfileSettings(
        backend="ncu", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    result = run_session(PHASES_TARGET + ":timed", 3, settings)
    assert result.failures == {}
    phases = result.phases
    _check_sums(result)
    assert phases["tool_start"] >= 1.0 - 0.011  # the worker's start time is read in 10 ms clock ticks
    assert phases["target_import"] >= 1.0
    assert phases["worker_exit"] >= 1.0
    assert phases["tool_exit"] >= 1.0 - POLL_S  # nsprof sees the worker gone by polling: up to a poll late
    assert result.config_phases[0]["build"] >= 0.3
    assert result.config_phases[1]["measure"] >= 0.5
    # every delay is in the phases (4.8 s, less a poll), and they still fit the wall (_check_sums)
    assert sum(phases.values()) >= 4.8 - POLL_S


def test_a_run_with_restarts_sums_its_worker_runs(tmp_path, monkeypatch):
    """Config 3 kills the worker (a crash), and the restart measures the rest: two runs, each
    with its own phases in phases.json, summed in Measured.phases."""
    poison = tmp_path / "poison"
    monkeypatch.setenv("NSPROF_TEST_POISON", str(poison))
    settings = ProfileSettings(
        backend="none", modes=("direct",), reps=1, warmup=0, timeout_s=10, work_dir=tmp_path, max_restarts=1
    )

    def remove_poison(event, config_id, detail):
        if event == "fail" and poison.exists():
            poison.unlink()  # the next worker starts cleanly

    result = run_session(PHASES_TARGET + ":restart", 6, settings, on_progress=remove_poison)
    assert set(result.failures) == {3}
    record = json.loads((tmp_path / PHASES_FILE).read_text())
    assert len(record["runs"]) == 2
    for name, seconds in result.phases.items():
        assert seconds == pytest.approx(sum(run.get(name, 0.0) for run in record["runs"]))
    assert all(seconds >= 0 for seconds in result.phases.values())
    assert sum(result.phases.values()) <= result.wall_s
    assert sorted(result.config_phases) == [0, 1, 2, 3, 4, 5]


def _status(lines: list[tuple[float, str]]) -> RunStatus:
    text = "".join(
        f"{line}\nat {t} {line}\n" if not line.startswith("@") else f"at {t} {line[1:]}\n"
        for t, line in lines
    )
    return parse_status(text)


def test_run_phases_from_known_times():
    status = _status(
        [
            (101.0, "pid 7"),
            (100.5, "@process"),
            (101.0, "watch {}"),
            (103.0, "@target"),
            (104.0, 'device {"name": "cpu"}'),
            (104.1, "start 0"),
            (104.3, "@built 0"),
            (105.3, "done 0"),
            (105.3, "start 1"),
            (105.4, 'fail 1 "build failed: no"'),
            (105.5, "end"),
        ]
    )
    phases, configs = run_phases(status, launched=100.0, worker_gone=106.0, exited=107.0)
    assert phases == pytest.approx(
        {
            "tool_start": 0.5,
            "worker_start": 0.5,
            "target_import": 2.0,
            "cuda_init": 1.0,
            "build": 0.3,
            "measure": 1.0,
            "between": 0.2,
            "worker_exit": 0.5,
            "tool_exit": 1.0,
        }
    )
    assert configs == {
        0: pytest.approx({"build": 0.2, "measure": 1.0}),
        1: pytest.approx({"build": 0.1, "measure": 0.0}),
    }


def test_run_phases_put_the_waits_for_the_compile_step_in_compile_wait():
    # configs waiting for the compile step beside the session (wait lines before any start line):
    # config 0 failed to compile after 2 s, config 1 waited 1 s, then built and ran. Seen on the
    # H200: ~3 s of such waits were called "between", and the build and measure scaled down.
    status = _status(
        [
            (10.0, "pid 7"),
            (11.0, 'device {"name": "cpu"}'),
            (11.0, "wait 0"),
            (12.0, "wait 0"),
            (13.0, 'fail 0 "compile failed: X: y"'),
            (13.0, "wait 1"),
            (14.0, "start 1"),
            (14.5, "@built 1"),
            (15.5, "done 1"),
            (15.5, "end"),
        ]
    )
    phases, configs = run_phases(status, launched=10.0, worker_gone=16.0, exited=16.0)
    assert phases["compile_wait"] == pytest.approx(3.0)
    assert phases["build"] == pytest.approx(0.5) and phases["measure"] == pytest.approx(1.0)
    assert phases["between"] == pytest.approx(0.0, abs=1e-9)
    assert configs[0] == pytest.approx({"build": 0.0, "measure": 0.0, "compile_wait": 2.0})
    assert configs[1] == pytest.approx({"build": 0.5, "measure": 1.0, "compile_wait": 1.0})


def test_run_phases_of_an_interleaved_job_count_every_visit():
    # build 0, build 1, then two rounds of visits (0 1 0 1), then done lines
    status = _status(
        [
            (10.0, "pid 7"),
            (10.0, "device {}"),
            (10.0, "start 0"),
            (10.5, "@built 0"),
            (11.0, "start 1"),
            (11.5, "@built 1"),
            (12.0, "start 0"),
            (13.0, "start 1"),
            (14.0, "start 0"),
            (15.0, "start 1"),
            (16.0, "done 0"),
            (16.0, "done 1"),
            (16.0, "end"),
        ]
    )
    phases, configs = run_phases(status, launched=10.0, worker_gone=16.0, exited=16.0)
    assert configs == {
        0: pytest.approx({"build": 0.5, "measure": 0.5 + 1 + 1}),
        1: pytest.approx({"build": 0.5, "measure": 0.5 + 1 + 1}),
    }
    assert phases["build"] + phases["measure"] == pytest.approx(6.0)


def test_a_worker_that_aborts_while_importing_charges_the_import():
    status = _status([(2.0, "pid 7"), (5.0, 'abort "ImportError: no"')])
    phases, configs = run_phases(status, launched=1.0, worker_gone=None, exited=6.0)
    assert phases == pytest.approx({"worker_start": 1.0, "target_import": 3.0, "tool_exit": 1.0})
    assert configs == {}


def test_boundaries_out_of_order_are_clamped_so_phases_never_go_negative():
    # a process start read in clock ticks can fall before nsprof's own launch time
    status = _status([(100.2, "pid 7"), (99.99, "@process"), (100.3, "device {}"), (100.4, "end")])
    phases, _ = run_phases(status, launched=100.0, worker_gone=100.35, exited=100.5)
    assert min(phases.values()) >= 0 and phases["tool_start"] == 0.0
    assert sum(phases.values()) == pytest.approx(0.5)


def test_status_lines_still_parse_with_their_times(tmp_path):
    from nsprof.worker.protocol import Status

    status = Status(str(tmp_path / "status"))
    status.write("pid", 12)
    status.mark("process", at=1.5)
    status.write("start", 3)
    status.mark("built", 3)
    status.write("fail", 3, json.dumps("ValueError: bad 4 5"))
    parsed = parse_status((tmp_path / "status").read_text())
    assert parsed.pid == 12 and parsed.failed == {3: "ValueError: bad 4 5"} and parsed.current is None
    assert [(w, a) for _, w, a in parsed.times] == [
        ("pid", "12"),
        ("process", ""),
        ("start", "3"),
        ("built", "3"),
        ("fail", "3"),
    ]
    assert parsed.time_of("process") == 1.5


def _cli_env(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "NSPROF_LOCK_DIR": str(tmp_path / "locks")}


def test_profile_keeps_phases_json(tmp_path):
    work = tmp_path / "work"
    done = subprocess.run(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            PHASES_TARGET + ":timed",
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--reps",
            "1",
            "--work-dir",
            str(work),
        ],
        capture_output=True,
        text=True,
        env=_cli_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((work / PHASES_FILE).read_text())
    # nsprof's own process compiles nothing: no compile time of its own beside the session's phases
    assert "precompile_s" not in record and list(record["phases"]) == WORKER_RUN
    assert record["configs"]["0"]["build"] >= 0.3


def test_tune_json_says_where_the_first_pass_went_and_what_each_step_took(tmp_path):
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            str(STANDINS),
            "tune",
            PHASES_TARGET + ":timed",
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--reps",
            "2",
            "--max-reps",
            "2",
            "--no-store",
            "--no-feed-back",
            "--no-tuner-pick",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=_cli_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    timing = document["first_pass_phases"]
    assert list(timing["phases"]) == WORKER_RUN and set(timing["configs"]) == {"0", "1", "2"}
    assert sum(timing["phases"].values()) <= timing["wall_s"]
    assert timing["configs"]["1"]["measure"] >= 0.5 * 2  # two reps of a 0.5 s launch
    assert document["truths"][0]["first_pass_phases"] == timing
    # each step of the command, in order, inside the whole process's wall time as seen from here
    steps = document["steps_s"]
    assert list(steps) == ["start", "nsys", "pick", "feed_back"]
    assert min(steps.values()) >= 0 and sum(steps.values()) <= time.monotonic() - began
    assert steps["nsys"] >= timing["wall_s"], "the truth's step holds its first pass"


def test_the_compile_steps_time_goes_into_the_phases_file_or_says_why_not(tmp_path, capsys):
    """The compile step's time is added to the session's phases file; a file that cannot be read
    back as JSON is left as it is and said on stderr, not passed over in silence."""
    from nsprof.session.timing import PHASES_FILE, add_to_phases_file

    good = tmp_path / "good"
    good.mkdir()
    (good / PHASES_FILE).write_text(json.dumps({"wall_s": 1.5, "runs": []}))
    add_to_phases_file(good, compile_ahead_s=2.25)
    assert json.loads((good / PHASES_FILE).read_text()) == {
        "wall_s": 1.5,
        "runs": [],
        "compile_ahead_s": 2.25,
    }
    assert capsys.readouterr().err == ""

    add_to_phases_file(tmp_path / "none", compile_ahead_s=2.25)  # a session that wrote no phases
    assert capsys.readouterr().err == ""
    assert not (tmp_path / "none").exists()

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / PHASES_FILE).write_text('{"wall_s": 1.5, "run')
    add_to_phases_file(bad, compile_ahead_s=2.25)
    assert (bad / PHASES_FILE).read_text() == '{"wall_s": 1.5, "run'
    err = capsys.readouterr().err.strip()
    assert (
        err.count("\n") == 0
        and err.startswith("nsprof: ")
        and "compile" in err
        and str(bad / PHASES_FILE) in err
    )
