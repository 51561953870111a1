"""The tuner's calls at the end of a tune (its own pick, the feed-back) run in children started when
the tune starts (nsprof.feedback.tuner_children), so that their imports of the target (torch, the
tuner: seconds each) overlap the measuring instead of following it. The target records every
process that imports it and every hook call, so that these are read from the processes themselves."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from conftest import run_nsprof

TARGET = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    RECORD = Path(os.environ["NSPROF_TEST_RECORD"])

    def record(**what):
        with open(RECORD, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv, **what}) + "\\n")

    # this process's start, in clock ticks since boot (/proc/self/stat's field 22)
    record(event="import", start=int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]))

    class Hook(TunerHook):
        name = "the test's tuner"
        can_pick = True

        def pick(self):
            record(event="pick")
            return {"tuner": self.name, "timer": "own", "config_id": 1, "config": {"i": 1}, "timings_ms": {}}

        def feed_back(self, latencies_ms):
            record(event="feed_back")
            return "stored " + str(min(latencies_ms, key=latencies_ms.get))

    FAIL = os.environ.get("NSPROF_TEST_FAIL") == "1"

    def build(config):
        if FAIL:
            raise RuntimeError("no such tile size")
        return lambda: None

    space = Space(name="t", configs=[{"i": i, "ns": 3000 - 1000 * i} for i in range(3)], build=build,
                  device="cpu", tuner=Hook())
""")
TUNE = ["--backend", "ncu", "--mode", "direct", "--reps", "3", "--budget-s", "0", "--no-store", "--json"]


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _is(record: dict, module: str) -> bool:
    return any(module in arg for arg in record["argv"])


def test_the_pick_and_the_feed_back_run_in_children_that_imported_while_tune_measured(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    record = tmp_path / "record.jsonl"
    done = run_nsprof(
        "tune", "t.py:space", *TUNE, cwd=tmp_path, standins=True, env={"NSPROF_TEST_RECORD": str(record)}
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["best_config_id"] == 2 and document["tuner_pick"]["config_id"] == 1
    assert any(
        note.startswith("handed to the test's tuner") and "stored 2" in note for note in document["notes"]
    )
    records = _records(record)
    imports = [r for r in records if r["event"] == "import"]
    workers = [r for r in imports if _is(r, "worker")]
    tuners = {r["pid"]: r for r in imports if _is(r, "feedback")}
    assert len(workers) == 1 and len(tuners) == 2, imports
    calls = {r["event"]: r["pid"] for r in records if r["event"] in ("pick", "feed_back")}
    # each call in a process of its own, and each of them started before the session's worker
    assert set(calls) == {"pick", "feed_back"} and set(calls.values()) == set(tuners)
    for pid in calls.values():
        assert tuners[pid]["start"] <= workers[0]["start"], (tuners[pid], workers[0])


@pytest.mark.parametrize("why", ["nothing measured", "no feed-back asked"])
def test_a_child_started_ahead_and_never_called_is_stopped(tmp_path, why):
    (tmp_path / "t.py").write_text(TARGET)
    record = tmp_path / "record.jsonl"
    env = {"NSPROF_TEST_RECORD": str(record), "NSPROF_TEST_FAIL": "1" if why == "nothing measured" else "0"}
    extra = ["--no-feed-back"] if why == "no feed-back asked" else []
    done = run_nsprof("tune", "t.py:space", *TUNE, *extra, cwd=tmp_path, standins=True, env=env)
    assert done.returncode == (2 if why == "nothing measured" else 0), done.stderr
    records = _records(record)
    assert not any(r["event"] == "feed_back" for r in records)
    for r in records:  # no process that imported the target outlives nsprof
        with pytest.raises(ProcessLookupError):
            os.kill(r["pid"], 0)
