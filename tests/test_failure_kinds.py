"""A failure's kind is data (nsprof.schema.FAILURE_KINDS): set where the cause is known (the worker, the
session, the compile step), a column of the tidy table and of the results store beside the reason,
and what the retry rule of a resume tests. Real child processes: nsprof's CLI with the stand-in
profiler (tests/standins.py), the real worker and the real compile step."""

from __future__ import annotations

import json
import sqlite3
import textwrap
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES, run_nsprof

from nsprof.schema import FAILURE_KINDS, Failure, failure_frame
from nsprof.store import MeasurementKey, ResultStore, config_json
from nsprof.tune import retryable

TARGETS = FIXTURES.parent / "targets"

# faulty_cpu's faults, a config that does not compile and one whose worker is SIGKILLed (from outside,
# as far as nsprof can tell: the OOM killer, a user).
EVERY_CAUSE = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {targets!r})
    import nsprof.space
    from faulty_cpu import build as faulty_build

    def build(config):
        if config["kind"] == "killed":
            return lambda: os.kill(os.getpid(), signal.SIGKILL)
        return faulty_build(config)

    def compile(config):
        if config["kind"] == "no_compile":
            raise RuntimeError("too much shared memory (simulated)")

    space = nsprof.space.Space(name="kinds", configs=[{{"kind": k}} for k in
                               ["ok", "crash", "hang", "raise", "no_compile", "killed", "ok"]],
                               build=build, compile=compile, device="cpu")
""")

# Config 1 builds for $NSPROF_TEST_SLOW_S (8 s): past --timeout 1, within a longer one. Config 2 does
# not compile.
SLOW_BUILD = textwrap.dedent("""
    import os, time
    import nsprof.space

    def build(config):
        if config["kind"] == "slow":  # well past a 1 s timeout on a loaded machine, well within 30 s
            time.sleep(float(os.environ.get("NSPROF_TEST_SLOW_S", "8")))
        return lambda: None

    def compile(config):
        if config["kind"] == "no_compile":
            raise RuntimeError("too much shared memory (simulated)")

    space = nsprof.space.Space(name="slow_build", configs=[{"kind": k} for k in ["ok", "slow", "no_compile"]],
                               build=build, compile=compile, device="cpu")
""")


def nsprof(tmp_path, *args, **more_env):
    """nsprof's CLI with the stand-in profiler (its workers in child processes), its temporary folders in
    tmp_path/tmp."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {"TMPDIR": str(tmp_path / "tmp"), **more_env}
    return run_nsprof(*args, cwd=tmp_path, env=env, standins=True, in_process=True)


def test_each_cause_gets_its_kind_where_it_is_known(tmp_path):
    target = tmp_path / "kinds.py"
    target.write_text(EVERY_CAUSE.format(targets=str(TARGETS)))
    done = nsprof(
        tmp_path,
        "profile",
        f"{target}:space",
        "--backend",
        "ncu",
        "--mode",
        "direct",
        "--reps",
        "1",
        "--timeout",
        "3",
        "--work-dir",
        tmp_path / "work",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    kinds = {row["config_id"]: (row["failure_kind"], row["timeout_s"]) for row in rows if row["error"]}
    assert kinds == {
        1: ("crash", None),
        2: ("timeout", 3.0),
        3: ("crash", None),
        4: ("compile", None),
        5: ("lost", None),
    }
    measured = [row for row in rows if row["error"] is None]
    assert {row["config_id"] for row in measured} == {0, 6}
    assert all(row["failure_kind"] is None and row["timeout_s"] is None for row in measured)
    errors = {row["config_id"]: row["error"] for row in rows if row["error"]}
    assert "illegal memory access" in errors[1] and "shape mismatch" in errors[3]
    assert errors[4].startswith("compile failed: RuntimeError") and "SIGKILL" in errors[5]


def test_configs_a_run_stopped_before_are_not_run_and_a_build_that_raised_is_a_crash(tmp_path, monkeypatch):
    from nsprof.session import run_session
    from nsprof.settings import ProfileSettings

    monkeypatch.syspath_prepend(str(FIXTURES.parent))
    from standins import StatusDriver

    driver = StatusDriver.for_session()
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    settings = ProfileSettings(
        backend="ncu", modes=("direct",), reps=1, warmup=0, timeout_s=2, work_dir=tmp_path, max_restarts=1
    )
    result = run_session(str(TARGETS / "faulty_cpu.py") + ":space", 9, settings)
    # 0 and 2 ran; 1 crashed; the one restart hung on 3; the rest never ran (5 would have raised, 6 failed
    # to build: not run says nothing of them)
    assert {c: f.kind for c, f in result.failures.items()} == {
        1: "crash",
        3: "timeout",
        4: "not_run",
        5: "not_run",
        6: "not_run",
        7: "not_run",
        8: "not_run",
    }
    rows = result.frame[result.frame["error"].notna()].set_index("config_id")
    assert rows["failure_kind"].to_dict() == {c: f.kind for c, f in result.failures.items()}
    assert rows.loc[3, "timeout_s"] == 2.0 and rows["timeout_s"].drop(3).isna().all()
    assert result.frame[result.frame["error"].isna()]["failure_kind"].isna().all()

    full = run_session(
        str(TARGETS / "faulty_cpu.py") + ":space",
        9,
        replace(settings, max_restarts=10, work_dir=tmp_path / "full"),
        config_ids=[5, 6],
    )
    assert {c: f.kind for c, f in full.failures.items()} == {5: "crash", 6: "crash"}
    assert full.failures[6].startswith("build failed")


def test_a_status_line_says_its_kind_and_one_without_reads_as_a_crash():
    from nsprof.worker.protocol import parse_status

    status = parse_status(
        'fail 1 compile "compile failed: X: y"\nfail 2 "CUDA error: boom"\n'
        'fail 3 timeout "timeout: odd words"\n'
    )
    assert [(c, f, f.kind) for c, f in status.failed.items()] == [
        (1, "compile failed: X: y", "compile"),
        (2, "CUDA error: boom", "crash"),
        (3, "timeout: odd words", "timeout"),
    ]


def test_the_profilers_own_failures_are_tool_failures(tmp_path):
    from nsprof.drivers.ncu import NcuDriver

    log = tmp_path / "part0.log"
    log.write_text("==NSPROF== start config 0\n==ERROR== ERR_NVGPUCTRPERM - no permission\n")
    assert NcuDriver(Path("ncu")).crash_reason(log, 1).kind == "tool"
    log.write_text("==NSPROF== start config 0\nCUDA error: an illegal memory access was encountered\n")
    assert NcuDriver(Path("ncu")).crash_reason(log, 1).kind == "crash"


def test_kinds_are_one_set_each_with_its_meaning():
    assert set(FAILURE_KINDS) == {"timeout", "crash", "compile", "not_run", "lost", "tool"}
    assert all(isinstance(words, str) and words for words in FAILURE_KINDS.values())
    with pytest.raises(ValueError, match="failure kind must be one of"):
        Failure("boom", "oops")


GROUP = {
    "fingerprint": "f",
    "gpu": "g",
    "backend": "ncu",
    "mode": "direct",
    "clock_control": "base",
    "cache_control": "all",
    "tool_version": "v",
}


def _key(config_id: int) -> MeasurementKey:
    return MeasurementKey(**GROUP, config_id=config_id, config_json=config_json({"i": config_id}))


def test_the_store_keeps_each_failures_kind_and_bound(tmp_path):
    failures = {
        0: Failure("timeout: still running after 2 s", "timeout", 2.0),
        1: Failure("compile failed: X: y", "compile"),
        2: Failure("not run: restarts spent", "not_run"),
    }
    frame = failure_frame(failures, source="ncu", mode="direct", clock_control="base", cache_control="all")
    with ResultStore(tmp_path / "r.sqlite") as store:
        run = store.start_run()
        for config_id in failures:
            store.add(run, _key(config_id), frame[frame["config_id"] == config_id])
        store.add(run, _key(3), [{"kernel": "k", "rep": 0, "duration_ns": 5.0}])
        stored = store.frame().set_index("config_id")
        assert stored.loc[[0, 1, 2], "failure_kind"].tolist() == ["timeout", "compile", "not_run"]
        assert pd.isna(stored.loc[3, "failure_kind"])
        assert stored.loc[0, "timeout_s"] == 2.0 and stored["timeout_s"].drop(0).isna().all()
        assert stored["error"].drop(3).tolist() == list(failures.values())
        # a failure without its kind, or a measurement with one, is refused (and writes nothing)
        with pytest.raises(ValueError, match="a failure row needs its failure_kind"):
            store.add(run, _key(4), [{"error": "compile failed: X: y"}])
        with pytest.raises(ValueError, match="a failure row needs its failure_kind"):
            store.add(run, _key(4), [{"error": "boom", "failure_kind": "oops"}])
        with pytest.raises(ValueError, match="a measurement has no failure_kind"):
            store.add(run, _key(4), [{"kernel": "k", "rep": 0, "duration_ns": 5.0, "failure_kind": "crash"}])
        assert 4 not in set(store.frame()["config_id"])
        # the retry rule reads the kinds back
        assert store.missing(GROUP, [0, 1, 2, 3], retry_if=lambda failure: retryable(failure, 5.0)) == [0, 2]
        assert store.missing(GROUP, [0, 1, 2, 3], retry_if=lambda failure: retryable(failure, 2.0)) == [2]


# The store's schema at version 1 (before kinds), as nsprof wrote it (git show main:nsprof/store.py).
_V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    target TEXT, fingerprint TEXT, gpu TEXT, gpu_uuid TEXT, backend TEXT, mode TEXT,
    clock_control TEXT, cache_control TEXT, tool_version TEXT,
    nsprof_version TEXT NOT NULL,
    settings_json TEXT,
    finished_at TEXT,
    status TEXT NOT NULL DEFAULT 'running'
);
CREATE TABLE measurements (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    fingerprint TEXT NOT NULL, config_id INTEGER NOT NULL, config_json TEXT NOT NULL, gpu TEXT NOT NULL,
    backend TEXT NOT NULL, mode TEXT NOT NULL, clock_control TEXT NOT NULL, cache_control TEXT NOT NULL,
    tool_version TEXT NOT NULL,
    shape_json TEXT NOT NULL DEFAULT '', shape INTEGER,
    kernel TEXT, rep INTEGER, duration_ns REAL, cycles REAL, clock_hz REAL, graph_node INTEGER,
    error TEXT,
    CHECK ((error IS NULL) <> (duration_ns IS NULL))
);
CREATE INDEX measurements_key ON measurements
    (fingerprint, gpu, backend, mode, clock_control, cache_control, tool_version, config_id);
CREATE INDEX measurements_run ON measurements (run_id);
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO runs (started_at, nsprof_version) VALUES ('2026-12-01', '0.1');
"""

# Reasons as nsprof worded them before kinds -> the kind and bound they get when the store is opened.
OLD_REASONS = [
    ("timeout: still running after 2 s", "timeout", 2.0),
    ("timeout: still running after 7.5 s", "timeout", 7.5),
    ("not run: the worker was restarted 50 times (raise ProfileSettings.max_restarts)", "not_run", None),
    ("measured 3 times, but ncu's report lost it each time", "lost", None),
    ("worker killed by signal SIGKILL", "lost", None),
    ("worker killed by signal SIGSEGV", "crash", None),
    ("profiling counters are not permitted for this user (ERR_NVGPUCTRPERM): run as root", "tool", None),
    ("compile failed: RuntimeError: too much shared memory", "compile", None),
    ("build failed: ValueError: no such tile size", "crash", None),
    ("CUDA error: an illegal memory access was encountered", "crash", None),
]


def test_a_store_from_before_kinds_gets_them_once_from_its_words(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(_V1_SCHEMA)
        for config_id, (reason, _, _) in enumerate(OLD_REASONS):
            db.execute(
                "INSERT INTO measurements (run_id, fingerprint, config_id, config_json, gpu, backend, mode, "
                "clock_control, cache_control, tool_version, error) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    GROUP["fingerprint"],
                    config_id,
                    config_json({"i": config_id}),
                    GROUP["gpu"],
                    GROUP["backend"],
                    GROUP["mode"],
                    GROUP["clock_control"],
                    GROUP["cache_control"],
                    GROUP["tool_version"],
                    reason,
                ),
            )
        db.execute(
            "INSERT INTO measurements (run_id, fingerprint, config_id, config_json, gpu, backend, mode, "
            "clock_control, cache_control, tool_version, kernel, rep, duration_ns) "
            "VALUES (1, 'f', 99, '{}', 'g', 'ncu', 'direct', 'base', 'all', 'v', 'k', 0, 5.0)"
        )
    db.close()
    with ResultStore(path) as store:
        stored = store.frame().set_index("config_id")
    got = {
        reason: (
            stored.loc[c, "failure_kind"],
            None if pd.isna(stored.loc[c, "timeout_s"]) else stored.loc[c, "timeout_s"],
        )
        for c, (reason, _, _) in enumerate(OLD_REASONS)
    }
    assert got == {reason: (kind, bound) for reason, kind, bound in OLD_REASONS}
    assert pd.isna(stored.loc[99, "failure_kind"]) and stored.loc[99, "duration_ns"] == 5.0
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
    # once: a reason's words are not read again (a kind changed by hand stays)
    raw.execute("UPDATE measurements SET failure_kind = 'lost' WHERE config_id = 9")
    raw.commit()
    raw.close()
    with ResultStore(path) as store:
        assert store.frame(config_id=9)["failure_kind"].tolist() == ["lost"]
        retried = store.missing(
            GROUP, list(range(len(OLD_REASONS))), retry_if=lambda failure: retryable(failure, 5.0)
        )
    assert retried == [0, 2, 3, 4, 6, 9]  # the 2 s timeout under 5 s; not run, lost, tool; 9 by its kind now


def test_the_retry_rule_tests_the_kind_not_the_words():
    assert retryable(Failure("timeout: still running after 2 s", "timeout", 2.0), 5.0)
    assert not retryable(Failure("timeout: still running after 5 s", "timeout", 5.0), 5.0)
    assert not retryable(Failure("timeout: still running after 2 s", "crash"), 5.0)  # words of a timeout
    assert retryable(Failure("CUDA error: an illegal memory access", "lost"), 5.0)  # words of a crash
    assert retryable(Failure("anything", "not_run"), 5.0) and retryable(Failure("anything", "tool"), 5.0)
    assert not retryable(Failure("not run: words of not run", "compile"), 5.0)


def _stored(store_path) -> dict[int, list]:
    with ResultStore(store_path) as store:
        frame = store.frame()
    return {
        int(c): [
            (int(run), None if pd.isna(kind) else kind)
            for run, kind in zip(rows["run_id"], rows["failure_kind"])
        ]
        for c, rows in frame.groupby("config_id")
    }


def test_resume_with_a_longer_timeout_measures_a_timed_out_config_again_but_not_a_compile_failure(tmp_path):
    target = tmp_path / "slow_build.py"
    target.write_text(SLOW_BUILD)
    store = tmp_path / "results.sqlite"

    def tune(*extra, **env):
        done = nsprof(
            tmp_path,
            "tune",
            f"{target}:space",
            "--backend",
            "ncu",
            "--mode",
            "direct",
            "--reps",
            "1",
            "--budget-s",
            "0",
            "--no-feed-back",
            "--no-tuner-pick",
            "--store",
            store,
            *extra,
            **env,
        )
        assert done.returncode == 0, done.stderr
        return done

    tune("--timeout", "1")
    first = _stored(store)
    assert [kind for _, kind in first[1]] == ["timeout"] and [kind for _, kind in first[2]] == ["compile"]
    with ResultStore(store) as results:
        assert results.frame(config_id=1)["timeout_s"].tolist() == [1.0]
    tune("--resume", "--timeout", "1")  # the same bound: nothing to gain
    assert _stored(store) == first
    # a longer bound: the timed-out config only, measured this time (its build shortened: no need to wait 8 s)
    tune("--resume", "--timeout", "30", NSPROF_TEST_SLOW_S="2")
    again = _stored(store)
    assert again[0] == first[0] and again[2] == first[2]
    latest = max(run for run, _ in again[1])
    assert latest > max(run for run, _ in first[1])
    assert {kind for run, kind in again[1] if run == latest} == {None}
