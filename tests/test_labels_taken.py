"""Every number labelled with how it was taken, and the same in each of its forms (the table, --json, the
--html page, a re-read by `nsprof results`)."""

from __future__ import annotations

import json

from conftest import run_nsprof

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
