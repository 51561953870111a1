"""Exit status tells the truth: a run that measured no config fails in one line, through the real CLI
in a child process with a stand-in profiler (tests/standins.py)."""

from __future__ import annotations

import csv
import json
import textwrap

import pytest
from conftest import run_nsprof

from nsprof.store import ResultStore

ALL_FAIL = textwrap.dedent("""
    from nsprof.space import Space

    def build(config):
        raise ValueError(f"no tile size {config['tile']}")

    space = Space(name="broken", configs=[{"tile": 8}, {"tile": 16}], build=build, device="cpu")
""")


@pytest.fixture
def own_tmp(tmp_path) -> dict[str, str]:
    """Temporary folders in the test's own folder: a run that fails keeps (and names) its logs' folder."""
    (tmp_path / "tmp").mkdir()
    return {"TMPDIR": str(tmp_path / "tmp")}


@pytest.mark.parametrize("command", ["profile", "tune"])
def test_no_config_measured_is_a_one_line_error(tmp_path, own_tmp, command):
    (tmp_path / "broken.py").write_text(ALL_FAIL)
    extra = ["--csv", tmp_path / "rows.csv"] if command == "profile" else ["--store", tmp_path / "r.sqlite"]
    result = run_nsprof(
        command,
        "broken.py:space",
        "--backend",
        "ncu",
        "--timeout",
        "30",
        *extra,
        cwd=tmp_path,
        env=own_tmp,
        standins=True,
    )
    assert result.returncode != 0, result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "nsprof: error: no config was measured: all 2 failed (config 0: build failed: "
        "ValueError: no tile size 8"
    ), result.stderr
    assert "Traceback" not in result.stderr
    if command == "profile":  # the failures are still data, written where asked
        with open(tmp_path / "rows.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert sorted(r["config_id"] for r in rows) == ["0", "1"]
        assert all(r["error"].startswith("build failed") for r in rows)
    else:
        with ResultStore(tmp_path / "r.sqlite") as store:
            assert store.runs()["status"].tolist() == ["nothing measured"]
    # the session's temporary folder, kept for its logs, is named: in the error (tune), in the header (profile)
    kept = list((tmp_path / "tmp").iterdir())
    assert len(kept) == 1 and (kept[0] / "part0.log").is_file()
    assert f"kept in {kept[0]}" in result.stdout + result.stderr


def test_profile_csv_dash_is_standard_output(tmp_path, own_tmp):
    """`-` means standard output wherever a path is taken: the rows go there, the table to stderr,
    and no file called "-" appears."""
    (tmp_path / "ok.py").write_text(
        textwrap.dedent("""
        from nsprof.space import Space

        space = Space(name="ok", configs=[{"ns": 1500}, {"ns": 2500}], build=lambda config: (lambda: None),
                      device="cpu")
    """)
    )
    result = run_nsprof(
        "profile",
        "ok.py:space",
        "--backend",
        "ncu",
        "--mode",
        "direct",
        "--reps",
        "2",
        "--csv",
        "-",
        cwd=tmp_path,
        env=own_tmp,
        standins=True,
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "-").exists()
    rows = list(csv.DictReader(result.stdout.splitlines()))
    assert sorted({(r["config_id"], float(r["duration_ns"])) for r in rows}) == [("0", 1500.0), ("1", 2500.0)]
    assert len(rows) == 4  # 2 configs x 1 mode x 2 reps, one stand-in kernel each
    assert "median µs" in result.stderr
    both = run_nsprof(
        "profile",
        "ok.py:space",
        "--backend",
        "ncu",
        "--csv",
        "-",
        "--json",
        cwd=tmp_path,
        env=own_tmp,
        in_process=True,  # refused before any run
    )
    assert both.returncode == 2 and "both write to standard output" in both.stderr


def test_validate_whose_every_timer_failed_exits_non_zero_after_writing_what_it_measured(tmp_path, own_tmp):
    """A validate in which no fast timer measured two configs a truth measured compared nothing: after
    its tables and its save (the truths' numbers are kept), one line says so and the exit status is 2."""
    (tmp_path / "bare.py").write_text(
        textwrap.dedent("""
        from nsprof.space import Space

        space = Space(name="bare", configs=[{"ns": 1500}, {"ns": 2500}], build=lambda config: (lambda: None),
                      device="cpu")
    """)
    )  # launches with no value for the stand-in timers: each timer fails on each config
    options = ["--timers", "cupti", "--no-external", "--truth", "nsys", "--mode", "direct", "--reps", "2"]
    result = run_nsprof(
        "validate", "bare.py:space", *options, "--timer-reps", "2", "--save", tmp_path / "v.json",
        cwd=tmp_path, env={**own_tmp, "NSPROF_STANDIN_TIMERS": "1"}, standins=True, in_process=True,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "nsprof: error: nothing compared: no fast timer measured 2 of the configs a truth measured "
        "(first failure: cupti on config 0: AttributeError"
    ), result.stderr
    kept = list((tmp_path / "tmp").iterdir())  # the reports and the workers' logs, kept and named
    assert len(kept) == 1 and f"kept in {kept[0]}" in last, (kept, last)
    saved = json.loads((tmp_path / "v.json").read_text())
    truth = [(r["config_id"], r["value_ns"]) for r in saved["per_config"] if r["method"] == "nsys:direct"]
    assert truth == [(0, 1500.0), (1, 2500.0)]
