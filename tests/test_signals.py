"""nsprof signalled or killed from outside (timeout, Slurm, systemd, the OOM killer), through real
processes: a real nsprof parent (tests/targets/run_nsprof.py), real profiler stand-ins and workers,
real signals. Nothing may outlive nsprof, and SIGTERM/SIGHUP keep what was measured, like Ctrl-C."""

from __future__ import annotations

import csv
import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, wait_for
from conftest import running as _running

from nsprof.worker.protocol import parse_status

TARGETS = FIXTURES.parent / "targets"
INTERRUPTIBLE = str(TARGETS / "phases.py") + ":interruptible"
HANGING = str(TARGETS / "phases.py") + ":hanging"
DEADLINE_S = 30.0  # generous: a busy CI box must not fail these; a leak never ends at all


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _start(tmp_path: Path, spec: dict, env: dict | None = None) -> subprocess.Popen:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    return subprocess.Popen(
        [sys.executable, str(TARGETS / "run_nsprof.py"), str(spec_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _session_spec(
    tmp_path: Path, driver: dict | None, backend: str = "none", target: str = INTERRUPTIBLE, **settings
) -> dict:
    n_configs = 4 if target == HANGING else 10
    return {
        "driver": driver,
        "target": target,
        "n_configs": n_configs,
        "rows": str(tmp_path / "rows.jsonl"),
        "settings": {
            "backend": backend,
            "modes": ["direct"],
            "reps": 2,
            "warmup": 0,
            "timeout_s": 600,
            "work_dir": str(tmp_path / "work"),
            **settings,
        },
    }


def _wait_until_measuring(proc: subprocess.Popen, status_file: Path, config_id: int = 2) -> int:
    """The worker's pid, once it has started config `config_id`."""
    reached = wait_for(
        lambda: (
            status_file.exists()
            and config_id in parse_status(status_file.read_text()).started
            or proc.poll() is not None
        )
    )
    assert reached and proc.poll() is None, proc.communicate()
    return parse_status(status_file.read_text()).pid


# (driver, what it shows): the worker bare under nsprof; under a profiler that passes
# inherited fds through (as ncu and nsys do); one that closes them; one that survives nsprof.
KILL_CASES = {
    "bare worker": None,
    "profiler passing fds": {"profiler_flags": []},
    "profiler closing fds": {"profiler_flags": ["--close-fds"]},
    "profiler outliving nsprof": {"profiler_flags": ["--outlive-parent"]},
}


@pytest.mark.parametrize("case", list(KILL_CASES))
def test_no_child_outlives_a_sigkilled_nsprof(tmp_path, case):
    driver = KILL_CASES[case]
    proc = _start(
        tmp_path, _session_spec(tmp_path, driver, backend="none" if driver is None else "ncu", target=HANGING)
    )
    worker = _wait_until_measuring(proc, tmp_path / "work" / "part0.status")
    children = [worker] if driver is None else [worker, _parent_of(worker)]
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    gone = wait_for(lambda: not any(_running(pid) for pid in children), DEADLINE_S)
    left = [pid for pid in children if _running(pid)]
    for pid in left:  # don't leave them to the rest of the suite
        subprocess.run(["kill", "-9", str(pid)])
    assert gone, f"still running {DEADLINE_S:g} s after nsprof was SIGKILLed: {left} of {children}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_act_like_ctrl_c_and_keep_what_was_measured(tmp_path, signum):
    # nsys-like stand-in: the report holds the worker's kernels only if it exited cleanly, so
    # nothing is kept unless nsprof asks its worker to stop instead of killing it.
    proc = _start(tmp_path, _session_spec(tmp_path, {"lossy": True, "profiler_flags": []}, backend="nsys"))
    status_file = tmp_path / "work" / "part0.status"
    worker = _wait_until_measuring(proc, status_file)
    profiler = _parent_of(worker)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    lines = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert lines[-1] == "interrupted", lines  # the interrupt still reached the caller, after the rows
    rows = [row for call in lines[:-1] for row in call]
    done = parse_status(status_file.read_text()).done
    assert {0, 1} <= set(done)
    measured = sorted({row["config_id"] for row in rows if row["error"] is None})
    assert measured == sorted(done), "every config the interrupted worker finished is kept"
    per_config = {c: sorted(row["rep"] for row in rows if row["config_id"] == c) for c in measured}
    assert all(reps == [0, 0, 1, 1] for reps in per_config.values()), per_config  # whole: 2 reps x 2 kernels
    assert not any(row["error"] for row in rows), "an interrupted config is not a failure"
    assert not _running(worker) and not _running(profiler)


def test_nsprof_profile_stopped_by_sigterm_says_one_line_and_leaves_nothing_running(tmp_path):
    work = tmp_path / "work"
    spec = {
        "driver": {"lossy": True, "profiler_flags": []},
        "argv": [
            "profile",
            INTERRUPTIBLE,
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--timeout",
            "600",
            "--work-dir",
            str(work),
        ],
    }
    proc = _start(tmp_path, spec)
    worker = _wait_until_measuring(proc, work / "part0.status")
    profiler = _parent_of(worker)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "nsprof: aborted", err
    assert not _running(worker) and not _running(profiler)


@pytest.mark.parametrize("output", ["table", "--csv", "--json"])
def test_nsprof_profile_stopped_by_sigterm_still_writes_every_config_it_finished(tmp_path, output):
    """`profile` stopped mid-run handed its finished configs to nobody: no table, no --csv, no --json, only
    "nsprof: aborted", and its temporary folder, reports and all, left unnamed. The finished configs are
    written as a finished run's are, said to be a part, and the interrupt still ends nsprof (exit 130)."""
    import csv
    import os

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    options = {"table": [], "--csv": ["--csv", str(tmp_path / "rows.csv")], "--json": ["--json"]}[output]
    argv = ["profile", INTERRUPTIBLE, "--backend", "nsys", "--mode", "direct", "--reps", "2", "--warmup", "0"]
    spec = {"driver": {"lossy": True, "profiler_flags": []}, "argv": [*argv, "--timeout", "600", *options]}
    proc = _start(tmp_path, spec, env={**os.environ, "TMPDIR": str(temporary)})
    reached = wait_for(lambda: any(temporary.glob("*/part0.status")) or proc.poll() is not None)
    assert reached and proc.poll() is None, proc.communicate()
    (status_file,) = temporary.glob("*/part0.status")
    _wait_until_measuring(proc, status_file)
    done = sorted(parse_status(status_file.read_text()).done)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "nsprof: aborted", err
    assert "interrupted" in err, err
    if output == "--csv":
        with open(tmp_path / "rows.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        measured = {int(row["config_id"]) for row in rows if not row["error"]}
    elif output == "--json":
        measured = {row["config_id"] for row in json.loads(out) if row["error"] is None}
    else:
        measured = {
            int(line.split()[0])
            for line in out.splitlines()
            if line.split()[:1] in ([str(c)] for c in range(10))
        }
    assert set(done) <= measured and {0, 1} <= measured, (done, measured, out)
    left = [folder for folder in temporary.iterdir() if folder.name.startswith("nsprof-")]
    assert all(str(folder) in err for folder in left), (left, err)  # a folder kept is named


def test_sighup_from_a_closed_terminal_still_writes_the_csv(tmp_path):
    """SIGHUP is what a closed terminal sends: the terminal is gone, so the table cannot be printed
    (EIO), but --csv is a file and should hold the configs finished before the hang-up."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    out_csv = tmp_path / "rows.csv"
    argv = ["profile", INTERRUPTIBLE, "--backend", "nsys", "--mode", "direct", "--reps", "2", "--warmup", "0"]
    spec = {
        "driver": {"lossy": True, "profiler_flags": []},
        "argv": [*argv, "--timeout", "600", "--csv", str(out_csv)],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, str(TARGETS / "run_nsprof.py"), str(tmp_path / "spec.json")],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    os.close(slave)
    reached = wait_for(lambda: any(temporary.glob("*/part0.status")) or proc.poll() is not None)
    assert reached and proc.poll() is None
    (status_file,) = temporary.glob("*/part0.status")
    _wait_until_measuring(proc, status_file)
    done = sorted(parse_status(status_file.read_text()).done)
    os.close(master)  # the terminal closes
    proc.send_signal(signal.SIGHUP)
    proc.wait(timeout=120)
    assert out_csv.exists(), f"no --csv written (exit {proc.returncode})"
    with open(out_csv, newline="") as handle:
        measured = {int(r["config_id"]) for r in csv.DictReader(handle) if not r["error"]}
    assert set(done) <= measured
    assert proc.returncode == 130


def test_an_interrupt_before_any_config_finished_keeps_the_csv_already_there(tmp_path):
    """Ctrl-C/SIGTERM before any config was finished (here: the only config asked for hangs; the same for
    a --wait on a busy GPU, a slow import) replaced the user's existing --csv with a header-only file: the
    interrupted path writes "what it finished", which is nothing. Before the change the file stayed."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    out_csv = tmp_path / "rows.csv"
    out_csv.write_text("config_id,error\n0,\n1,\n")  # last run's rows
    before = out_csv.read_text()
    argv = ["profile", HANGING, "--backend", "nsys", "--mode", "direct", "--reps", "2", "--warmup", "0"]
    spec = {
        "driver": {"lossy": True, "profiler_flags": []},
        "argv": [*argv, "--configs", "2", "--timeout", "600", "--csv", str(out_csv)],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen(
        [sys.executable, str(TARGETS / "run_nsprof.py"), str(tmp_path / "spec.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    reached = wait_for(lambda: any(temporary.glob("*/part0.status")) or proc.poll() is not None)
    assert reached and proc.poll() is None, proc.communicate()
    (status_file,) = temporary.glob("*/part0.status")
    _wait_until_measuring(proc, status_file, config_id=2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert out_csv.read_text() == before, (out_csv.read_text(), err)
