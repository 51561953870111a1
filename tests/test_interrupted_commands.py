"""Interrupts (SIGINT, SIGTERM, SIGHUP) of validate and tune through real child processes (tests/standins.py:
stand-in profilers; NSPROF_STANDIN_TIMERS=1: stand-in fast timers) and real signals: what was measured is
kept and named, and a ranking re-read from a run cut short says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_interrupt_store import TARGET as HANGS_AT_7  # configs 0-6 finish, 7 hangs, 8 and 9 never run
from test_interrupt_store import _wait_for

ROOT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).parent / "standins.py"


# fast timers (standin_timers.py) measure timer_ns; the truth's session hangs at config 4
VALIDATE_TARGET = textwrap.dedent("""
    import sys, time
    import nsprof.space

    class Launch:
        def __init__(self, config):
            self.config = config
            self.timer_ns = {"event": config["ns"] * 1.1}

        def __call__(self):
            if self.config.get("hang") and "standin_timers" not in " ".join(sys.argv):
                time.sleep(3600)  # only in the truth's worker, not the timers'

    configs = [{"i": i, "ns": 1000.0 + 200 * i} for i in range(4)] + [{"i": 4, "ns": 2000.0, "hang": True}]
    space = nsprof.space.Space(configs=configs, build=Launch, device="cpu")
""")


def _started(folder: Path, point: int, skip: str = "\0") -> bool:
    return any(
        f"start {point}\n" in status.read_text()
        for status in folder.rglob("*.status")
        if skip not in str(status)
    )


def _start(tmp_path: Path, args: list[str], env: dict | None = None) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, str(STANDINS), *args],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_tune_without_a_store_stopped_shows_the_configs_it_measured(tmp_path, signum):
    """`tune --no-store` stopped after 7 of 10 configs were measured: no store holds them, so the ranking
    of those 7 is shown (--json), said to be a part, and it exits 130, as `profile` shows its part (it
    printed only "aborted")."""
    (tmp_path / "stoppable.py").write_text(HANGS_AT_7)
    args = "tune stoppable.py:space --backend ncu --mode direct --no-store --work-dir wd --timeout 600 --json"
    proc = _start(tmp_path, args.split())
    _wait_for(lambda: _started(tmp_path / "wd", 7) or proc.poll() is not None, "config 7 to start")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err, err
    assert "interrupted" in err, f"not said to be a part: {err!r}"
    assert out.strip(), f"the 7 configs measured before the interrupt are shown nowhere; stderr: {err!r}"
    shown = json.loads(out)
    assert [row["config_id"] for row in shown["ranked"]] == list(range(7)), shown["ranked"]
    assert shown["best_config_id"] == 0
    assert any(
        note.startswith("interrupted: ranked from the configs measured before it") for note in shown["notes"]
    )


def test_tune_without_a_store_stopped_in_its_second_truth_keeps_the_first_truths_ranking(tmp_path):
    """--truth ncu,nsys --no-store, stopped while nsys's first pass runs: ncu's complete ranking (8 configs)
    and nsys's part (7) are both shown."""
    target = HANGS_AT_7.replace('if config["ns"] == 0:', 'if config["ns"] == 0 and os.path.exists("hang"):')
    (tmp_path / "stoppable.py").write_text(target.replace("import time", "import os, time"))
    # config 7 hangs only once the file "hang" exists: created when ncu's first pass is over
    args = (
        "tune stoppable.py:space --truth ncu,nsys --mode direct --no-store --work-dir wd --timeout 600 "
        "--configs 0,1,2,3,4,5,6,7 --json"
    )
    proc = _start(tmp_path, args.split())
    first = tmp_path / "wd" / "part0.status"
    _wait_for(
        lambda: (first.exists() and "end" in first.read_text()) or proc.poll() is not None, "ncu's pass"
    )
    (tmp_path / "hang").touch()
    _wait_for(lambda: _started(tmp_path / "wd", 7, skip="part0") or proc.poll() is not None, "nsys at 7")
    if proc.poll() is not None:
        pytest.skip("nsys's first pass ran before the hang was armed")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err, err
    assert out.strip(), f"ncu's complete ranking and nsys's 7 configs are shown nowhere: {err!r}"
    truths = {truth["truth"]: truth for truth in json.loads(out)["truths"]}
    assert sorted(row["config_id"] for row in truths["ncu"]["ranked"]) == list(range(8))
    assert sorted(row["config_id"] for row in truths["nsys"]["ranked"]) == list(range(7))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_validate_stopped_keeps_the_reports_it_measured(tmp_path, signum):
    """`validate` stopped while its truth measures (the timers done, 4 of 5 truth configs measured): its
    temporary folder, with every report in it, is kept and named, as profile's and tune's are (it was
    removed), and it exits 130."""
    (tmp_path / "v.py").write_text(VALIDATE_TARGET)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    args = (
        "validate v.py:space --timers event --no-external --truth ncu --mode direct --reps 2 "
        "--timer-reps 3 --no-repeat --timeout 600"
    )
    proc = _start(tmp_path, args.split(), {"NSPROF_STANDIN_TIMERS": "1", "TMPDIR": str(temporary)})
    _wait_for(lambda: _started(temporary, 4, skip="timers") or proc.poll() is not None, "ncu at config 4")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err, err
    kept = [path for path in temporary.rglob("*.status") if "timers" not in str(path)]
    assert kept, f"the truth's reports of configs 0-3 were removed; stderr: {err!r}"
    [named] = [line.split("kept in ", 1)[1] for line in err.splitlines() if "kept in " in line]
    assert all(path.is_relative_to(named) for path in kept), err


def test_results_of_an_interrupted_tune_say_it_was_cut_short(tmp_path):
    """After a tune stopped at config 7 (of 10), `nsprof results --target` ranks the 7 stored configs: it
    says the run was interrupted and how many configs it holds, so that the ranking is not read as whole."""
    (tmp_path / "stoppable.py").write_text(HANGS_AT_7)
    args = "tune stoppable.py:space --backend ncu --mode direct --store r.sqlite --work-dir wd --timeout 600"
    proc = _start(tmp_path, args.split())
    _wait_for(lambda: _started(tmp_path / "wd", 7) or proc.poll() is not None, "config 7 to start")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    shown = subprocess.run(
        [sys.executable, "-m", "nsprof", "results", "r.sqlite", "--target", "stoppable.py:space"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "best: config 0" in shown.stdout
    assert "interrupt" in shown.stdout + shown.stderr or "cut short" in shown.stdout + shown.stderr, (
        shown.stdout
    )


PICK_HANGS = textwrap.dedent("""
    import pathlib, time
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    class Hook(TunerHook):
        can_pick = True

        def pick(self):
            (pathlib.Path(__file__).parent / "picking").touch()
            time.sleep(3600)

        def feed_back(self, latencies_ms):
            raise AssertionError("a part is never fed back")

    space = Space(name="p", configs=[{"ns": 3000}, {"ns": 1000}, {"ns": 2000}], build=lambda c: (lambda: None),
                  device="cpu", tuner=Hook())
""")


def test_tune_without_a_store_stopped_in_the_tuners_pick_shows_its_whole_ranking(tmp_path):
    """Every config measured and ranked, then the tuner's own pick hangs and the user stops it: the whole
    ranking is shown (nothing fed back), exit 130."""
    (tmp_path / "p.py").write_text(PICK_HANGS)
    args = "tune p.py:space --backend ncu --mode direct --reps 2 --budget-s 0 --no-store --json"
    proc = _start(tmp_path, args.split())
    _wait_for(lambda: (tmp_path / "picking").exists() or proc.poll() is not None, "the tuner's pick")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, (proc.returncode, err)
    shown = json.loads(out)
    assert [row["config_id"] for row in shown["ranked"]] == [1, 2, 0] and shown["best_config_id"] == 1
    assert not any(note.startswith("interrupted") for note in shown["notes"]), shown["notes"]


# config 0 hangs in nsys's first pass only (its worker, started ahead, reads ahead0.job.json)
NSYS_HANGS_AT_0 = textwrap.dedent("""
    import sys, time
    import nsprof.space

    class Launch:
        def __init__(self, config):
            self.config = config

        def __call__(self):
            if self.config["i"] == 0 and "ahead0" in " ".join(sys.argv):
                time.sleep(3600)

    configs = [{"i": i, "ns": 1000.0 + 200 * i} for i in range(4)]
    space = nsprof.space.Space(configs=configs, build=Launch, device="cpu")
""")


def test_tune_no_store_stopped_before_the_second_truth_measured_anything_keeps_the_first(tmp_path):
    """--truth ncu,nsys --no-store, stopped while nsys's first config runs (nothing of nsys finished):
    ncu's complete ranking is still shown, and the exit status is 130."""
    (tmp_path / "h.py").write_text(NSYS_HANGS_AT_0)
    args = (
        "tune h.py:space --truth ncu,nsys --mode direct --no-store --work-dir wd --budget-s 0 "
        "--timeout 600 --json"
    )
    proc = _start(tmp_path, args.split())
    status = tmp_path / "wd" / "ahead0.status"
    _wait_for(
        lambda: (status.exists() and "start 0\n" in status.read_text()) or proc.poll() is not None,
        "nsys at config 0",
    )
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert out.strip(), f"ncu's complete ranking is shown nowhere; stderr: {err!r}"
    shown = json.loads(out)
    truths = {truth["truth"]: truth for truth in shown["truths"]}
    assert sorted(row["config_id"] for row in truths["ncu"]["ranked"]) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- results: per-shape labels


def test_results_say_nothing_is_missing_when_an_interrupted_rerun_sits_over_a_whole_run(tmp_path):
    """A whole tune (run 1, all 10 configs), then a tune of the same target again stopped at config 7
    (run 2): `results --target` ranks all 10 (0-6 from run 2, 7-9 from run 1), and its note says the
    configs run 2 did not reach are ranked as run 1 measured them, not that they are missing."""
    (tmp_path / "s.py").write_text(
        HANGS_AT_7.replace(
            'if config["ns"] == 0:', 'if config["ns"] == 0 and __import__("os").path.exists("hang"):'
        )
    )
    args = "tune s.py:space --backend ncu --mode direct --store r.sqlite --timeout 600 --budget-s 0"
    whole = _start(tmp_path, [*args.split(), "--work-dir", "wd1"])
    _, err = whole.communicate(timeout=180)
    assert whole.returncode == 0, err
    (tmp_path / "hang").touch()
    proc = _start(tmp_path, [*args.split(), "--work-dir", "wd2"])
    _wait_for(lambda: _started(tmp_path / "wd2", 7) or proc.poll() is not None, "config 7 to start")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    shown = subprocess.run(
        [sys.executable, "-m", "nsprof", "results", "r.sqlite", "--target", "s.py:space", "--json"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert sorted(row["config_id"] for row in document["ranked"]) == list(range(10))
    wrong = [note for note in document["notes"] if "never reached is not in this ranking" in note]
    assert not wrong, wrong


# --------------------------------------------------------------------------- tune --no-store interrupted


def test_the_plot_of_an_interrupted_tune_says_it_is_a_part(tmp_path):
    """`tune --no-store --plot p.svg` stopped after 7 of 10 configs: the plot of the part says it is one,
    so that read later it does not pass for the ranking of all 10 configs."""
    (tmp_path / "stoppable.py").write_text(HANGS_AT_7)
    args = "tune stoppable.py:space --backend ncu --mode direct --no-store --work-dir wd --timeout 600 --plot p.svg"
    proc = _start(tmp_path, args.split())
    _wait_for(lambda: _started(tmp_path / "wd", 7) or proc.poll() is not None, "config 7 to start")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    svg = (tmp_path / "p.svg").read_text()
    assert "interrupted" in svg or "part" in svg, "the plot of 7 of 10 configs does not say it is a part"


def test_tune_no_store_hung_up_with_its_pipes_gone_exits_130(tmp_path):
    """`nsprof tune --no-store ... 2>&1 | tee log` and the terminal closed: tee goes, then nsprof gets SIGHUP.
    Its output pipes are gone, and the interrupted run still exits 130, not 0 as a reader of `| head`
    that went away would leave it."""
    (tmp_path / "stoppable.py").write_text(HANGS_AT_7)
    args = "tune stoppable.py:space --backend ncu --mode direct --no-store --work-dir wd --timeout 600 --json"
    proc = _start(tmp_path, args.split())
    _wait_for(lambda: _started(tmp_path / "wd", 7) or proc.poll() is not None, "config 7 to start")
    assert proc.poll() is None
    proc.stdout.close()
    proc.stderr.close()
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=120) == 130
