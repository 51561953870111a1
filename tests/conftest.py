"""Shared fixtures, and the one place that decides whether GPU tests run."""

from __future__ import annotations

import functools
import lzma
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import zlib
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).parent / "standins.py"


@functools.cache
def gpu_available() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def pytest_configure(config):
    """Every child process of a test imports this checkout's nsprof, whatever its cwd: the checkout
    comes first on PYTHONPATH for the whole run (one environment for all, so that a server and the
    clients a test starts find each other fit)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if paths[:1] != [str(REPO)]:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *paths])
    # nsprof keeps the temporary folder whose logs explain a failure (and a SIGKILLed nsprof cannot
    # remove its own): the suite's go to a folder of the run's own, removed at its end, not into the
    # machine's $TMPDIR. Child processes inherit it; tempfile reads $TMPDIR once, hence the reset.
    config._nsprof_tmp = tempfile.mkdtemp(prefix="nsprof-tests-")
    os.environ["TMPDIR"] = config._nsprof_tmp
    tempfile.tempdir = None
    # A module- or session-scoped fixture runs before each test's own lock folder is set
    # (own_gpu_lock_folder): it gets one of the run's own, never the machine-wide lock.
    os.environ["NSPROF_LOCK_DIR"] = os.path.join(config._nsprof_tmp, "gpu-locks")
    # The targets' saved views (nsprof.space_view) of this run's own, never the user's.
    os.environ["XDG_CACHE_HOME"] = os.path.join(config._nsprof_tmp, "cache")
    # a machine's own CUDA_DEVICE_ORDER would add nsprof's line about it to output the tests read
    os.environ.pop("CUDA_DEVICE_ORDER", None)
    # Bytecode is written and read again, even where the machine sets PYTHONDONTWRITEBYTECODE: the suite
    # starts about 1,500 Python processes, each of which would compile nsprof's modules from source, and
    # each xdist worker would rewrite every test module's asserts again (together about a fifth of its CPU).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    # A suite started as a background job of a script (`pytest ... &`) inherits SIGINT ignored, and
    # so would every nsprof a test starts and then Ctrl-Cs: it would ignore the Ctrl-C, as a Python
    # started so does, and the test hang. As in an interactive run: a KeyboardInterrupt here, and
    # the default (Python's KeyboardInterrupt) in every child.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Likewise a suite started under nohup inherits SIGHUP ignored, and the tests that hang up an
    # nsprof would wait for an exit that never comes.
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_unconfigure(config):
    folder = getattr(config, "_nsprof_tmp", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without xdist knows no such hook
def pytest_xdist_auto_num_workers(config):
    """Two xdist workers more than the CPUs this process may run on: nearly half of each test's time
    is spent waiting on child processes (workers, stand-in profilers, servers, timeouts), and with one
    more worker only, the CPUs idled about a sixth of the run (two CPUs: 281 s with 3 workers, 270 s
    with 4). PYTEST_XDIST_AUTO_NUM_WORKERS, if set, decides."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return len(usable) + 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    # The modules in a fixed order that is not the alphabet's, each module's tests together (its
    # fixtures made once): the modules whose tests mostly wait out timeouts (session, pool_compile,
    # replay_runs, serve) sit next to each other alphabetically, and the workers waited at once while
    # the CPUs idled. The order is the same in every xdist worker, as xdist requires.
    items.sort(key=lambda item: zlib.crc32(item.path.name.encode()))
    if gpu_available():
        # Each test has a GPU lock of its own (own_gpu_lock_folder), so under xdist two GPU tests
        # would share the GPU and measure each other's kernels: one group, run one after another.
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.xdist_group("gpu"))
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_nsprof(
    *args,
    env: dict[str, str | None] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 300,
    standins: bool = False,
    in_process: bool = False,
    program: Path | None = None,
    **run_kwargs,
) -> subprocess.CompletedProcess:
    """nsprof's command line run to its end: in a child process `python -m nsprof ARGS`, or with
    `standins` `python tests/standins.py ARGS` (every ncu and nsys session a stand-in: no tool needed).

    in_process: nsprof's main() in this process instead, through click's CliRunner, for options, help,
    reading reports, and runs whose profilers and workers (children either way) are not what is
    tested: no interpreter to start. With `standins`, the stand-ins are installed for that run only.
    Keep nsprof in a child process where the behaviour crosses one: signals, fd 0 and 1 (pipes, FIFOs,
    terminals: in-process, stdout is only what Python writes), locks held by nsprof, its exit. A run
    in-process past `timeout` ends this whole test process (faulthandler): xdist reports the test it ran
    as crashed, instead of a worker hung for good.

    program: a Python file run instead (one that runs nsprof's main itself, `standins` or not).

    env: variables set over os.environ's (a value None removes one). stdout and stderr are captured, as
    text unless text=False; the other run_kwargs (input, stdin) go to subprocess.run.
    """
    if in_process:
        import faulthandler

        faulthandler.dump_traceback_later(timeout, exit=True)
        try:
            with (
                _standins_installed((env or {}).get("NSPROF_STANDIN_TIMERS") == "1")
                if standins
                else nullcontext()
            ):
                return _run_in_process([str(a) for a in args], env, cwd, **run_kwargs)
        finally:
            faulthandler.cancel_dump_traceback_later()
    environment = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = str(value)
    command = [str(program)] if program else [str(STANDINS)] if standins else ["-m", "nsprof"]
    run_kwargs.setdefault("text", True)
    return subprocess.run(
        [sys.executable, *command, *map(str, args)],
        capture_output=True,
        env=environment,
        cwd=cwd,
        timeout=timeout,
        **run_kwargs,
    )


@contextmanager
def _standins_installed(timers: bool):
    """tests/standins.py's drivers as ncu and nsys (and the fast timers' with `timers`), as its command line
    has them, for one run in this process; the backends as they were after it."""
    import standins

    from nsprof import truth
    from nsprof.drivers import registry

    saved = dict(registry._DRIVERS), dict(truth._backends), set(truth._conditioned)
    standins.install(timers=timers)
    try:
        yield
    finally:
        for now, before in zip((registry._DRIVERS, truth._backends, truth._conditioned), saved):
            now.clear()
            now.update(before)


def _run_in_process(args, env, cwd, text: bool = True, input=None) -> subprocess.CompletedProcess:
    """run_nsprof(in_process=True): main() under CliRunner's isolation (its own stdin, stdout, stderr
    and environment), in `cwd`; the signal handlers main() installs are put back after."""
    import inspect
    import signal
    import warnings

    from click.testing import CliRunner

    from nsprof.cli import main

    # click < 8.2 mixes stderr into stdout unless told not to
    separate = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
    runner = CliRunner(**separate)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    tempdir = tempfile.tempdir  # gettempdir() read again: a TMPDIR in `env` is this run's, as in a child
    tempfile.tempdir = None
    here = os.getcwd()
    code = 0
    environment = {name: None if value is None else str(value) for name, value in (env or {}).items()}
    try:
        if cwd is not None:
            os.chdir(cwd)
        with runner.isolation(input=input, env=environment) as streams:
            # Python's warnings reach stderr as in a fresh interpreter (its default filters), not
            # pytest's record of them, so that a test of what stderr holds sees them
            with warnings.catch_warnings(record=True) as caught:
                warnings.resetwarnings()
                for category in (
                    DeprecationWarning,
                    PendingDeprecationWarning,
                    ImportWarning,
                    ResourceWarning,
                ):
                    warnings.simplefilter("ignore", category)
                try:
                    main(args)
                except SystemExit as exc:
                    if exc.code is None or isinstance(exc.code, int):
                        code = exc.code or 0
                    else:  # sys.exit("text"): the interpreter prints it and exits 1
                        print(exc.code, file=sys.stderr)
                        code = 1
            for w in caught:
                sys.stderr.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
            sys.stdout.flush()
            sys.stderr.flush()
            out, err = streams[0].getvalue(), streams[1].getvalue()
    finally:
        os.chdir(here)
        tempfile.tempdir = tempdir
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    if text:
        out, err = out.decode(), err.decode(errors="backslashreplace")
    return subprocess.CompletedProcess(["nsprof", *args], code, out, err)


def report_of(ranking, configs: list, target: str = "target.py:space"):
    """The TuneReport of one ranking (an nsprof.analysis.tune_report.Ranking) of a target without
    shapes: what tune returns with one truth, for the renderers."""
    from nsprof.analysis.tune_report import ShapeReport, TuneReport

    return TuneReport(target, configs, [ShapeReport({ranking.truth: ranking}, ranking.truth)])


def wait_for(predicate, timeout_s: float = 60.0) -> bool:
    """Whether predicate() came true within timeout_s (generous: a busy machine must not fail a test;
    a hang never ends at all), polling every 50 ms."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan killed by a test may wait for PID 1 to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.fixture(autouse=True)
def own_gpu_lock_folder(tmp_path, monkeypatch):
    """Every test gets its own GPU-lock folder: a real nsprof (or another test run) holding the
    machine-wide lock must never make a test wait or fail, and no test may take that lock."""
    folder = tmp_path / "gpu-locks"
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def ncu_rep_dir(tmp_path_factory) -> Path:
    """The .ncu-rep fixtures, decompressed (they are stored xz-compressed: 10 MB -> 0.2 MB)."""
    out = tmp_path_factory.mktemp("ncu_rep")
    for packed in FIXTURES.glob("*.ncu-rep.xz"):
        (out / packed.name[: -len(".xz")]).write_bytes(lzma.decompress(packed.read_bytes()))
    return out


# A stand-in target of known configs (tests/standins.py's StatusDriver reads their "ns", "ns_reps",
# "ns_sigma"...), whose launch appends "pid config" to a log: the order of launches in every worker
# process can be read back.
NOISY_TARGET = """
import os
import nsprof.space

def build(config):
    def launch():
        with open({log!r}, "a") as log:
            log.write(f"{{os.getpid()}} {{config['id']}}\\n")
    return launch

space = nsprof.space.Space(configs={configs!r}, build=build, device="cpu")
"""


@pytest.fixture
def noisy(tmp_path, monkeypatch):
    """make(configs): the stand-in target of `configs` under the "noisy" backend (the stand-in driver),
    and its launch log."""
    from standins import StatusDriver

    from nsprof.drivers import registry

    registry.register("noisy", StatusDriver)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))

    def make(configs):
        log = tmp_path / "launches.log"
        log.write_text("")
        (tmp_path / "noisy_target.py").write_text(NOISY_TARGET.format(log=str(log), configs=configs))
        return str(tmp_path / "noisy_target.py") + ":space", log

    yield make
    registry.unregister("noisy")
