"""A validate that compared nothing (no truth, or no fast timer, measured 2 of the configs the other
measured) ends, after its tables, in one line naming the side that measured too few and its first
failure, keeps its reports and logs and names them, and exits 2; a space of one config measured whole
compared its one config and exits 0. Stand-in profilers and timers; nsprof in-process unless the case
crosses a process (a reader gone from standard output), and no --work-dir made for a target that does not
load."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, STANDINS, run_nsprof


@pytest.fixture
def own_tmp(tmp_path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir()
    return {"TMPDIR": str(tmp_path / "tmp")}


# A target whose sessions are told apart by their job file's folder (timers0, nsys_a, ncu_b, ...):
# FAIL (a regex of those folder names) makes the build fail there; TIMERS_RUN_FAILS makes every
# stand-in timer fail at its run (no timer_ns).
TARGET = textwrap.dedent("""
    import os, re, sys
    import nsprof.space

    FAIL = os.environ.get("FAIL", "")
    N = int(os.environ.get("NCONF", "3"))
    SESSION = os.path.basename(os.path.dirname(sys.argv[1])) if len(sys.argv) > 1 else ""

    class Launch:
        def __init__(self, config):
            if FAIL and re.fullmatch(FAIL, SESSION):
                raise RuntimeError(f"fails in {SESSION}")
            self.timer_ns = dict.fromkeys(("cupti", "cupti_cold"), config["ns"] + 10)

        def __call__(self):
            return None

    configs = [{"i": c, "ns": 1000.0 * (c + 1)} for c in range(N)]
    space = nsprof.space.Space(configs=configs, build=Launch, device="cpu")
""")
OPTIONS = ["--timers", "cupti", "--no-external", "--truth", "nsys", "--mode", "direct", "--reps", "2",
           "--timer-reps", "2", "--no-repeat"]  # fmt: skip
VALIDATE = ["validate", "t.py:space", *OPTIONS]


def _run(tmp_path, own_tmp, **env):
    (tmp_path / "t.py").write_text(TARGET)
    return run_nsprof(
        *VALIDATE, cwd=tmp_path, env={**own_tmp, "NSPROF_STANDIN_TIMERS": "1", **env}, standins=True,
        in_process=True,
    )  # fmt: skip


def test_a_timer_session_whose_builds_failed_names_its_failure(tmp_path, own_tmp):
    """The fast timers' session fails every build (recorded under the method "timers", as a compile
    failure, a crashed worker or an interleaved timer's failure is): the line gives that failure."""
    ran = _run(tmp_path, own_tmp, FAIL="timers0")
    assert ran.returncode == 2, ran.stderr
    assert "timers failed on config 0: build failed: RuntimeError: fails in timers0" in ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert "first failure" in last and "fails in timers0" in last, last


def test_a_truth_that_failed_everywhere_is_named_not_the_timers(tmp_path, own_tmp):
    """Every timer measured every config and the truth failed on all of them: the line names the truth's
    side and its failure."""
    ran = _run(tmp_path, own_tmp, FAIL="nsys_.")
    assert ran.returncode == 2, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert "nothing compared: no ground truth measured 2 of the configs" in last, last
    assert "(first failure: nsys on config 0: build failed: RuntimeError: fails in nsys_a)" in last, last


def test_a_one_config_space_measured_whole_does_not_fail_after_the_whole_run(tmp_path, own_tmp):
    """A space of one config measured by every timer and the truth (n = 1: its bias compared): exit 0."""
    ran = _run(tmp_path, own_tmp, NCONF="1")
    assert "cupti       nsys:direct  1" in ran.stdout, ran.stdout  # compared: n = 1, bias shown
    assert ran.returncode == 0, ran.stderr


def test_a_run_that_compared_nothing_keeps_and_names_its_logs_folder(tmp_path, own_tmp):
    """The temporary folder, with the workers' logs that explain the failures (only each reason's first
    line is printed), is kept and named, as profile's and tune's are when they measured nothing."""
    ran = _run(tmp_path, own_tmp, FAIL="timers0")
    assert ran.returncode == 2, ran.stderr
    kept = list((tmp_path / "tmp").iterdir())
    assert len(kept) == 1, kept
    assert f"kept in {kept[0]}" in ran.stderr, ran.stderr


@pytest.fixture
def timers_tmp(own_tmp) -> dict[str, str]:
    return {**own_tmp, "NSPROF_STANDIN_TIMERS": "1"}


# The timers' session and the nsys session measure every config; while nsys's worker imports the target
# (after the timers ran), the --save folder SABOTAGE is replaced by a link to /proc/1, so that the save
# fails at its write (an NsprofError "writing ... failed"), as a full disk or a folder gone would.
SABOTAGED = textwrap.dedent("""
    import os, shutil, sys
    import nsprof.space

    SESSION = os.path.basename(os.path.dirname(sys.argv[1])) if len(sys.argv) > 1 else ""
    SAB = os.environ.get("SABOTAGE")
    if SAB and SESSION.startswith("nsys") and os.path.isdir(SAB) and not os.path.islink(SAB):
        shutil.rmtree(SAB)
        os.symlink("/proc/1", SAB)

    class Launch:
        def __init__(self, config):
            self.timer_ns = dict.fromkeys(("cupti", "cupti_cold"), config["ns"] + 10)

        def __call__(self):
            return None

    space = nsprof.space.Space(configs=[{"i": c, "ns": 1000.0 * (c + 1)} for c in range(3)], build=Launch,
                               device="cpu")
""")


def _save_sabotaged(tmp_path, env: dict, target: str):
    """validate of `target` (one of the SABOTAGED texts) with a --save whose folder is swapped mid-run."""
    (tmp_path / "t.py").write_text(target)
    (tmp_path / "out").mkdir()
    return run_nsprof(
        "validate", "t.py:space", *OPTIONS, "--save", "out/x.json", cwd=tmp_path,
        env={**env, "SABOTAGE": str(tmp_path / "out")}, standins=True,
    )  # fmt: skip


def test_a_save_that_cannot_be_written_keeps_no_reports_folder(tmp_path, timers_tmp):
    """A validate that measured and compared every config but whose --save could not be written: the
    error names the file, and the temporary folder is removed (it is kept only when nothing was measured
    or compared)."""
    ran = _save_sabotaged(tmp_path, timers_tmp, SABOTAGED)
    assert ran.returncode == 2, ran.stderr
    assert "writing out/x.json failed" in ran.stderr, ran.stderr
    assert "kept in" not in ran.stderr, ran.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


# The timers' builds fail for configs past 0, and so do the L2 check's sessions.
L2_FAILS = SABOTAGED.replace(
    "        self.timer_ns =",
    "        if SESSION.startswith('timers') and config['i'] > 0:\n"
    "            raise RuntimeError(f\"timer build fails for config {config['i']}\")\n"
    "        if SESSION.startswith('l2_'):\n"
    "            raise RuntimeError(f'L2 session fails in {SESSION}')\n"
    "        self.timer_ns =",
)


def test_nothing_compared_names_a_timer_failure_not_an_l2_check_one(tmp_path, timers_tmp):
    """The timers measured config 0 only (builds of 1 and 2 fail); --l2-check's ncu sessions fail too: the
    line gives the fast timers' failure, not the L2 check's."""
    (tmp_path / "t.py").write_text(L2_FAILS)
    ran = run_nsprof(
        "validate", "t.py:space", *OPTIONS, "--l2-check", cwd=tmp_path, env=timers_tmp, standins=True,
        in_process=True,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert "nothing compared: no fast timer measured 2" in last, last
    assert "first failure: timers on config 1: build failed: RuntimeError: timer build fails" in last, last


NOTHING_COMPARED_SABOTAGED = SABOTAGED.replace(
    "        self.timer_ns =",
    "        if SESSION.startswith('timers') and config['i'] > 0:\n"
    "            raise RuntimeError('timer build fails')\n"
    "        self.timer_ns =",
)


def test_nothing_compared_with_an_unwritable_save_still_says_so_and_names_the_folder(tmp_path, timers_tmp):
    """The timers measured one config, and the --save cannot be written: both failures are said, the run's
    with the folder it keeps."""
    ran = _save_sabotaged(tmp_path, timers_tmp, NOTHING_COMPARED_SABOTAGED)
    assert ran.returncode == 2, ran.stderr
    kept = list((tmp_path / "tmp").iterdir())
    assert len(kept) == 1, kept
    said = [line for line in ran.stderr.splitlines() if "nothing compared: no fast timer measured 2" in line]
    assert len(said) == 1 and f"kept in {kept[0]}" in said[0], ran.stderr
    assert "writing out/x.json failed" in ran.stderr.strip().splitlines()[-1], ran.stderr


def test_a_target_that_does_not_load_makes_no_work_dir(tmp_path):
    """A target that does not load: no --work-dir is made (as profile and tune make none)."""
    (tmp_path / "bad.py").write_text("raise SystemExit('bad')\n")
    ran = run_nsprof("validate", "bad.py:space", *OPTIONS, "--work-dir", "wd", cwd=tmp_path, standins=True,
                     env={"NSPROF_STANDIN_TIMERS": "1", "TMPDIR": str(tmp_path)})  # fmt: skip
    assert ran.returncode == 2 and "loading bad.py:space failed" in ran.stderr, ran.stderr
    assert not (tmp_path / "wd").exists()


TRUTH_FAILS = textwrap.dedent("""
    import os, sys
    import nsprof.space
    SESSION = os.path.basename(os.path.dirname(sys.argv[1])) if len(sys.argv) > 1 else ""
    class Launch:
        def __init__(self, config):
            if SESSION.startswith("nsys"):
                raise RuntimeError("truth build fails")
            self.timer_ns = dict.fromkeys(("cupti", "cupti_cold"), config["ns"] + 10)
        def __call__(self):
            return None
    space = nsprof.space.Space(configs=[{"ns": 1000.0 * (c + 1)} for c in range(3)], build=Launch, device="cpu")
""")


def test_nothing_compared_with_its_reader_gone_still_exits_2(tmp_path):
    """`validate ... --json | true` (or `| head`) of a run that compared nothing: the failure line is said,
    the folder kept, and the exit status is 2 (the failure, not a closed standard output's quiet exit)."""
    (tmp_path / "t.py").write_text(TRUTH_FAILS)
    (tmp_path / "tmp").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NSPROF_STANDIN_TIMERS": "1",
        "TMPDIR": str(tmp_path / "tmp"),
    }
    proc = subprocess.Popen([sys.executable, str(STANDINS), "validate", "t.py:space", *OPTIONS, "--json"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    proc.stdout.close()  # the reader left before the document came
    err = proc.stderr.read()
    proc.wait(timeout=300)
    assert "nothing compared: no ground truth measured 2" in err, err
    assert len(list((tmp_path / "tmp").iterdir())) == 1  # kept, as said
    assert proc.returncode == 2, (proc.returncode, err)
