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
# No GPU here: the event timers fail on every config, so such a validate compares no timer and, after its
# tables and files, exits 2 (as does results showing its save again).
COMPARED_NOTHING = 2


def test_a_validate_save_shows_the_same_tables_again_without_the_target(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    ran = run_nsprof(*VALIDATE, "--save", "v.json", cwd=tmp_path, standins=True)
    assert ran.returncode == COMPARED_NOTHING, ran.stderr
    (tmp_path / "t.py").unlink()
    again = run_nsprof("results", "v.json", "--html", "v.html", cwd=tmp_path, in_process=True)
    assert again.returncode == COMPARED_NOTHING, again.stderr
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
    "edit, words",
    [
        ({"per_config": 5}, "its per_config is the number 5, not a list"),
        ({"agreement": [{"timer": "event"}]}, "its agreement rows lack truth"),
    ],
    ids=["type", "columns"],
)
def test_a_save_that_cannot_be_read_is_one_line(tmp_path, edit, words):
    record = json.loads(RECORD.read_text())
    (tmp_path / "bad.json").write_text(json.dumps({**record, **edit, "format": "nsprof validate"}))
    done = run_nsprof("results", "bad.json", cwd=tmp_path, in_process=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert (
        line.startswith("nsprof: error: bad.json: a saved validate run that cannot be read: ")
        and words in line
    )


# Each a field of a saved validate run edited by hand to a value of the wrong kind (each of these once
# gave an internal error): the field, the value, and the words naming the field in the refusal.
WRONG_FIELDS = [
    ("agreement.0.bias", "x", "its agreement[0].bias is the text 'x', not a finite number"),
    ("agreement.0.kendall_tau", {}, "its agreement[0].kendall_tau is an object"),
    ("agreement.0.spearman_rho", [], "its agreement[0].spearman_rho is a list"),
    ("agreement.0.regret", [1, 2], "its agreement[0].regret is a list"),
    ("agreement.0.same_best", [], "its agreement[0].same_best is a list, not true or false"),
    ("agreement.0.top_k_hit", [], "its agreement[0].top_k_hit is a list, not true or false"),
    ("noise_floor.0.kendall_tau", "x", "its noise_floor[0].kendall_tau is the text 'x'"),
    ("noise_floor.0.median_rel_change", {}, "its noise_floor[0].median_rel_change is an object"),
    ("noise_floor.0.max_rel_change", [], "its noise_floor[0].max_rel_change is a list"),
    ("noise_floor.0.truth", ["a"], "its noise_floor[0].truth is a list, not text"),
    ("per_config.0.config_id", float("inf"), "its per_config[0].config_id is the number inf"),
    ("per_config.0.method", {}, "its per_config[0].method is an object, not text"),
    ("conditions", {"event": float("nan")}, "its conditions.event is the number nan, not text"),
    (
        "failures",
        [{"method": "event", "config_id": float("inf"), "reason": "r"}],
        "its failures[0].config_id",
    ),
    ("shape", float("inf"), "its shape is the number inf"),
    ("shapes", {}, "its shapes is an object, not a list"),
]


@pytest.mark.parametrize(
    "field, value, words", WRONG_FIELDS, ids=[f"{field}={value!r}" for field, value, _ in WRONG_FIELDS]
)
def test_a_save_with_a_field_of_the_wrong_kind_is_one_line_naming_the_field(tmp_path, field, value, words):
    edited = {**json.loads(RECORD.read_text()), "format": "nsprof validate"}
    *path, last = [int(key) if key.isdigit() else key for key in field.split(".")]
    held = edited
    for key in path:
        held = held[key]
    held[last] = value
    (tmp_path / "bad.json").write_text(json.dumps(edited))
    for more in ([], ["--json"]):
        done = run_nsprof("results", "bad.json", *more, cwd=tmp_path, in_process=True)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith("nsprof: error: bad.json: a saved validate run that cannot be read: its ")
        assert words in lines[0], lines


def test_a_save_with_an_empty_list_of_shapes_reads_as_the_one_shape_it_holds(tmp_path):
    record = json.loads(RECORD.read_text())
    (tmp_path / "v.json").write_text(json.dumps({**record, "format": "nsprof validate", "shapes": []}))
    done = run_nsprof("results", "v.json", "--json", cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["agreement"] == record["agreement"]


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


NOTHING_UNDER_NCU = """
import nsprof.space
NS = [3000.0, 1000.0, 2000.0]

class Launch:
    def __init__(self, config):
        self.timer_ns = {"cupti": NS[config["i"]] + 100, "cupti_cold": NS[config["i"]] + 50}
    def __call__(self):
        return None

configs = [{"i": i, "ns": NS[i], "ns_at": {"base-all": "nan"}} for i in range(3)]
space = nsprof.space.Space(configs=configs, build=Launch, device="cpu")
"""


def test_a_truth_that_measured_nothing_leaves_the_others_winner_a_config_id_and_the_save_reads_back(tmp_path):
    """ncu measures no config (NaN on each), nsys all three: nsys's floor still names its winner as a config id,
    printed and saved as one, and the save reads back the same."""
    (tmp_path / "t.py").write_text(NOTHING_UNDER_NCU)
    validate = ["validate", "t.py:space", "--timers", "cupti", "--no-external", "--truth", "ncu,nsys"]
    validate += ["--mode", "direct", "--reps", "3", "--timer-reps", "3", "--repeat", "--save", "v.json"]
    env = {"NSPROF_STANDIN_TIMERS": "1"}
    ran = run_nsprof(*validate, cwd=tmp_path, standins=True, env=env, in_process=True)
    assert ran.returncode == 0, ran.stderr
    assert "config 1.0" not in ran.stdout and "config 1" in ran.stdout, ran.stdout
    floors = json.loads((tmp_path / "v.json").read_text())["noise_floor"]
    assert [row["winner"] for row in floors if row["truth"].startswith("nsys")] == [1]
    again = run_nsprof("results", "v.json", cwd=tmp_path, in_process=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ran.stdout


FAILS_ON_ITS_REPEAT = """
import os
import nsprof.space

def build(config):
    # built by the timers' session, the truth's, then its repeat's: it fails the third time
    if config["block"] == 128:
        with open(MARKER, "a") as builds:
            builds.write("x")
        if os.path.getsize(MARKER) >= 3:
            raise RuntimeError("fails in the repeat")
    return lambda: None

MARKER = {marker!r}
space = nsprof.space.Space(configs=[{{"block": 32, "ns": 3000.0}}, {{"block": 64, "ns": 1000.0}},
                                    {{"block": 128, "ns": 2000.0}}], build=build, device="cpu")
"""


def test_a_config_that_fails_only_in_the_truths_repeat_is_said_and_left_out_of_its_floor(tmp_path):
    (tmp_path / "t.py").write_text(FAILS_ON_ITS_REPEAT.format(marker=str(tmp_path / "builds")))
    validate = [*VALIDATE[: VALIDATE.index("--no-repeat")], "--repeat", "--save", "v.json"]
    ran = run_nsprof(*validate, cwd=tmp_path, standins=True, in_process=True)
    assert ran.returncode == COMPARED_NOTHING, ran.stderr
    said = [line for line in ran.stdout.splitlines() if "its repeat failed" in line]
    assert len(said) == 1 and "config 2: build failed: RuntimeError: fails in the repeat" in said[0], (
        ran.stdout
    )
    floors = json.loads((tmp_path / "v.json").read_text())["noise_floor"]
    assert [row["n"] for row in floors] == [2]  # the two configs both runs measured


def test_a_save_holding_a_negative_cold_graph_value_reads_back(tmp_path):
    """graph_cold takes the flush graph's median off each sample: a kernel shorter than that noise can come out
    below zero. The save holds what was measured, and reads back."""
    record = {**json.loads(RECORD.read_text()), "format": "nsprof validate"}
    row = next(r for r in record["per_config"] if r["value_ns"] is not None)
    row["value_ns"], row["ci_low_ns"] = -120.0, -300.0
    (tmp_path / "v.json").write_text(json.dumps(record))
    done = run_nsprof("results", "v.json", "--json", cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr
    values = [r["value_ns"] for r in json.loads(done.stdout)["per_config"]]
    assert -120.0 in values


def test_a_config_every_timer_failed_on_is_said_once_per_timer_not_again_for_the_worker(tmp_path):
    """No GPU here: event and event_cold fail on each config, each saying why in a line of its own; the worker's
    own record of the config's failure (every method failed) is not a third line for it."""
    (tmp_path / "t.py").write_text(TARGET)
    ran = run_nsprof(*VALIDATE, cwd=tmp_path, standins=True, in_process=True)
    assert ran.returncode == COMPARED_NOTHING, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if "failed on config" in line]
    assert sorted(line.split(":")[1].strip() for line in lines) == sorted(
        f"{method} failed on config {c}" for method in ("event", "event_cold") for c in range(3)
    ), ran.stderr


def test_a_validate_that_measured_nothing_is_an_error_and_so_is_its_save_read_back(tmp_path):
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "def build(config):\n"
        "    raise RuntimeError('nope')\n"
        "space = nsprof.space.Space(configs=[{'ns': 1000.0}, {'ns': 2000.0}], build=build, device='cpu')\n"
    )
    timers = {"NSPROF_STANDIN_TIMERS": "1"}
    ran = run_nsprof(*VALIDATE, "--save", "v.json", cwd=tmp_path, standins=True, env=timers, in_process=True)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert "no config was measured: all 2 failed" in last and "nope" in last, ran.stderr
    said, _, kept = last.partition(" (reports and logs kept in ")  # the run's logs kept and named
    assert kept, last
    again = run_nsprof("results", "v.json", cwd=tmp_path, in_process=True)
    assert again.returncode == 2, again.stderr
    assert again.stderr.strip().splitlines()[-1].endswith(said.removeprefix("nsprof: error: ")), again.stderr
