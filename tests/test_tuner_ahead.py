"""The tuner's calls at the end of a tune (its own pick, the feed-back) run in children started when
the tune starts (nsprof.feedback.tuner_children), so that their imports of the target (torch, the
tuner: seconds each) overlap the measuring instead of following it. The target records every
process that imports it and every hook call, so that these are read from the processes themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import STANDINS, run_nsprof, running, wait_for

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


def _gone(records: list[dict]) -> None:
    """No process that imported the target outlives nsprof."""
    for r in records:
        with pytest.raises(ProcessLookupError):
            os.kill(r["pid"], 0)


def test_a_child_started_ahead_and_never_called_is_stopped_when_nothing_was_measured(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    record = tmp_path / "record.jsonl"
    env = {"NSPROF_TEST_RECORD": str(record), "NSPROF_TEST_FAIL": "1"}
    done = run_nsprof("tune", "t.py:space", *TUNE, cwd=tmp_path, standins=True, env=env)
    assert done.returncode == 2, done.stderr
    records = _records(record)
    assert len([r for r in records if r["event"] == "import" and _is(r, "feedback")]) == 2  # pick, feed-back
    assert not any(r["event"] in ("pick", "feed_back") for r in records)
    _gone(records)


SHAPED_TARGET = textwrap.dedent("""
    import json, os, sys
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    def record(**what):
        with open(os.environ["NSPROF_TEST_RECORD"], "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv, **what}) + "\\n")

    record(event="import")

    class Hook(TunerHook):
        name = "the test's tuner"
        feed_back_shapes_apart = True  # each shape's call in a process of its own, as TileLang's

        def feed_back(self, latencies_ms):
            raise AssertionError("a target with shapes takes feed_back_shapes")

        def feed_back_shapes(self, by_shape):
            record(event="feed_back_shapes", shapes=sorted(by_shape))
            return {str(shape): "stored" for shape in by_shape}

    def build(config, shape):
        if shape == 1:
            raise RuntimeError("no such tile size at this shape")
        return lambda: None

    space = Space(name="t", configs=[{"i": i} for i in range(3)], build=build, shapes=[0, 1],
                  device="cpu", tuner=Hook())
""")


def test_the_child_of_a_shape_with_nothing_measured_is_stopped(tmp_path):
    (tmp_path / "t.py").write_text(SHAPED_TARGET)
    record = tmp_path / "record.jsonl"
    done = run_nsprof(
        *("tune", "t.py:space", *TUNE, "--no-tuner-pick"),
        cwd=tmp_path,
        standins=True,
        env={"NSPROF_TEST_RECORD": str(record)},
    )
    records = _records(record)
    children = [r for r in records if r["event"] == "import" and _is(r, "feedback")]
    assert len(children) == 2, (records, done.stderr)  # one per shape, both started ahead
    calls = [r for r in records if r["event"].startswith("feed_back")]
    assert [(r["event"], r["shapes"]) for r in calls] == [("feed_back_shapes", [0])], done.stderr
    _gone(records)


LOUD_TARGET = textwrap.dedent("""
    import fcntl, os, sys, time
    from pathlib import Path
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    # An import that logs much while it holds a lock that other imports of the target take too (a
    # compiler's cache lock): a child started ahead must not stall there, holding the lock. The
    # worker's import comes second (it waits for the child's mark), as when the child wins the race.
    held = Path(os.environ["NSPROF_TEST_LOCK"] + ".held")
    child = any("feedback" in arg for arg in sys.argv)
    while any("worker" in arg for arg in sys.argv) and not held.exists():
        time.sleep(0.01)
    with open(os.environ["NSPROF_TEST_LOCK"], "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if child:
            held.touch()
            for _ in range(20000):
                print("compiler log line " + "x" * 60)

    class Hook(TunerHook):
        name = "the test's tuner"

        def feed_back(self, latencies_ms):
            return "stored " + str(min(latencies_ms, key=latencies_ms.get))

    space = Space(name="t", configs=[{"i": i, "ns": 3000 - 1000 * i} for i in range(3)],
                  build=lambda c: (lambda: None), device="cpu", tuner=Hook())
""")


def test_a_child_that_prints_much_while_it_imports_does_not_stall_the_tune(tmp_path):
    (tmp_path / "t.py").write_text(LOUD_TARGET)
    env = {"NSPROF_TEST_LOCK": str(tmp_path / "lock")}
    done = run_nsprof("tune", "t.py:space", *TUNE, cwd=tmp_path, standins=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    notes = json.loads(done.stdout)["notes"]
    assert any(note.startswith("handed to the test's tuner") and "stored 2" in note for note in notes)


# The tuner's children record their start, then import slowly (torch on a busy machine).
SLOW_TARGET = TARGET.replace(
    'record(event="import",',
    'record(event="begin")\n'
    'if any("feedback" in arg for arg in sys.argv):\n'
    '    import time; time.sleep(float(os.environ["NSPROF_TEST_SLOW_S"]))\n'
    'record(event="import",',
)


def test_a_child_started_ahead_dies_with_a_sigkilled_nsprof(tmp_path):
    """Killed while its tuner children still import (a slow torch), nsprof leaves none of them, and no
    file of theirs in its temporary folder."""
    (tmp_path / "t.py").write_text(SLOW_TARGET)
    record, temporary = tmp_path / "record.jsonl", tmp_path / "tmp"
    temporary.mkdir()
    env = {
        **os.environ,
        "NSPROF_TEST_RECORD": str(record),
        "NSPROF_TEST_SLOW_S": "600",
        "TMPDIR": str(temporary),
    }
    nsprof = subprocess.Popen(
        [sys.executable, str(STANDINS), "tune", "t.py:space", *TUNE],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: len(_children(record)) == 2), (
            "the pick's and the feed-back's children started"
        )
    finally:
        nsprof.kill()
        nsprof.wait()
    left = [pid for pid in _children(record) if not wait_for(lambda pid=pid: not running(pid))]
    for pid in left:  # not left behind for the rest of the suite
        os.kill(pid, 9)
    assert not left, f"children {left} outlived nsprof"
    assert not list(temporary.glob("nsprof-tuner-*")), "the tuner calls' argument files outlived nsprof"


def _children(record: Path) -> list[int]:
    if not record.exists():
        return []
    return [r["pid"] for r in _records(record) if r["event"] == "begin" and _is(r, "feedback")]


HANGING_CALL = textwrap.dedent("""
    import sys
    from nsprof.errors import NsprofError
    from nsprof.feedback import TunerChild
    from nsprof.settings import TuneSettings

    child = TunerChild("t.py:space", "feed_back")
    try:
        child.call([{i: 0.001 for i in range(20000)}], TuneSettings(backend="ncu", timeout_s=0.5), 1)
    except NsprofError as exc:
        print(exc)
    finally:
        child.close()
""")


def test_a_call_whose_child_hangs_in_its_import_is_bounded_whatever_the_arguments_size(tmp_path):
    """Arguments larger than a pipe's buffer (a ranking of 20,000 configs) must not stall nsprof behind
    a child that never finishes importing: the call's bound holds."""
    (tmp_path / "t.py").write_text(
        "import sys, time\nif any('feedback' in a for a in sys.argv):\n    time.sleep(3600)\n" + TARGET
    )
    (tmp_path / "call.py").write_text(HANGING_CALL)
    env = {**os.environ, "NSPROF_TEST_RECORD": str(tmp_path / "record.jsonl")}
    done = subprocess.run(
        [sys.executable, "call.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "it ran past 0.5 s (--timeout times the number of configs)", done.stderr


# The tuner prints bytes that are no UTF-8 (a Latin-1 name, a compiler's raw output) as it works.
RAW_BYTES_TARGET = TARGET.replace(
    'record(event="pick")',
    'record(event="pick")\n'
    "        for stream in (sys.stdout, sys.stderr):\n"
    '            stream.flush(); stream.buffer.write(b"caf\\xe9 \\xff\\n"); stream.buffer.flush()',
)


def test_a_tuner_that_prints_bytes_that_are_no_utf8_still_gives_its_pick_and_feed_back(tmp_path):
    (tmp_path / "t.py").write_text(RAW_BYTES_TARGET)
    record = tmp_path / "record.jsonl"
    done = run_nsprof(
        "tune", "t.py:space", *TUNE, cwd=tmp_path, standins=True, env={"NSPROF_TEST_RECORD": str(record)}
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["tuner_pick"] is not None and document["tuner_pick"]["config_id"] == 1, document["notes"]
    assert any(note.startswith("handed to the test's tuner") for note in document["notes"]), document["notes"]


# The tuner's pick starts a process of its own (a compiler, a benchmark helper), then hangs.
SPAWNING_TARGET = TARGET.replace(
    'record(event="pick")',
    "import subprocess, time\n"
    '        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])\n'
    '        record(event="helper", helper=helper.pid)\n'
    "        time.sleep(3600)",
)

STOPPED_CALL = textwrap.dedent("""
    import json, sys, threading
    from nsprof.feedback import TunerChild
    from nsprof.settings import TuneSettings

    child = TunerChild("t.py:space", "pick")
    failed = []
    def call():
        try:
            child.call([], TuneSettings(backend="ncu", timeout_s=600), 1)
        except Exception as exc:
            failed.append(str(exc))
    thread = threading.Thread(target=call)
    thread.start()
    sys.stdin.readline()  # the test saw the tuner's helper start
    child.close()  # as a timeout or a Ctrl-C of nsprof does
    thread.join(60)
    print(json.dumps(failed))
""")


def test_stopping_a_tuners_call_stops_the_processes_the_tuner_started(tmp_path, own_gpu_lock_folder):
    (tmp_path / "t.py").write_text(SPAWNING_TARGET)
    (tmp_path / "call.py").write_text(STOPPED_CALL)
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "NSPROF_TEST_RECORD": str(record)}
    proc = subprocess.Popen(
        [sys.executable, "call.py"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    helpers = []
    try:
        assert wait_for(lambda: record.exists() and any(r["event"] == "helper" for r in _records(record)))
        helpers = [r["helper"] for r in _records(record) if r["event"] == "helper"]
        out, _ = proc.communicate("\n", timeout=120)
    finally:
        proc.kill()
    assert len(json.loads(out)) == 1, out  # the call failed: it was stopped
    left = [pid for pid in helpers if not wait_for(lambda pid=pid: not running(pid))]
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"the tuner's helper {left} outlived its stopped call"
