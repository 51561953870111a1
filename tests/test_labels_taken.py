"""Every number labelled with how it was taken, and the same in each of its forms (the table, --json, the
--html page, a re-read by `nsprof results`)."""

from __future__ import annotations

import json

from conftest import run_nsprof

# Two shapes, two truths: under nsys (clocks free, L2 warm: "none-none") the configs are far apart, so
# nsys needs no adaptive reps; under ncu configs 0 and 1 lie within noise, so ncu's adaptive reps run.
SHAPED = """
import nsprof.space
SHAPES = [{"M": 1}, {"M": 16}]
configs = [{"i": c, "ns_shapes": [[1000, 1005, 3000][c]] * 2, "ns_sigma": 0.05,
            "ns_shapes_at": {"none-none": [[500, 900, 1500][c]] * 2}} for c in range(3)]
space = nsprof.space.Space(configs=configs, shapes=SHAPES, build=lambda c, s: (lambda: None), device="cpu")
"""
SHAPED_TUNE = ["tune", "t.py:space", "--truth", "nsys,ncu", "--no-explain", "--mode", "direct", "--reps", "3"]
SHAPED_TUNE += ["--no-feed-back", "--no-tuner-pick", "--budget-s", "60", "--store", "s.sqlite"]


def test_shaped_tune_notes_do_not_speak_for_a_truth_they_were_not_taken_under(tmp_path):
    """tune of a target with shapes under --truth nsys,ncu: each truth's notes are printed named (the
    deploy truth's alone were printed, as if for every truth: ncu's adaptive reps went unsaid)."""
    for folder in ("json", "text"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "t.py").write_text(SHAPED)
    as_json = run_nsprof(*SHAPED_TUNE, "--json", cwd=tmp_path / "json", standins=True, in_process=True)
    printed = run_nsprof(*SHAPED_TUNE, cwd=tmp_path / "text", standins=True, in_process=True)
    assert as_json.returncode == 0 and printed.returncode == 0, as_json.stderr + printed.stderr
    report = json.loads(as_json.stdout)
    ncu = [t for t in report["shapes"][1]["truths"] if t["truth"] == "ncu"][0]
    assert "(adaptive)" in ncu["label"] and "interleaved session" in ncu["notes"][-1], ncu
    out = printed.stdout
    assert "the contenders' up to 12 (adaptive)" in out, out  # the ncu table's label says so
    assert "note: adaptive reps: none needed (the first pass separated the best)" not in out, out
    assert "note: nsys: adaptive reps: none needed (the first pass separated the best)" in out, out
    assert "note: ncu: " in out and "interleaved session" in out, out


CLOSE = """
import nsprof.space
R = [[1000, 1030, 980], [1010, 1040, 990], [3000, 3000, 3000]]
space = nsprof.space.Space(configs=[{"i": i, "ns_reps": R[i]} for i in range(3)], build=lambda c: (lambda: None),
                           device="cpu")
"""


def test_results_reread_json_settings_are_the_ones_the_tune_ran_with(tmp_path):
    """results --target T --json: its "settings" are those the stored tune recorded, not the defaults for all
    but those it ranks by."""
    (tmp_path / "t.py").write_text(CLOSE)
    tune = ["tune", "t.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "3", "--no-feed-back"]
    tune += ["--no-tuner-pick", "--equivalence", "5", "--budget-s", "0", "--store", "s.sqlite", "--json"]
    done = run_nsprof(*tune, cwd=tmp_path, standins=True, in_process=True)
    assert done.returncode == 0, done.stderr
    taken = json.loads(done.stdout)["settings"]
    assert taken["equivalence_pct"] == 5.0 and taken["budget_s"] == 0.0, taken
    again = run_nsprof(
        "results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path, in_process=True
    )
    assert again.returncode == 0, again.stderr
    reread = json.loads(again.stdout)["settings"]
    assert (reread["equivalence_pct"], reread["budget_s"]) == (5.0, 0.0), reread


TIMED = """
import nsprof.space
NCU = [[3000, 3030, 2970], [2000, 2020, 1980], [1000, 1010, 990], [1500, 1515, 1485]]
WARM = [950, 2400, 1700, 1300]
class Launch:
    def __init__(self, c):
        self.timer_ns = {"cupti": WARM[c["i"]], "cupti_cold": 2 * WARM[c["i"]]}
    def __call__(self):
        return None
space = nsprof.space.Space(configs=[{"i": i, "ns_reps": NCU[i]} for i in range(4)], build=Launch, device="cpu")
"""


def test_tune_labels_say_the_l2_state_for_every_backend(tmp_path):
    """Each backend's label says its caches: ncu's flushed, nsys's not (warm L2), a fast timer's as validate's
    "how each was taken" says (they said nothing of L2)."""
    (tmp_path / "t.py").write_text(TIMED)
    common = ["--mode", "direct", "--reps", "3", "--budget-s", "0", "--no-feed-back", "--no-tuner-pick"]
    labels = {}
    for backend in ("ncu", "nsys", "cupti"):
        done = run_nsprof(
            "tune",
            "t.py:space",
            "--backend",
            backend,
            *common,
            "--no-store",
            "--json",
            cwd=tmp_path,
            standins=True,
            in_process=True,
            env={"NSPROF_STANDIN_TIMERS": "1"},
        )
        assert done.returncode == 0, done.stderr
        labels[backend] = json.loads(done.stdout)["label"]
    assert "caches flushed" in labels["ncu"], labels
    assert "caches not flushed (warm L2)" in labels["nsys"], labels
    assert labels["cupti"].endswith(
        "median of 100 samples, in-process, the card's own clocks, L2 warm, direct launch"
    )


def test_tune_page_labels_the_prescreen_table_with_its_timer(tmp_path):
    """tune --prescreen cupti --html: the page's "Prescreen" table is labelled with the timer that took it,
    and how (it was a bare table of numbers)."""
    import html as html_module
    import re

    (tmp_path / "t.py").write_text(TIMED)
    tune = ["tune", "t.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "3", "--budget-s", "0"]
    tune += ["--no-feed-back", "--no-tuner-pick", "--prescreen", "cupti", "--top", "2", "--html", "p.html"]
    done = run_nsprof(
        *tune, "--no-store", cwd=tmp_path, standins=True, in_process=True, env={"NSPROF_STANDIN_TIMERS": "1"}
    )
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "p.html").read_text()
    section = page[page.index("<h2>Prescreen</h2>") :]
    text = html_module.unescape(re.sub(r"<[^>]+>", " ", section))
    assert "0.950" in text  # config 0's cupti value is in the table...
    assert "fast timer cupti, median of 100 samples, in-process, the card's own clocks, L2 warm" in text, text
