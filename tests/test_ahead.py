"""Workers started ahead (nsprof.session.ahead): tune's adaptive sessions run in a worker launched before
the first pass, which imported the target meanwhile; one never needed ends cleanly and leaves nothing.
Real worker processes under the stand-in driver (tests/standins.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_adaptive import IDENTICAL, _sessions, _settings  # noqa: E402

from nsprof.worker.protocol import EXIT_PARENT_GONE, Job, ahead_file, parse_status  # noqa: E402

SEPARATED = [{"id": 0, "ns": 1000.0}, {"id": 1, "ns": 2000.0}, {"id": 2, "ns": 3000.0}]


def _ended() -> None:
    """Wait for the threads that end the workers started ahead and never taken (Ahead.close)."""
    for thread in threading.enumerate():
        if thread.name == "nsprof-ahead-end":
            thread.join(60)
            assert not thread.is_alive()


def _alive_with(text: str) -> list[int]:
    """The pids of the processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in command:
                found.append(int(entry.name))
    return found


def test_adaptive_sessions_run_in_workers_started_before_the_first_pass(noisy, tmp_path):
    from nsprof.tune import tune

    target, log = noisy(IDENTICAL)
    result = tune(target, _settings(tmp_path, max_reps=8))
    _ended()
    adaptive = result.ranking.adaptive
    assert adaptive.sessions >= 1
    work = tmp_path / "work"
    first = parse_status((work / "part0.status").read_text())
    sessions = [parse_status((work / f"ahead{n}.status").read_text()) for n in range(adaptive.sessions)]
    for number, session in enumerate(sessions):
        # its worker began before the first pass's (launched first) and had imported the target before
        # its job came: the session's phases hold no import
        assert session.time_of("process") <= first.time_of("process"), number
        assert session.time_of("target") < session.time_of("device"), number
        assert session.ended and session.done, number
    # each session a process of its own, as a close winner's check needs
    processes = _sessions(log)
    assert len(processes) == 1 + adaptive.sessions
    assert len({session.pid for session in sessions} | {first.pid}) == 1 + adaptive.sessions
    # the one started for a next session that never came is gone, files and process
    assert not (work / f"ahead{adaptive.sessions}.status").exists()
    assert not list(work.glob(f"ahead{adaptive.sessions}.*"))
    assert not _alive_with(str(work))


def test_a_worker_started_ahead_and_never_needed_leaves_nothing(noisy, tmp_path):
    from nsprof.tune import tune

    target, log = noisy(SEPARATED)
    result = tune(target, _settings(tmp_path))
    _ended()
    assert result.ranking.adaptive.sessions == 0 and result.ranking.best_config_id == 0
    assert len(_sessions(log)) == 1  # the first pass: the worker started ahead launched nothing
    work = tmp_path / "work"
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("ahead")) == []
    assert not _alive_with(str(work))


@pytest.mark.parametrize("without", [{"budget_s": 0}, {"max_reps": 5}], ids=["budget 0", "max-reps = reps"])
def test_no_worker_is_started_ahead_without_adaptive_reps(noisy, tmp_path, monkeypatch, without):
    from nsprof.session import ahead
    from nsprof.tune import tune

    started = []
    monkeypatch.setattr(ahead.Ahead, "start", classmethod(lambda cls, *a: started.append(a)))
    target, _ = noisy(IDENTICAL)
    tune(target, _settings(tmp_path, **without))
    assert started == []


def _worker(tmp_path: Path, target: str, pipe_fds: tuple[int, int] | None = None):
    """A worker started ahead of its job by hand: its job file (absent), status file and process."""
    job_file = tmp_path / "w.job.json"
    status = tmp_path / "w.status"
    read_fd = pipe_fds[0] if pipe_fds else -1
    inode = os.fstat(read_fd).st_ino if pipe_fds else 0
    Job(target, [], str(status), watch_fd=read_fd, watch_inode=inode).write(ahead_file(job_file))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsprof.worker", str(job_file)],
        pass_fds=(read_fd,) if pipe_fds else (),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return job_file, status, proc


def _target(tmp_path: Path) -> str:
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{'id': 0}], build=lambda c: (lambda: None), device='cpu')\n"
    )
    return str(tmp_path / "t.py") + ":space"


def _wait_for_mark(status: Path, word: str) -> None:
    import time

    from nsprof.serve_files import read_or_empty

    deadline = time.monotonic() + 60
    while word not in read_or_empty(status) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert word in read_or_empty(status)


def test_a_worker_started_ahead_runs_its_job_once_written(tmp_path):
    target = _target(tmp_path)
    job_file, status, proc = _worker(tmp_path, target)
    _wait_for_mark(status, " target")
    Job(target, [0], str(status), modes=["direct"], reps=2).write(job_file)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    read = parse_status(status.read_text())
    assert read.done == [0] and read.ended and read.device == {"uuid": "", "name": "cpu"}


def test_a_worker_waiting_for_its_job_ends_when_nsprof_is_gone(tmp_path):
    read_fd, write_fd = os.pipe()
    try:
        job_file, status, proc = _worker(tmp_path, _target(tmp_path), (read_fd, write_fd))
        _wait_for_mark(status, " target")
    finally:
        os.close(read_fd)
    os.close(write_fd)  # nsprof's end of the death pipe: as if it died
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PARENT_GONE, out
    assert not job_file.exists()


@pytest.fixture
def standin(tmp_path, monkeypatch):
    from standins import StatusDriver

    from nsprof.drivers import registry

    registry.register("standin", StatusDriver)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path / "locks"))
    yield StatusDriver.for_session()
    registry.unregister("standin")


def _profile(tmp_path, **kwargs):
    from nsprof.settings import ProfileSettings

    return ProfileSettings(backend="standin", modes=("direct",), reps=2, work_dir=tmp_path / "work", **kwargs)


def test_a_worker_started_ahead_holds_no_gpu_lock_held_meanwhile(tmp_path, standin):
    """Started while this thread holds the GPU lock (a first pass runs), it must not keep the lock from
    the session it waits for: flock belongs to the open file, which an inherited descriptor shares."""
    from nsprof.host.lock import gpu_lock
    from nsprof.session.ahead import Ahead

    with gpu_lock(0):
        ahead = Ahead.start(_target(tmp_path), _profile(tmp_path), standin)
    try:
        locks = tmp_path / "locks"
        held = [os.readlink(fd) for fd in Path(f"/proc/{ahead.proc.pid}/fd").iterdir() if fd.exists()]
        assert not [path for path in held if path.startswith(str(locks))]
        with gpu_lock(0):  # free again: taken at once
            pass
    finally:
        ahead.close()
        _ended()


def test_a_session_takes_the_worker_started_for_it_and_a_dead_one_is_replaced(tmp_path, standin):
    from nsprof.session import run_session
    from nsprof.session.ahead import Ahead

    target = _target(tmp_path)
    settings = _profile(tmp_path)
    ahead = Ahead.start(target, settings, standin)
    measured = run_session(target, 1, settings, driver=standin, ahead=ahead)
    assert ahead.handed and sorted(measured.frame["config_id"].dropna().unique()) == [0]
    assert (ahead.base.with_suffix(".status")).exists()  # its run's files are the session's, kept
    ahead.close()  # the session had it: nothing to end

    dead = Ahead.start(target, settings, standin)
    dead.proc.kill()
    dead.proc.wait()
    measured = run_session(target, 1, settings, driver=standin, ahead=dead)
    _ended()
    assert not dead.handed and sorted(measured.frame["config_id"].dropna().unique()) == [0]
    assert not list((tmp_path / "work").glob(f"{dead.base.name}.*"))  # the dead one's files went


def test_a_worker_started_for_other_settings_is_not_taken(tmp_path, standin):
    from nsprof.session.ahead import Ahead

    target = _target(tmp_path)
    ahead = Ahead.start(target, _profile(tmp_path), standin)
    try:
        other = _profile(tmp_path, python=sys.executable + "-other")
        assert ahead.take(target, other, standin) is None
        assert ahead.take(target + "x", _profile(tmp_path), standin) is None
        assert ahead.take(target, _profile(tmp_path), standin) is ahead
        assert ahead.take(target, _profile(tmp_path), standin) is None  # once
    finally:
        ahead.close()  # taken, but no session ran it: it ends
        _ended()
    assert not list((tmp_path / "work").glob(f"{ahead.base.name}.*"))


COMPILED_TARGET = """
import json
import os
import nsprof.space

def compile(config):
    with open({log!r}, "a") as log:
        log.write(f"{{os.getpid()}} {{config['id']}}\\n")

def build(config):
    return lambda: None

space = nsprof.space.Space(configs={configs!r}, build=build, compile=compile, device="cpu")
"""


def test_an_adaptive_session_in_a_worker_started_ahead_compiles_there_with_no_compile_step_beside(
    noisy, tmp_path
):
    """The compile step beside a session is a process of its own, whose import (TileLang's, on the H200 6-9 s)
    the session would wait for: the worker started ahead has its imports paid, and compiles itself."""
    from nsprof.tune import tune

    noisy(IDENTICAL)  # the stand-in driver, registered
    compiles = tmp_path / "compiles.log"
    (tmp_path / "compiled_target.py").write_text(COMPILED_TARGET.format(log=str(compiles), configs=IDENTICAL))
    result = tune(str(tmp_path / "compiled_target.py") + ":space", _settings(tmp_path, max_reps=8))
    _ended()
    assert result.ranking.adaptive.sessions >= 1
    work = tmp_path / "work"
    first = json.loads((work / "part0.job.json").read_text())
    assert first["compiled"] and not first["compile_here"]  # the first pass: its compile step beside it
    adaptive = json.loads((work / "ahead0.job.json").read_text())
    assert adaptive["compile_here"] and not adaptive["compiled"]
    session_pid = parse_status((work / "ahead0.status").read_text()).pid
    by_pid: dict[int, list[int]] = {}
    for line in compiles.read_text().splitlines():
        pid, config = map(int, line.split())
        by_pid.setdefault(pid, []).append(config)
    assert sorted(by_pid.pop(session_pid)) == sorted(adaptive["config_ids"])  # compiled in its worker
    assert sorted(c for configs in by_pid.values() for c in configs) == [0, 1, 2]  # the first pass's step


def test_a_worker_started_ahead_is_ended_where_a_server_measures_its_session(tmp_path, standin, monkeypatch):
    """A server found by the session (after its worker was started ahead) measures it: the worker started
    for it ends then, rather than with the tune (one more would pile up at every adaptive session)."""
    from nsprof.session import run as run_module
    from nsprof.session import run_session
    from nsprof.session.ahead import Ahead
    from nsprof.session.parts import run_parts

    monkeypatch.setattr(run_module, "find_server", lambda driver, settings: ({"pid": 1}, None))
    monkeypatch.setattr(run_module, "run_served", lambda run, server: run_parts(run))
    monkeypatch.setattr(type(standin), "serves", True)
    target = _target(tmp_path)
    ahead = Ahead.start(target, _profile(tmp_path), standin)
    measured = run_session(target, 1, _profile(tmp_path), driver=standin, ahead=ahead)
    assert sorted(measured.frame["config_id"].dropna().unique()) == [0]
    assert not ahead.handed and ahead.taken  # closed at once, not left for its owner
    _ended()
    assert ahead.proc.returncode is not None
    assert not list((tmp_path / "work").glob(f"{ahead.base.name}.*"))


SLOW_IMPORT = """
import time
import nsprof.space
time.sleep(3600)
space = nsprof.space.Space(configs=[{'id': 0}], build=lambda c: (lambda: None), device='cpu')
"""


def test_closing_a_worker_still_importing_stops_it_cleanly(tmp_path, standin):
    """The worker started for a next session that never comes is often still importing when its owner is
    done: it is told to stop (SIGTERM: it stops cleanly, its profiler with it), not waited for."""
    from nsprof.session.ahead import Ahead
    from nsprof.worker.protocol import EXIT_STOPPED

    (tmp_path / "slow.py").write_text(SLOW_IMPORT)
    ahead = Ahead.start(str(tmp_path / "slow.py") + ":space", _profile(tmp_path), standin)
    _wait_for_mark(ahead.base.with_suffix(".status"), "watch")  # importing now
    ahead.close()
    _ended()
    assert ahead.proc.returncode == EXIT_STOPPED  # stopped by its SIGTERM, not killed with its group
    assert not list((tmp_path / "work").glob("ahead*"))


LOCK_SESSION = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from standins import StatusDriver
from nsprof.drivers import registry
from nsprof.session import run_session
from nsprof.session.ahead import Ahead
from nsprof.settings import ProfileSettings

registry.register("standin", StatusDriver)
driver = StatusDriver.for_session(profiler_flags=[])
settings = ProfileSettings(backend="standin", modes=("direct",), reps=2, timeout_s=600, work_dir=Path("wd"))
ahead = Ahead.start("hangs.py:space", settings, driver)
run_session("hangs.py:space", 2, settings, driver=driver, ahead=ahead)
"""


def test_a_session_in_a_worker_started_ahead_keeps_the_gpu_lock_while_what_it_started_runs(tmp_path):
    """nsprof SIGKILLed while the session's worker, started ahead, runs a config that started a helper: the
    lock stays held until the helper is gone, as for a worker launched with the lock (test_lock_children)."""
    import signal
    import time

    from conftest import running
    from test_lock_children import HANGS

    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock

    (tmp_path / "hangs.py").write_text(HANGS)
    (tmp_path / "session.py").write_text(LOCK_SESSION.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    nsprof = subprocess.Popen([sys.executable, "session.py"], cwd=tmp_path, env=env)
    helper = None
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "helper.pid").exists():
            assert time.monotonic() < deadline and nsprof.poll() is None
            time.sleep(0.05)
        helper = int((tmp_path / "helper.pid").read_text())
        with pytest.raises(GpuBusy):  # the session holds it
            with gpu_lock(0):
                pass
        nsprof.send_signal(signal.SIGKILL)
        nsprof.wait()
        # the worker sees nsprof's pipe close and kills what holds the lock; only then is it free
        deadline = time.monotonic() + 120
        while True:
            try:
                with gpu_lock(0):
                    break
            except GpuBusy:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert not running(helper)
    finally:
        if nsprof.poll() is None:
            nsprof.kill()
        if helper is not None and running(helper):
            os.kill(helper, signal.SIGKILL)


def test_a_worker_started_ahead_that_ends_before_its_job_is_replaced_by_one_of_the_session(
    tmp_path, standin, monkeypatch
):
    """Its import crashed, say, after the session took it: the session measures in a worker of its own, and
    the death pipe it shares with that worker is closed once (a number closed twice may be another file's)."""
    from nsprof.host.children import kill_group
    from nsprof.session import run_session
    from nsprof.session.ahead import Ahead

    target = _target(tmp_path)
    ahead = Ahead.start(target, _profile(tmp_path), standin)
    taken = Ahead.take

    def take_then_die(self, *args):
        got = taken(self, *args)
        kill_group(self.proc)  # gone between the take and the job
        return got

    monkeypatch.setattr(Ahead, "take", take_then_die)
    measured = run_session(target, 1, _profile(tmp_path), driver=standin, ahead=ahead)
    _ended()
    assert not ahead.handed and sorted(measured.frame["config_id"].dropna().unique()) == [0]
    assert [note.endswith("the session ran in a worker of its own") for note in measured.notes] == [True]
    assert not list((tmp_path / "work").glob(f"{ahead.base.name}.*"))
    read_fd, write_fd = os.pipe()  # numbers the session's pipe had: still this pipe's after every close
    try:
        ahead.pipe.close()
        os.write(write_fd, b"x")
        assert os.read(read_fd, 1) == b"x"
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_dead_worker_started_ahead_in_a_folder_of_its_own_leaves_that_folder_to_the_session(
    tmp_path, standin, monkeypatch
):
    """Without --work-dir the session works in the folder the worker started ahead made. That worker found
    gone and closed, its end (a thread, which may come late: while the session's own worker runs there)
    removes its own files, never the folder."""
    from nsprof.host.children import kill_group
    from nsprof.session import run_session
    from nsprof.session.ahead import Ahead
    from nsprof.settings import ProfileSettings

    settings = ProfileSettings(
        backend="standin", modes=("direct",), reps=2
    )  # no work_dir: a folder of its own
    target = _target(tmp_path)
    ahead = Ahead.start(target, settings, standin)
    taken, end = Ahead.take, Ahead._end

    def take_then_die(self, *args):
        got = taken(self, *args)
        kill_group(self.proc)
        return got

    def end_once_the_sessions_worker_runs(self, bound_s):
        _wait_for_mark(self.folder / "part0.status", "pid")
        end(self, bound_s)

    monkeypatch.setattr(Ahead, "take", take_then_die)
    monkeypatch.setattr(Ahead, "_end", end_once_the_sessions_worker_runs)
    measured = run_session(target, 1, settings, driver=standin, ahead=ahead)
    _ended()
    assert sorted(measured.frame["config_id"].dropna().unique()) == [0], measured.failures
    assert not ahead.folder.exists()  # the session's temporary folder, removed by the session at its end


def test_a_worker_started_ahead_dead_while_its_profiler_runs_on_is_replaced(tmp_path, monkeypatch):
    """The worker died waiting for its job (killed for memory, say) while its profiler still runs (nsys
    writes its report meanwhile). The profiler holds the worker's end of the locks' socket, so handing the
    job raises nothing: the session must see that the job was never taken and run it in a worker of its own."""
    import signal

    from standins import StatusDriver

    from nsprof.drivers import registry
    from nsprof.host.children import pid_alive
    from nsprof.session import run_session
    from nsprof.session.ahead import Ahead

    registry.register("standin", StatusDriver)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path / "locks"))
    try:
        driver = StatusDriver.for_session(profiler_flags=["--exit-delay", "3"])
        target = _target(tmp_path)
        ahead = Ahead.start(target, _profile(tmp_path), driver)
        status = ahead.base.with_suffix(".status")
        _wait_for_mark(status, " target")
        pid = parse_status(status.read_text()).pid
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):  # reaped by its profiler, which goes on for its exit delay
            threading.Event().wait(0.02)
        measured = run_session(target, 1, _profile(tmp_path), driver=driver, ahead=ahead)
        assert sorted(measured.frame["config_id"].dropna().unique()) == [0], measured.failures
        assert not measured.failures
        assert measured.notes == [
            "the worker started ahead ended before it took its job: the session ran in a worker of its own"
        ]
    finally:
        _ended()
        registry.unregister("standin")


def test_a_worker_started_ahead_under_a_profiler_that_passes_no_descriptor_still_measures(
    tmp_path, monkeypatch
):
    """A profiler that passes the worker no inherited descriptor (the lock channel's number then names
    nothing, or another file): the worker says so and measures, as a worker launched fresh there does."""
    from standins import StatusDriver

    from nsprof.drivers import registry
    from nsprof.session import run_session
    from nsprof.session.ahead import Ahead

    registry.register("standin", StatusDriver)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path / "locks"))
    try:
        driver = StatusDriver.for_session(profiler_flags=["--close-fds"])
        target = _target(tmp_path)
        ahead = Ahead.start(target, _profile(tmp_path), driver)
        measured = run_session(target, 1, _profile(tmp_path), driver=driver, ahead=ahead)
        assert ahead.handed and sorted(measured.frame["config_id"].dropna().unique()) == [0]
        assert "no channel for the GPU lock" in ahead.base.with_suffix(".log").read_text()
    finally:
        registry.unregister("standin")


def test_a_session_under_application_replay_does_not_take_a_worker_started_ahead(tmp_path, standin):
    """ncu's application replay (the L2 check's sessions) runs the worker once per pass: the passes after
    the first would find the job there and no lock to take."""
    from dataclasses import replace

    from nsprof.session.ahead import Ahead

    target = _target(tmp_path)
    ahead = Ahead.start(target, _profile(tmp_path), standin)
    try:
        assert ahead.take(target, replace(_profile(tmp_path), l2_hit_rate=True), standin) is None
    finally:
        ahead.close()
        _ended()


def test_a_worker_taken_by_a_session_that_never_ran_ends_with_its_pipe_closed(tmp_path, standin):
    """The session took it but found the GPU busy: nothing ran, so its owner's close ends it whole, death
    pipe included (the session's runs close that pipe only once they have it)."""
    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock
    from nsprof.session import run_session
    from nsprof.session.ahead import Ahead

    target = _target(tmp_path)
    ahead = Ahead.start(target, _profile(tmp_path), standin)
    held, release = threading.Event(), threading.Event()

    def hold():
        with gpu_lock(0):
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60)
        with pytest.raises(GpuBusy):
            run_session(target, 1, _profile(tmp_path), driver=standin, ahead=ahead)
    finally:
        release.set()
        holder.join()
    assert ahead.taken and not ahead.handed
    ahead.close()
    _ended()
    assert ahead.pipe.read_fd == -1 and ahead.proc.returncode is not None
    assert not list((tmp_path / "work").glob(f"{ahead.base.name}.*"))


def test_a_later_truths_first_pass_and_the_probes_run_in_workers_started_ahead(tmp_path, monkeypatch):
    """With two truths, the second's first pass (started when tune starts) and each probe of their
    disagreement (started when the probes are known) run in workers started ahead; the first truth's first
    pass, which nothing precedes, in one of its own."""
    from standins import StatusDriver
    from test_crosstruth import L2_EXPLAINS, TARGET
    from test_crosstruth import settings as truth_settings

    from nsprof.drivers import registry
    from nsprof.drivers.ncu import NcuDriver
    from nsprof.drivers.nsys import NsysDriver
    from nsprof.tune import tune

    registry.register("lab", type("Lab", (StatusDriver,), {"labels_like": NcuDriver}))
    registry.register("field", type("Field", (StatusDriver,), {"labels_like": NsysDriver}))
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("FEED_FILE", str(tmp_path / "fed.json"))
    try:
        (tmp_path / "t.py").write_text(TARGET.format(ns_at=L2_EXPLAINS))
        result = tune(
            f"{tmp_path / 't.py'}:space", truth_settings(tmp_path, truths=("lab", "field"), budget_s=0)
        )
        _ended()
    finally:
        registry.unregister("lab")
        registry.unregister("field")
    (explanation,) = result.shapes[0].cross.explanations
    assert len(explanation.probes) == 3 and explanation.cause == "cache_control"
    work = tmp_path / "wd"
    parts = sorted(work.glob("part*.status"))
    aheads = [parse_status(path.read_text()) for path in sorted(work.glob("ahead*.status"))]
    assert [p.name for p in parts] == ["part0.status"]  # the first truth's first pass
    assert len(aheads) == 1 + 3 and all(a.ended and a.done for a in aheads)  # field's first pass, 3 probes
    first = parse_status(parts[0].read_text())
    assert min(a.time_of("process") for a in aheads) <= first.time_of("process")  # field's: before lab's
    assert all(a.time_of("target") < a.time_of("device") for a in aheads)
    assert not _alive_with(str(work))
