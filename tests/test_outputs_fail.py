"""An output that cannot be written loses nothing measured: profile prints its table first, the error
names the output in one line, and the rows are kept in a file that line names; a FIFO that nothing
reads is waited for within a bound, not forever. nsprof in this process (CliRunner), the stand-in
profiler."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_nsprof

TARGET = """
from nsprof.space import Space
space = Space(name="t", configs=[{"ns": 3000}, {"ns": 2000}], build=lambda c: (lambda: None), device="cpu")
"""
PROFILE = ("profile", "t.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "2")


def _kept_rows(line: str) -> pd.DataFrame:
    found = re.search(r"the rows are in (\S+\.csv)", line)
    assert found, line
    kept = Path(found.group(1))
    try:
        return pd.read_csv(kept)
    finally:
        kept.unlink()


def _failed_with_the_rows_kept(done, output: str, words: str) -> None:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and output in lines[0] and words in lines[0], done.stderr
    assert re.search(r"^\s*0\b.*\n\s*1\b", done.stdout, re.M) or "ns=3000" in done.stdout, done.stdout
    rows = _kept_rows(lines[0])
    assert sorted(set(rows["config_id"])) == [0, 1]
    assert set(rows.groupby("config_id")["duration_ns"].median()) == {3000.0, 2000.0}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_csv_that_cannot_be_written_keeps_the_rows_and_names_the_file(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    done = run_nsprof(*PROFILE, "--csv", "/dev/full", cwd=tmp_path, standins=True, in_process=True)
    _failed_with_the_rows_kept(done, "/dev/full", "No space left")


def test_a_csv_fifo_that_nothing_reads_is_given_up_on_and_the_rows_kept(tmp_path, monkeypatch):
    monkeypatch.setattr("nsprof.host.owned.READER_WAIT_S", 0.5)
    (tmp_path / "t.py").write_text(TARGET)
    os.mkfifo(tmp_path / "rows.csv")
    done = run_nsprof(
        *PROFILE, "--csv", "rows.csv", cwd=tmp_path, standins=True, in_process=True, timeout=120
    )
    _failed_with_the_rows_kept(done, "rows.csv", "nothing opened it for reading")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_page_that_cannot_be_written_names_it(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    tune = ("tune", "t.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "2", "--no-tuner-pick")
    done = run_nsprof(*tune, "--html", "/dev/full", cwd=tmp_path, standins=True, in_process=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and "/dev/full" in lines[-1] and "No space left" in lines[-1], done.stderr
    assert "best: config 1" in done.stdout  # the ranking came first; the store holds the rows
