"""A fast-timer config that dies part-way (one method measured, the next one killing the worker) is a
failure and nothing else: no row of it is measured, none is handed to the store, and a Ctrl-C while it
runs hands over only the configs measured whole. The real bare worker, its timers stood in for
(tests/targets/standin_timers.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from conftest import STANDINS, wait_for

TARGET = """
import nsprof.space

class Launch:
    def __init__(self, config):
        self.timer_ns = {"cupti": 1000.0 + config["i"], "cupti_cold": 2000.0 + config["i"]}
        self.dies = config.get("dies", False)

    def __call__(self):
        return None

space = nsprof.space.Space(configs=[{"i": 0}, {"i": 1, "dies": "cupti_cold"}, {"i": 2}], build=Launch, device="cpu")
"""
# Measures the target with two timers; prints what on_rows was handed and the result's frame as JSON.
RUN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from standins import standin_timers
    from nsprof.drivers import registry
    from nsprof.measure import FastTimers, Request
    from nsprof.settings import ProfileSettings

    registry.register("none", standin_timers(), ground_truth=False)
    work = Path(sys.argv[1])
    timers = FastTimers(["cupti", "cupti_cold"], ProfileSettings(backend="none", timeout_s=3, work_dir=work), work,
                        timer_reps=5)
    handed = []
    def rows(frame):
        handed.extend(json.loads(frame[["config_id", "source", "duration_ns", "error"]].to_json(orient="values")))
        print(json.dumps({"handed": handed}), flush=True)
    try:
        measured = timers.measure(Request("t.py:space", (0, 1, 2), 3), on_rows=rows)
    except KeyboardInterrupt:
        print(json.dumps({"interrupted": handed}), flush=True)
        sys.exit(0)
    frame = json.loads(measured.frame[["config_id", "source", "duration_ns", "error"]].to_json(orient="values"))
    print(json.dumps({"frame": frame, "failures": sorted(measured.failures), "handed": handed}))
""")  # fmt: skip


def _run(tmp_path, **env):
    import json

    (tmp_path / "t.py").write_text(TARGET)
    child = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path / "work"), str(STANDINS.parent)], cwd=tmp_path,
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return child, json


def test_a_timer_config_that_dies_part_way_is_failed_and_not_measured(tmp_path):
    child, json = _run(tmp_path)
    out, err = child.communicate(timeout=120)
    document = json.loads(out.strip().splitlines()[-1])
    assert document["failures"] == [1], err
    of_1 = [row for row in document["frame"] if row[0] == 1]
    assert of_1 and all(row[2] is None and row[3] for row in of_1), of_1  # its failure, no duration
    assert sorted({row[0] for row in document["frame"] if row[3] is None}) == [0, 2]
    assert not [row for row in document["handed"] if row[0] == 1 and row[3] is None], document["handed"]


def test_a_ctrl_c_while_a_timer_config_hangs_part_way_hands_over_only_whole_configs(tmp_path):
    child, json = _run(tmp_path, NSPROF_TEST_DIES="hang")
    results = tmp_path / "work" / "timers.jsonl"
    try:
        # config 1's first method written, its second one hanging
        assert wait_for(
            lambda: (
                results.exists()
                and '"config_id": 1' in results.read_text().replace('"config_id":1', '"config_id": 1')
            )
        )
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    document = json.loads(out.strip().splitlines()[-1])
    assert "interrupted" in document, out + err
    assert sorted({row[0] for row in document["interrupted"]}) == [0], document
