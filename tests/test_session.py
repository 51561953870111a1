"""The session's fault handling, through real worker processes (no profiler, no GPU)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from conftest import FIXTURES
from conftest import running as _running

from nsprof.drivers.base import Driver
from nsprof.errors import NsprofError, ToolFailed
from nsprof.session import run_session
from nsprof.settings import ProfileSettings
from nsprof.worker.protocol import Job, parse_status

TARGET = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":space"


def test_faults_are_recorded_and_every_other_config_runs(tmp_path):
    events = []
    settings = ProfileSettings(
        backend="none", modes=("direct",), reps=2, warmup=1, timeout_s=3, work_dir=tmp_path
    )
    result = run_session(TARGET, 9, settings, on_progress=lambda e, c, d: events.append((e, c)))
    assert set(result.failures) == {1, 3, 5, 6, 7}
    assert "illegal memory access" in result.failures[1]
    assert result.failures[3].startswith("timeout")
    assert "shape mismatch" in result.failures[5]
    assert result.failures[6].startswith("build failed") and "no such tile size" in result.failures[6]
    assert "SIGABRT" in result.failures[7]
    done = sorted(c for e, c in events if e == "done")
    assert done == [0, 2, 4, 8]
    # three restarts: after the crash (1), the timeout (3) and the abort (7)
    parts = sorted(p.name for p in tmp_path.glob("part*.status"))
    assert len(parts) == 4
    # failures are rows of the table, with their reason
    failed_rows = result.frame[result.frame["error"].notna()]
    assert sorted(failed_rows["config_id"].tolist()) == [1, 3, 5, 6, 7]
    assert failed_rows["duration_ns"].isna().all()


def test_a_worker_that_cannot_load_its_target_is_one_error(tmp_path):
    settings = ProfileSettings(backend="none", modes=("direct",), work_dir=tmp_path, timeout_s=5)
    with pytest.raises(ToolFailed, match="measured nothing"):
        run_session(str(tmp_path / "missing.py") + ":space", 1, settings)


def test_status_parsing():
    status = parse_status('pid 12\nfail 4 "build failed: x"\nstart 0\ndone 0\nstart 1\n')
    assert status.pid == 12 and status.done == [0] and status.failed == {4: "build failed: x"}
    assert status.current == 1


def test_job_round_trip(tmp_path):
    job = Job(target="t.py:space", config_ids=[3, 5], status="s", modes=["graph"], reps=2)
    path = job.write(tmp_path / "job.json")
    assert Job.read(path) == job
    assert json.loads(path.read_text())["config_ids"] == [3, 5]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend": "perf"},
        {"reps": 0},
        {"modes": ()},
        {"modes": ("fast",)},
        {"clock_control": "boost"},
        {"timeout_s": 0},
    ],
)
def test_settings_are_validated(kwargs):
    with pytest.raises(NsprofError):
        ProfileSettings(**kwargs)


class _LossyDriver(Driver):
    """A stand-in profiler whose report loses every kernel when the worker did not exit cleanly,
    as nsys does when its target is killed (CUPTI buffers are flushed at a clean exit only)."""

    name = "lossy"

    def build_command(self, settings, job_file, report_base):
        from nsprof.worker.protocol import worker_command

        return worker_command(settings, job_file)

    def finish(self, report_base, log):
        status = parse_status(report_base.with_suffix(".status").read_text())
        report = report_base.with_suffix(".lossy.json")
        report.write_text(json.dumps(status.done if status.ended else []))
        return report

    def read(self, report, settings):
        from nsprof.errors import ReportError
        from nsprof.schema import make_frame

        done = json.loads(report.read_text())
        if not done:
            raise ReportError(f"{report.name}: no CUDA kernel table")
        return make_frame(
            [
                {"source": "lossy", "config_id": c, "mode": "direct", "rep": 0, "duration_ns": 1000.0 + c}
                for c in done
            ]
        )


def test_configs_lost_with_a_crashed_runs_report_are_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: _LossyDriver())
    events = []
    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=1, warmup=0, timeout_s=3, work_dir=tmp_path
    )
    result = run_session(TARGET, 9, settings, on_progress=lambda e, c, d: events.append((e, c)))
    assert set(result.failures) == {1, 3, 5, 6, 7}
    measured = result.frame[result.frame["error"].isna()]
    assert sorted(measured["config_id"]) == [0, 2, 4, 8]  # nothing measured is lost
    assert measured.set_index("config_id")["duration_ns"].to_dict() == {
        0: 1000.0,
        2: 1002.0,
        4: 1004.0,
        8: 1008.0,
    }
    retried = [c for e, c in events if e == "retry"]
    assert retried == [0, 2, 4]  # lost with the runs that config 1, 3 and 7 crashed


def test_a_build_that_crashes_or_hangs_is_that_configs_failure(tmp_path):
    target = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":build_faults"
    settings = ProfileSettings(
        backend="none", modes=("direct",), reps=1, warmup=0, timeout_s=3, work_dir=tmp_path
    )
    result = run_session(target, 5, settings)
    assert "SIGABRT" in result.failures[1]
    assert result.failures[3].startswith("timeout")
    assert set(result.failures) == {1, 3}
    # the aborted worker left every thread's Python stack beside its job: where it died (the target's build)
    stacks = {path.name: path.read_text() for path in tmp_path.glob("*.stack")}
    assert list(stacks) == ["part0.job.stack"], sorted(p.name for p in tmp_path.iterdir())
    assert (
        "Fatal Python error: Aborted" in stacks["part0.job.stack"]
        and "faulty_cpu.py" in stacks["part0.job.stack"]
    )


TEARDOWN = """
import os, sys
import nsprof.space

LIVE = set()


class Inputs:  # a config's GPU tensors, held by its launch: freed when the launch goes
    def __init__(self, c):
        self.c = c
        LIVE.add(c)

    def __del__(self):
        LIVE.discard(self.c)
        if self.c == 0:  # a free that kills the process (a CUDA error surfacing then)
            sys.stderr.write("teardown of config 0 crashed\\n")
            sys.stderr.flush()
            os._exit(1)


def build(config):
    assert not LIVE, f"config {config['id']} built while the inputs of configs {sorted(LIVE)} live"
    inputs = Inputs(config["id"])
    return lambda: inputs.c


space = nsprof.space.Space(configs=[{"id": i} for i in range(3)], build=build, device="cpu")
"""


def test_a_configs_teardown_is_inside_its_own_window_not_the_next_ones(tmp_path):
    """The inputs a config's launch holds are freed in its own window, before the next config is built:
    a crash while they are freed is that config's, and the next one is measured."""
    (tmp_path / "teardown.py").write_text(TEARDOWN)
    settings = ProfileSettings(
        backend="none", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path / "w"
    )
    events = []
    result = run_session(
        f"{tmp_path / 'teardown.py'}:space", 3, settings, on_progress=lambda e, c, d: events.append((e, c))
    )
    assert set(result.failures) == {0}, result.failures
    assert "teardown of config 0 crashed" in str(result.failures[0])
    assert sorted(c for e, c in events if e == "done") == [1, 2]


def test_configs_left_when_restarts_run_out_are_failed_rows(tmp_path):
    settings = ProfileSettings(
        backend="none", modes=("direct",), reps=1, warmup=0, timeout_s=2, work_dir=tmp_path, max_restarts=1
    )
    result = run_session(TARGET, 9, settings)
    assert set(result.failures) == set(range(9)) - {0, 2}  # 0, 2 ran; 1 crashed; the one restart hung on 3
    assert result.failures[4].startswith("not run: the worker was restarted 1 times")
    rows = result.frame[result.frame["error"].notna()]
    assert sorted(rows["config_id"]) == sorted(result.failures)


def test_ctrl_c_kills_the_worker(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import sys; from nsprof.settings import ProfileSettings; from nsprof.session import run_session; "
        f"run_session({TARGET!r}, 9, ProfileSettings(backend='none', modes=('direct',), reps=1, warmup=0, "
        f"timeout_s=600, work_dir={str(tmp_path)!r}), config_ids=[3])"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    status_file = tmp_path / "part0.status"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "start 3" not in (
        status_file.read_text() if status_file.exists() else ""
    ):
        time.sleep(0.1)
    worker_pid = parse_status(status_file.read_text()).pid
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    time.sleep(0.5)
    assert not _running(worker_pid), "the worker outlived nsprof after Ctrl-C"
    assert not list(tmp_path.glob("*.stack")), "an empty crash-stack file was left in the work folder"


class _DyingProfiler(_LossyDriver):
    """A stand-in profiler that is itself SIGKILLed once the worker starts config `die_at`,
    leaving its worker running (as when someone kills ncu or nsys mid-way)."""

    def __init__(self, die_at: int) -> None:
        self.die_at = die_at
        self.runs = 0

    def build_command(self, settings, job_file, report_base):
        from nsprof.worker.protocol import worker_command

        self.runs += 1
        if self.runs > 1:
            return worker_command(settings, job_file)
        status = report_base.with_suffix(".status")
        script = (
            'status="$1"; shift; "$@" & '
            f'while ! grep -q "^start {self.die_at}$" "$status" 2>/dev/null; do sleep 0.05; done; kill -9 $$'
        )
        return ["sh", "-c", script, "sh", str(status), *worker_command(settings, job_file)]


def test_a_killed_profiler_costs_only_the_config_it_was_on(tmp_path, monkeypatch):
    driver = _DyingProfiler(die_at=2)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    target = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":slow"
    result = run_session(target, 4, settings)
    assert set(result.failures) == {2} and "SIGKILL" in result.failures[2]
    measured = result.frame[result.frame["error"].isna()]
    assert sorted(measured["config_id"]) == [0, 1, 3]  # 0 and 1 were lost with the report, measured again
    first_worker = parse_status((tmp_path / "part0.status").read_text()).pid
    assert not _running(first_worker), "the killed profiler's worker was left running"


class _DyingProfilerOwnGroup(_DyingProfiler):
    """Like _DyingProfiler, but it starts its worker in a process group (and session) of its own,
    out of reach of nsprof's kill of the profiler's group."""

    def build_command(self, settings, job_file, report_base):
        command = super().build_command(settings, job_file, report_base)
        if command[0] == "sh":
            command[2] = command[2].replace('"$@" &', 'setsid "$@" &')
        return command


def test_a_killed_profilers_worker_in_a_group_of_its_own_is_not_left_running(tmp_path, monkeypatch):
    driver = _DyingProfilerOwnGroup(die_at=2)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    left_running = []

    def on_rows(frame):  # part 0 is over: its worker must be gone before the next one starts
        if not (tmp_path / "part1.status").exists():
            left_running.append(_running(parse_status((tmp_path / "part0.status").read_text()).pid))

    # config 2 sleeps for an hour: left running, the first worker would measure beside the next
    result = run_session(
        str(FIXTURES.parent / "targets" / "phases.py") + ":hanging", 4, settings, on_rows=on_rows
    )
    assert left_running == [False], "the killed profiler's worker was left running"
    assert set(result.failures) == {2}


class _DyingProfilerWithHelper(_DyingProfiler):
    """Like _DyingProfiler, but it first starts a helper of its own in a session of its own that
    inherits its descriptors, the GPU lock's among them (as nsys's helpers do), and outlives it."""

    def __init__(self, die_at: int, helper_pid: Path) -> None:
        super().__init__(die_at)
        self.helper_pid = helper_pid

    def build_command(self, settings, job_file, report_base):
        command = super().build_command(settings, job_file, report_base)
        if command[0] == "sh":
            command[2] = f"setsid sh -c 'echo $$ > {self.helper_pid}; exec sleep 3600' & " + command[2]
        return command


def test_what_a_killed_profiler_left_holding_the_gpu_lock_is_killed(tmp_path, monkeypatch):
    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock

    helper_pid = tmp_path / "helper.pid"
    driver = _DyingProfilerWithHelper(die_at=2, helper_pid=helper_pid)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    target = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":slow"
    result = run_session(target, 4, settings)  # under the GPU lock, whose descriptor the helper inherits
    assert sorted(result.frame[result.frame["error"].isna()]["config_id"]) == [0, 1, 3]
    helper = int(helper_pid.read_text())
    try:
        assert not _running(helper), "the killed profiler's helper was left running"
        with gpu_lock(0):  # free again: nothing of the run holds it
            pass
    except GpuBusy:
        raise AssertionError("the GPU lock stayed held by what the killed profiler left") from None
    finally:
        if _running(helper):
            os.kill(helper, signal.SIGKILL)
    assert f"killed pid {helper}" in (tmp_path / "part0.log").read_text()


class _ContextLostProfiler(_LossyDriver):
    """Its first run stands in for a worker whose CUDA context was lost: config 0 done, config 1
    recorded as failed, then an exit without the status file's `end` (as the real worker
    does after an illegal address). The report of such a run has no kernels (nsys)."""

    runs = 0

    def build_command(self, settings, job_file, report_base):
        from nsprof.worker.protocol import worker_command

        self.runs += 1
        if self.runs > 1:
            return worker_command(settings, job_file)
        status = report_base.with_suffix(".status")
        script = (
            "printf 'start 0\\ndone 0\\nstart 1\\nfail 1 \"CUDA error: an illegal memory access\"\\n' "
            '>> "$1"; exit 3'
        )
        return ["sh", "-c", script, "sh", str(status)]


def test_a_run_that_lost_its_context_after_a_recorded_failure_loses_nothing(tmp_path, monkeypatch):
    driver = _ContextLostProfiler()
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    events = []
    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    target = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":slow"
    result = run_session(target, 4, settings, on_progress=lambda e, c, d: events.append((e, c)))
    assert result.failures == {1: "CUDA error: an illegal memory access"}
    measured = result.frame[result.frame["error"].isna()]
    assert sorted(measured["config_id"]) == [0, 2, 3]  # 0 was lost with the first report, measured again
    assert [c for e, c in events if e == "retry"] == [0]


class _PartialReportProfiler(_DyingProfiler):
    """Killed at config 2, like _DyingProfiler, but leaves a report cut off mid-write (ncu's
    report streams to disk): the last config it finished has only its first rep in it."""

    def finish(self, report_base, log):
        status = parse_status(report_base.with_suffix(".status").read_text())
        reps = {c: [0, 1] for c in status.done}
        if self.runs == 1 and status.done:
            reps[status.done[-1]] = [0]
        report = report_base.with_suffix(".partial.json")
        report.write_text(json.dumps(reps))
        return report

    def read(self, report, settings):
        from nsprof.schema import make_frame

        reps = json.loads(report.read_text())
        return make_frame(
            [
                {
                    "source": "partial",
                    "config_id": int(c),
                    "mode": "direct",
                    "rep": r,
                    "duration_ns": 1000.0 + int(c),
                }
                for c, rs in reps.items()
                for r in rs
            ]
        )


def test_a_config_only_partly_in_a_cut_off_report_is_measured_again_whole(tmp_path, monkeypatch):
    driver = _PartialReportProfiler(die_at=2)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    events = []
    settings = ProfileSettings(
        backend="ncu", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    target = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":slow"
    result = run_session(target, 4, settings, on_progress=lambda e, c, d: events.append((e, c)))
    first = parse_status((tmp_path / "part0.status").read_text())
    cut = first.done[-1]
    assert [c for e, c in events if e == "retry"] == [cut]
    measured = result.frame[result.frame["error"].isna()]
    reps = measured.groupby("config_id")["rep"].apply(sorted).to_dict()
    victims = set(result.failures)  # the config the profiler died on, if the kill caught it running
    assert victims <= {2}
    assert reps == {c: [0, 1] for c in range(4) if c not in victims}  # every kept config whole, none twice


def test_a_config_whose_reps_never_all_reach_the_report_fails_with_that_reason(tmp_path, monkeypatch):
    # _LossyDriver's report has rep 0 only; 2 reps were asked for: each config is measured
    # again (a cut-off report looks the same), then recorded as failed, saying why.
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: _LossyDriver())
    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    target = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":slow"
    result = run_session(target, 4, settings)
    assert set(result.failures) == {0, 1, 2, 3}
    assert result.failures[0] == (
        "measured 3 times, but nsys's report lost it each time (the report held only some of its reps)"
    )
    assert {f.kind for f in result.failures.values()} == {"lost"}
    assert set(result.frame["failure_kind"].dropna()) == {"lost"}


# --- hangs outside a config's window, failed restarts, cut-off reps, hooks ---------------

PHASES = str(FIXTURES.parent / "targets" / "phases.py")


def _standin(monkeypatch, **kwargs):
    """The session tests' stand-in (tests/standins.py) for the profiler of this test."""
    monkeypatch.syspath_prepend(str(FIXTURES.parent))
    from standins import StatusDriver

    driver = StatusDriver.for_session(**kwargs)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    return driver


@pytest.mark.parametrize("profiled", [False, True], ids=["bare", "profiled"])
def test_a_worker_that_hangs_while_starting_is_one_clear_error(tmp_path, monkeypatch, profiled):
    monkeypatch.setenv("NSPROF_TEST_HANG", "start")  # the target's import sleeps for an hour
    if profiled:
        _standin(monkeypatch, profiler_flags=[])
    settings = ProfileSettings(
        backend="ncu" if profiled else "none",
        modes=("direct",),
        reps=1,
        warmup=0,
        timeout_s=2,
        phase_timeout_s=3,
        work_dir=tmp_path,
    )
    with pytest.raises(ToolFailed) as caught:
        run_session(PHASES + ":healthy", 4, settings)
    message = str(caught.value)
    assert "measured nothing" in message and "did not start within 3 s" in message, message
    assert "\n" not in message
    assert not _running(parse_status((tmp_path / "part0.status").read_text()).pid)


@pytest.mark.parametrize("profiled", [False, True], ids=["bare", "profiled"])
def test_a_worker_that_hangs_at_exit_loses_nothing(tmp_path, monkeypatch, profiled):
    monkeypatch.setenv("NSPROF_TEST_HANG", "exit")  # an atexit handler sleeps for an hour
    if profiled:
        _standin(monkeypatch, profiler_flags=[])
    settings = ProfileSettings(
        backend="ncu" if profiled else "none",
        modes=("direct",),
        reps=2,
        warmup=0,
        timeout_s=2,
        phase_timeout_s=3,
        work_dir=tmp_path,
    )
    result = run_session(PHASES + ":healthy", 4, settings)
    assert result.failures == {}
    assert len(list(tmp_path.glob("part*.status"))) == 1  # nothing to measure again
    # the wait is said (a thread the target left running stalled every session by the bound, silently)
    assert any("did not exit within 3 s" in note for note in result.notes), result.notes
    if profiled:
        measured = result.frame[result.frame["error"].isna()]
        assert measured.groupby("config_id").size().to_dict() == {
            c: 4 for c in range(4)
        }  # 2 reps x 2 kernels
    assert not _running(parse_status((tmp_path / "part0.status").read_text()).pid)


@pytest.mark.parametrize("how", ["fails", "hangs"])
def test_a_restart_that_fails_to_start_keeps_what_earlier_parts_measured(tmp_path, monkeypatch, how):
    # Configs 0-2 measured, config 3 crashes the worker, and the next worker cannot start.
    monkeypatch.setenv("NSPROF_TEST_POISON", str(tmp_path / "poison"))
    if how == "hangs":
        monkeypatch.setenv("NSPROF_TEST_POISON_HANG", "1")
    _standin(monkeypatch)
    settings = ProfileSettings(
        backend="ncu",
        modes=("direct",),
        reps=2,
        warmup=0,
        timeout_s=5,
        phase_timeout_s=3,
        work_dir=tmp_path / "work",
    )
    result = run_session(PHASES + ":restart", 6, settings)
    measured = result.frame[result.frame["error"].isna()]
    assert sorted(set(measured["config_id"])) == [0, 1, 2]
    assert set(result.failures) == {3, 4, 5}
    assert "illegal memory access" in result.failures[3]
    for config_id in (4, 5):
        reason = result.failures[config_id]
        assert reason.startswith("not run: the worker failed to start: "), reason
        assert reason.kind == "not_run"
        assert ("cuInit failed" if how == "fails" else "did not start within 3 s") in reason, reason
    rows = result.frame[result.frame["error"].notna()]
    assert sorted(rows["config_id"]) == [3, 4, 5]


class _CutKernelProfiler(_DyingProfiler):
    """Killed at config 2 like _DyingProfiler. Each rep launches two kernels; the report is cut
    off between the two kernels of the last finished config's last rep."""

    def finish(self, report_base, log):
        status = parse_status(report_base.with_suffix(".status").read_text())
        kernels = {c: [2, 2] for c in status.done}
        if self.runs == 1 and status.done:
            kernels[status.done[-1]] = [2, 1]
        report = report_base.with_suffix(".cut.json")
        report.write_text(json.dumps(kernels))
        return report

    def read(self, report, settings):
        from nsprof.schema import make_frame

        kernels = json.loads(report.read_text())
        return make_frame(
            [
                {
                    "source": "cut",
                    "config_id": int(c),
                    "mode": "direct",
                    "rep": rep,
                    "kernel": f"k{k}",
                    "duration_ns": 1000.0,
                }
                for c, counts in kernels.items()
                for rep, count in enumerate(counts)
                for k in range(count)
            ]
        )


def test_a_rep_with_a_missing_kernel_is_not_a_measurement(tmp_path, monkeypatch):
    driver = _CutKernelProfiler(die_at=2)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    events = []
    settings = ProfileSettings(
        backend="ncu", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    target = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":slow"
    result = run_session(target, 4, settings, on_progress=lambda e, c, d: events.append((e, c)))
    cut = parse_status((tmp_path / "part0.status").read_text()).done[-1]
    assert [c for e, c in events if e == "retry"] == [cut]
    measured = result.frame[result.frame["error"].isna()]
    kernels = measured.groupby(["config_id", "rep"]).size()
    assert (kernels == 2).all(), kernels  # the cut rep was measured again whole, never kept short
    assert set(measured["config_id"]) == set(range(4)) - set(result.failures)


def test_complete_configs_needs_every_rep_to_have_its_kernels():
    from nsprof.schema import make_frame
    from nsprof.session.reading import complete_configs

    settings = ProfileSettings(backend="ncu", modes=("direct", "graph"), reps=3)
    rows = []
    for config_id in range(4):
        for mode in ("direct", "graph"):
            for rep in range(3):
                count = 2
                if config_id == 1 and mode == "graph" and rep == 2:
                    count = 1  # cut off between the two kernels of the last rep
                if config_id == 3 and mode == "graph":
                    count = 1  # a whole-graph workload: one row per rep, the same in every rep
                rows += [
                    {"config_id": config_id, "mode": mode, "rep": rep, "kernel": f"k{k}", "duration_ns": 1.0}
                    for k in range(count)
                ]
    frame = make_frame(rows)
    frame = frame[
        ~((frame["config_id"] == 2) & (frame["rep"] == 2) & (frame["mode"] == "graph"))
    ]  # a missing rep
    assert complete_configs(frame, [0, 1, 2, 3], settings) == {0, 3}
    assert complete_configs(frame, [1, 3], settings) == {3}


def test_on_rows_gets_each_parts_configs_as_soon_as_its_report_is_read(tmp_path, monkeypatch):
    import pandas as pd

    _standin(monkeypatch)
    calls = []

    def on_rows(frame):
        calls.append((len(list(tmp_path.glob("part*.status"))), frame.copy()))

    settings = ProfileSettings(
        backend="ncu", modes=("direct",), reps=2, warmup=0, timeout_s=3, work_dir=tmp_path
    )
    result = run_session(TARGET, 9, settings, on_rows=on_rows)
    # part 0: config 0 measured, 1 crashed; part 1: 2, 3 timed out; part 2: 4, 5, 6, 7; part 3: 8
    assert [(parts, sorted(set(frame["config_id"]))) for parts, frame in calls] == [
        (1, [0, 1]),
        (2, [2, 3]),
        (3, [4, 5, 6, 7]),
        (4, [8]),
    ]
    # every row of the result went through on_rows exactly once, failures included
    order = ["config_id", "rep", "kernel"]
    combined = pd.concat([frame for _, frame in calls]).sort_values(order).reset_index(drop=True)
    pd.testing.assert_frame_equal(combined, result.frame.sort_values(order).reset_index(drop=True))


def test_ctrl_c_hands_over_the_interrupted_parts_whole_configs_then_raises(tmp_path, monkeypatch):
    import pandas as pd

    _standin(monkeypatch, lossy=True)  # nsys-like: kernels reach the report only at a clean worker exit
    calls = []

    def ctrl_c(event, config_id, detail):
        if event == "done" and config_id == 1:
            raise KeyboardInterrupt

    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    with pytest.raises(KeyboardInterrupt):
        run_session(PHASES + ":interruptible", 10, settings, on_progress=ctrl_c, on_rows=calls.append)
    status = parse_status((tmp_path / "part0.status").read_text())
    assert status.stopped and {0, 1} <= set(status.done)
    rows = pd.concat(calls)
    assert sorted(set(rows["config_id"])) == sorted(status.done) and rows["error"].isna().all()
    assert (rows.groupby("config_id").size() == 4).all()  # whole: 2 reps x 2 kernels
    assert not _running(status.pid)


def test_the_worker_reports_its_device(tmp_path):
    settings = ProfileSettings(
        backend="none", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    result = run_session(PHASES + ":healthy", 4, settings)
    assert result.device == {"uuid": "", "name": "cpu"}
    assert parse_status((tmp_path / "part0.status").read_text()).device == {"uuid": "", "name": "cpu"}


def test_the_status_protocol_reads_what_the_worker_writes(tmp_path):
    from nsprof.worker.protocol import Status

    path = tmp_path / "status"
    status = Status(str(path))
    status.write("pid", 12)
    status.device({"uuid": "GPU-5f2b3c1e-0000-1111-2222-333344445555", "name": "NVIDIA H200", "index": 0})
    status.write("start", 0)
    status.write("done", 0)
    status.write("start", 1)
    status.write("stopped")
    parsed = parse_status(path.read_text())
    assert parsed.pid == 12 and parsed.done == [0] and parsed.stopped and not parsed.ended
    assert parsed.device == {
        "uuid": "GPU-5f2b3c1e-0000-1111-2222-333344445555",
        "name": "NVIDIA H200",
        "index": 0,
    }


def test_ctrl_c_while_the_worker_exits_lets_it_exit_cleanly(tmp_path, monkeypatch):
    # nsys-like stand-in behind a profiler process: a worker killed by a signal, even after its
    # last config, loses every kernel of its run. Ctrl-C while it exits must let it finish.
    import pandas as pd

    monkeypatch.setenv("NSPROF_TEST_SLOW_EXIT", "2")
    _standin(monkeypatch, lossy=True, profiler_flags=[])
    calls = []

    def ctrl_c(event, config_id, detail):
        if event == "done" and config_id == 3:
            raise KeyboardInterrupt

    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path
    )
    with pytest.raises(KeyboardInterrupt):
        run_session(PHASES + ":healthy", 4, settings, on_progress=ctrl_c, on_rows=calls.append)
    assert int((tmp_path / "part0.exit").read_text()) >= 0, "the worker was killed by a signal"
    rows = pd.concat(calls)
    assert sorted(set(rows["config_id"])) == [0, 1, 2, 3]


def test_a_config_that_finished_as_its_timeout_kill_landed_is_measured_not_failed(tmp_path):
    """The follower chose config 0 for its timeout from a status it read just before the kill, and the
    worker wrote `done 0` and `start 2` in between: config 0 is whole (kept, no failure), and config 2,
    killed by nsprof after a moment's run, is neither its timeout's nor a crash: it is run again."""
    import sys

    sys.path.insert(0, str(FIXTURES.parent))
    from standins import StatusDriver

    from nsprof.schema import Points
    from nsprof.session.parts import make_job
    from nsprof.session.reading import read_part
    from nsprof.session.request import SessionRun
    from nsprof.session.supervise import RunEnd

    settings = ProfileSettings(backend="ncu", modes=("direct",), reps=2, timeout_s=2, work_dir=tmp_path)
    run = SessionRun(
        target=TARGET,
        ids=(0, 2, 4),
        points=Points(9),
        settings=settings,
        driver=StatusDriver(),
        work_dir=tmp_path,
    )
    base = tmp_path / "part0"
    make_job(run, [0, 2, 4], base.with_suffix(".status")).write(base.with_suffix(".job.json"))
    base.with_suffix(".status").write_text("pid 1\nstart 0\ndone 0\nstart 2\n")
    base.with_suffix(".log").write_text("")
    part = read_part(run, base, base.with_suffix(".log"), RunEnd(returncode=-9, timed_out=0))
    assert dict(part.failures) == {} and part.crashed is None
    assert sorted(set(part.kept["config_id"])) == [0]
