"""Bad input at the edges: each breaks nsprof's rule (one clear line on stderr, a non-zero exit, never a
traceback or an internal error, nothing measured lost)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys

import pytest
from conftest import FIXTURES, STANDINS, run_nsprof, wait_for
from test_bad_input_review import _one_line

PLAIN = (
    "import nsprof.space\n"
    "space = nsprof.space.Space(configs=[{'ns': 1000.0 + i, 'i': i} for i in range(4)],\n"
    "                           build=lambda c: (lambda: None), device='cpu')\n"
)


# 1 ------------------------------------------------------------ --budget-s past what a float division holds


def test_a_huge_finite_budget_is_no_internal_error_and_loses_no_ranking(tmp_path):
    """--budget-s 1e308 passes FloatRange(min=0) and the settings' checks; after the first pass,
    analysis.adaptive.plan_session does math.floor(1e308 / round_s) = floor(inf): OverflowError, an internal
    error, and with --no-store the first pass's ranking is lost."""
    (tmp_path / "t.py").write_text(PLAIN)
    done = run_nsprof(
        "tune",
        "t.py:space",
        "--mode",
        "direct",
        "--no-store",
        "--budget-s",
        "1e308",
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert "best: config 0" in done.stdout, done.stdout


# 2 ------------------------------------------------------------ a --scheduler address Dask cannot parse


@pytest.mark.parametrize("address", ["bogus://x", "tcp://[::1"])
def test_a_scheduler_address_dask_cannot_parse_is_one_line(tmp_path, address):
    """ClusterSettings checks only for '://'; Dask's own ValueError (unknown scheme, a bad IPv6 address)
    escapes cluster_dask._connect_existing, which catches OSError and TimeoutError only."""
    pytest.importorskip("distributed")
    (tmp_path / "t.py").write_text(PLAIN)
    done = run_nsprof(
        "profile",
        "t.py:space",
        "--mode",
        "direct",
        "--scheduler",
        address,
        cwd=tmp_path,
        standins=True,
        in_process=True,
        timeout=120,
    )
    line = _one_line(done)
    assert line.startswith("nsprof: error:"), line


# 3 ------------------------------------------------------------ a tune interrupted before its first row

SLOW_FROM_2 = """
import time
import nsprof.space

def build(config):
    if config["i"] >= 2:
        open({marker!r}, "a").write("building\\n")
        time.sleep(120)
    return lambda: None

space = nsprof.space.Space(configs=[{{"ns": 1000.0 + i, "i": i}} for i in range(4)], build=build, device="cpu")
"""


@pytest.mark.parametrize("query", [["--target", "t.py:space"], ["--run", "3"]])
def test_results_after_a_tune_interrupted_before_its_first_row_is_no_internal_error(tmp_path, query):
    """tune --configs 0,1 stores its runs (1, and 2 its adaptive reps); tune --configs 2,3 is stopped (SIGTERM,
    as Ctrl-C) before anything is stored: run 3, 'interrupted', 0 rows, its ranked points 2 and 3 recorded.
    results --target / --run 3 say in one line that that tune measured nothing (an empty frame filtered by
    an empty list of rows was one of no columns: a KeyError); run 1's tune is still read."""
    marker = tmp_path / "building"
    (tmp_path / "t.py").write_text(SLOW_FROM_2.format(marker=str(marker)))
    first = run_nsprof(
        "tune", "t.py:space", "--mode", "direct", "--configs", "0,1", cwd=tmp_path, standins=True
    )
    assert first.returncode == 0, first.stderr
    second = subprocess.Popen(
        [sys.executable, str(STANDINS), "tune", "t.py:space", "--mode", "direct", "--configs", "2,3"]
        + ["--work-dir", "wd"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        status = tmp_path / "wd" / "part0.status"  # the session has read config 2's start: it is its window
        assert wait_for(lambda: marker.exists() and "start 2" in status.read_text(), 60), (
            "config 2 never built"
        )
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    listed = run_nsprof("results", cwd=tmp_path, in_process=True)
    assert listed.returncode == 0, listed.stderr
    assert "interrupted" in listed.stdout, listed.stdout
    done = run_nsprof("results", *query, cwd=tmp_path, in_process=True)
    line = _one_line(done)
    assert "holds no measurement of t.py:space under ncu by the tune of run 3 (interrupted)" in line, line
    earlier = run_nsprof("results", "--run", "1", "--json", cwd=tmp_path, in_process=True)
    assert earlier.returncode == 0, earlier.stderr
    assert json.loads(earlier.stdout)["best_config_id"] == 0


# 4 ------------------------------------------------------------ a damaged store: one line, no warning


def test_a_store_holding_a_float_too_large_for_an_integer_column_is_exactly_one_line(tmp_path):
    """A store whose measurements.run_id holds 1e308: ResultStore._column refuses it in one line, but
    pd.Series([1e308], dtype="Int64") first prints numpy's two-line RuntimeWarning ("invalid value encountered
    in cast") to stderr."""
    (tmp_path / "t.py").write_text(PLAIN)
    made = run_nsprof("tune", "t.py:space", "--mode", "direct", cwd=tmp_path, standins=True, in_process=True)
    assert made.returncode == 0, made.stderr
    store = tmp_path / ".nsprof" / "results.sqlite"
    with sqlite3.connect(store) as db:
        db.execute("UPDATE measurements SET run_id = 1e308")
    done = run_nsprof("results", str(store), cwd=tmp_path)
    line = _one_line(done)
    assert "run_id" in line, line


# 5 ------------------------------------------------------------ shell completion's variable (docs/options.md)


@pytest.mark.parametrize(
    "env",
    [
        {
            "_NSPROF_COMPLETE": "bash_complete",
            "COMP_WORDS": None,
            "COMP_CWORD": None,
        },  # KeyError: 'COMP_WORDS'
        {"_NSPROF_COMPLETE": "bash_complete", "COMP_WORDS": "nsprof tu", "COMP_CWORD": "x"},  # ValueError
        {"_NSPROF_COMPLETE": "bash", "COMP_WORDS": None, "COMP_CWORD": None},  # exit 1, nothing said
        {
            "_NSPROF_COMPLETE": "powershell_source",
            "COMP_WORDS": None,
            "COMP_CWORD": None,
        },  # exit 1, nothing said
    ],
    ids=["complete-without-words", "cword-not-a-number", "no-instruction", "unknown-shell"],
)
def test_a_bad_completion_variable_is_one_line(env):
    done = run_nsprof(env=env)
    line = _one_line(done)
    assert line.startswith("nsprof: error:"), line


# 6 ------------------------------------------------------------ a target "file" that is a device


def test_a_target_file_that_is_a_device_is_named_as_such(tmp_path):
    """/dev/null exists: "does not exist" sent the user looking for the wrong mistake."""
    line = _one_line(run_nsprof("profile", "/dev/null:space", cwd=tmp_path, in_process=True))
    assert line == "nsprof: error: target file /dev/null is not a regular file", line


def test_a_bad_plot_name_is_named_as_given():
    """--plot /dev/full: the line named it "full", as if it were a file here."""
    line = _one_line(
        run_nsprof("analyze", FIXTURES / "fixture.sqlite", "--plot", "/dev/full", in_process=True)
    )
    assert line.startswith("nsprof: error: --plot: /dev/full: use a .png, .svg or .pdf file name"), line
