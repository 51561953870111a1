"""`nsprof results FILE.json` on what `validate --save` wrote: the tables, the page and the plot
again, with no GPU, no tool and no import of the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_nsprof

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "validate_seed_gemm.json"  # a real H200 run's save
TARGET = """
import nsprof.space
space = nsprof.space.Space(configs=[{"block": 32, "ns": 3000.0}, {"block": 64, "ns": 1000.0},
                                    {"block": 128, "ns": 2000.0}],
                           build=lambda c: (lambda: None), device="cpu")
"""
VALIDATE = [
    "validate",
    "t.py:space",
    "--timers",
    "event",
    "--no-external",
    "--truth",
    "ncu",
    "--mode",
    "direct",
    "--reps",
    "2",
    "--timer-reps",
    "3",
    "--no-repeat",
]


def test_a_validate_save_shows_the_same_tables_again_without_the_target(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    ran = run_nsprof(*VALIDATE, "--save", "v.json", cwd=tmp_path, standins=True)
    assert ran.returncode == 0, ran.stderr
    (tmp_path / "t.py").unlink()
    again = run_nsprof("results", "v.json", "--html", "v.html", cwd=tmp_path, in_process=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ran.stdout  # the per-config, agreement and verdict tables, byte for byte
    # without torch here the fast timers fail: each failure is shown again as it was
    failed = [line for line in ran.stderr.splitlines() if " failed on config " in line]
    assert failed and failed == [line for line in again.stderr.splitlines() if " failed on config " in line]
    assert "block=64" in again.stdout  # the configs came back with the save
    saved = json.loads((tmp_path / "v.json").read_text())
    assert saved["format"] == "nsprof validate" and saved["target"] == "t.py:space"
    page = (tmp_path / "v.html").read_text()
    assert "nsprof validate t.py:space" in page and saved["verdict"].split()[0] in page


def test_an_older_save_without_its_configs_still_loads(tmp_path):
    record = json.loads(RECORD.read_text())
    assert "format" not in record  # written before validate --save kept the run's configs
    shown = run_nsprof("results", str(RECORD), "--json", cwd=tmp_path, in_process=True)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["agreement"] == record["agreement"] and document["verdict"] == record["verdict"]
    assert document["timers"] == sorted({row["timer"] for row in record["agreement"]})
    assert document["truths"] == sorted({row["truth"] for row in record["agreement"]})
    drawn = run_nsprof(
        "results", str(RECORD), "--plot", "p.png", "--html", "p.html", cwd=tmp_path, in_process=True
    )
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "p.html").read_text().split('<table id="per-config">')[1].split("</table>")[0]
    assert rows.count("<tr>") - 1 == len({row["config_id"] for row in record["per_config"]})


@pytest.mark.parametrize(
    "edit", [{"per_config": 5}, {"agreement": [{"timer": "event"}]}], ids=["type", "columns"]
)
def test_a_save_that_cannot_be_read_is_one_line(tmp_path, edit):
    record = json.loads(RECORD.read_text())
    (tmp_path / "bad.json").write_text(json.dumps({**record, **edit, "format": "nsprof validate"}))
    done = run_nsprof("results", "bad.json", cwd=tmp_path, in_process=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("nsprof: error: bad.json: a saved validate run that cannot be read: ValueError")


@pytest.mark.parametrize("option", [["--export", "out.csv"], ["--target", "t.py:space"], ["--run", "1"]])
def test_a_saved_run_takes_no_store_option_and_the_refusal_names_it_for_what_it_is(tmp_path, option):
    saved = tmp_path / "validate.json"
    saved.write_text("{}")
    done = run_nsprof("results", str(saved), *option, in_process=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"nsprof: error: {saved} is a saved run (tune --json, validate --save), not a results store: "
        f"it takes no {option[0]} (nsprof results --help)"
    ), done.stderr
