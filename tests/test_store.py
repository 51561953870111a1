"""The results store: round trips of real rows, resume, concurrent writers, crashes and interrupts."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsprof.errors import NsprofError
from nsprof.profile import config_summary
from nsprof.schema import COLUMN_DTYPES, make_frame
from nsprof.settings import ProfileSettings
from nsprof.store import (
    GROUP_FIELDS,
    KEY_FIELDS,
    MEASUREMENT_COLUMNS,
    MeasurementKey,
    ResultStore,
    StoreError,
    config_json,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
GROUP = {
    "fingerprint": "0123456789abcdef",
    "gpu": "NVIDIA H200",
    "backend": "ncu",
    "mode": "direct",
    "clock_control": "base",
    "cache_control": "all",
    "tool_version": "2025.3.1",
}


def key_for(config_id: int, **changes: str) -> MeasurementKey:
    group = {**GROUP, **changes}
    config = {"block_N": 32 * (config_id + 1)}
    return MeasurementKey(**group, config_id=config_id, config_json=config_json(config))


def rows(config_id: int, count: int = 3, base_ns: float = 1000.0) -> list[dict]:
    return [
        {
            "config_id": config_id,
            "mode": "direct",
            "rep": rep,
            "kernel": "gemm_kernel",
            "duration_ns": base_ns + rep,
            "cycles": 1.5 * (base_ns + rep),
            "clock_hz": 1.98e9,
        }
        for rep in range(count)
    ]


def failure(config_id: int, reason: str = "compile failed: boom", kind: str = "compile") -> list[dict]:
    return [{"config_id": config_id, "error": reason, "failure_kind": kind}]


def child_env() -> dict[str, str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}


@pytest.fixture
def store(tmp_path):
    with ResultStore(tmp_path / "results.sqlite") as opened:
        yield opened


@pytest.fixture(scope="module")
def profile_rows():
    """Real rows: 32 configs measured under ncu on an H200, both modes, 9 of them failures (of configs
    that did not compile or build: taken before failures had kinds, which are given here)."""
    frame = pd.read_csv(FIXTURES / "profile_ncu.csv")
    frame.loc[frame["error"].notna(), "failure_kind"] = "compile"
    return make_frame(frame)


def test_real_rows_round_trip_with_their_values(store, profile_rows):
    run_id = store.start_run(target="examples/gemm_tilelang.py:space", **GROUP)
    expected = []
    for config_id in sorted(profile_rows["config_id"].unique()):
        for mode in ("direct", "graph"):
            of_config = profile_rows[profile_rows["config_id"] == config_id]
            # a failed config has one row without a mode; it is a result under either mode
            part = of_config[(of_config["mode"] == mode).fillna(False) | of_config["mode"].isna()]
            if not len(part):
                continue
            assert store.add(run_id, key_for(int(config_id), mode=mode), part) == len(part)
            expected.append(part.assign(mode=mode))
    expected = pd.concat(expected, ignore_index=True).astype(COLUMN_DTYPES)

    stored = store.frame()
    assert list(stored.columns) == list(MEASUREMENT_COLUMNS)
    assert len(stored) == len(expected) == 239 + 9  # the 9 failures stored under both modes
    for column in (
        "config_id",
        "mode",
        "rep",
        "kernel",
        "duration_ns",
        "cycles",
        "clock_hz",
        "graph_node",
        "error",
        "clock_control",
        "cache_control",
    ):
        assert stored[column].dtype == pd.api.types.pandas_dtype(COLUMN_DTYPES[column]), column
        pd.testing.assert_series_equal(stored[column], expected[column], check_names=False)
    assert (stored["run_id"] == run_id).all()
    assert set(stored["fingerprint"]) == {GROUP["fingerprint"]}
    assert json.loads(stored.loc[0, "config_json"]) == {"block_N": 32 * (int(stored.loc[0, "config_id"]) + 1)}
    failed = stored[stored["error"].notna()]
    assert failed["duration_ns"].isna().all() and failed["error"].str.contains("failed:").all()
    assert sorted(failed["config_id"].unique()) == [0, 1, 2, 3, 4, 5, 6, 7, 31]
    # the tidy helpers work on what comes back
    pd.testing.assert_frame_equal(
        config_summary(stored[stored["mode"] == "graph"]),
        config_summary(expected[expected["mode"] == "graph"]),
    )

    # plain SQL values only
    raw = sqlite3.connect(store.path)
    kinds = {
        row
        for row in raw.execute(
            "SELECT DISTINCT typeof(config_id), typeof(rep), typeof(duration_ns), typeof(cycles), "
            "typeof(clock_hz), typeof(kernel), typeof(error), typeof(config_json) FROM measurements"
        )
    }
    raw.close()
    assert {kind for row in kinds for kind in row} <= {"integer", "real", "text", "null"}


def test_frame_filters(store):
    run_id = store.start_run()
    for config_id in range(4):
        store.add(run_id, key_for(config_id), rows(config_id))
    store.add(run_id, key_for(4), failure(4))
    store.add(
        run_id,
        key_for(0, backend="nsys", clock_control="none", cache_control="none"),
        [{"rep": 0, "kernel": "k", "duration_ns": 5.0}],
    )

    assert sorted(store.frame(config_id=[1, 3])["config_id"].unique()) == [1, 3]
    assert set(store.frame(backend="nsys")["duration_ns"]) == {5.0}
    assert len(store.frame(error=None)) == 4 * 3 + 1
    assert list(store.frame(config_id=4)["error"]) == ["compile failed: boom"]
    assert store.frame(config_id=[]).empty
    assert list(store.frame(config_id=99).columns) == list(MEASUREMENT_COLUMNS)
    with pytest.raises(ValueError, match="cannot filter on"):
        store.frame(colour="red")


def test_runs_record_labels_settings_and_finish(store):
    settings = ProfileSettings(backend="ncu", reps=7, work_dir=Path("/tmp/w"))
    finished = store.start_run(target="t.py:space", gpu_uuid="GPU-1234", settings=settings, **GROUP)
    crashed = store.start_run(target="t.py:space", settings={"reps": 3})
    store.finish_run(finished, "ok")

    runs = store.runs()
    assert list(runs["id"]) == [finished, crashed]
    first, second = runs.iloc[0], runs.iloc[1]
    assert first["status"] == "ok" and not pd.isna(first["finished_at"])
    assert first["gpu"] == "NVIDIA H200" and first["gpu_uuid"] == "GPU-1234"
    assert first["tool_version"] == "2025.3.1"
    assert json.loads(first["settings_json"])["reps"] == 7
    assert json.loads(first["settings_json"])["work_dir"] == "/tmp/w"
    assert first["nsprof_version"] and first["started_at"] <= first["finished_at"]
    # a run that never finished (crashed, or still running) says so
    assert second["status"] == "running" and pd.isna(second["finished_at"])

    with pytest.raises(ValueError, match="unknown run labels"):
        store.start_run(targte="typo")
    with pytest.raises(ValueError, match="no run 999"):
        store.finish_run(999)


def test_missing_lists_what_resume_must_measure(store):
    first = store.start_run()
    store.add(first, key_for(0), rows(0))
    store.add(first, key_for(1), rows(1))
    store.add(first, key_for(2), failure(2))  # failed only
    store.add(first, key_for(3, tool_version="2024.1"), rows(3))  # measured by another ncu
    store.add(first, key_for(4), failure(4))
    second = store.start_run()
    store.add(second, key_for(4), rows(4))  # failed once, then measured
    # 5: never measured

    assert store.missing(GROUP, range(6)) == [3, 5]
    assert store.missing(GROUP, list(range(6)), retry_failed=True) == [2, 3, 5]
    assert store.missing(GROUP, [5, 3, 0]) == [5, 3]  # the caller's order
    assert store.missing({**GROUP, "gpu": "NVIDIA A100"}, [0, 1]) == [0, 1]
    assert store.missing(key_for(3, tool_version="2024.1").without_config(), [3]) == []

    with pytest.raises(ValueError, match="lacks"):
        store.missing({k: v for k, v in GROUP.items() if k != "tool_version"}, [0])
    with pytest.raises(ValueError, match="unexpected"):
        store.missing({**GROUP, "config_json": "{}"}, [0])


def test_add_refuses_rows_that_do_not_fit_the_key_and_writes_none_of_them(store):
    run_id = store.start_run()
    bad_config = rows(1) + [{**rows(2)[0]}]
    with pytest.raises(ValueError, match="config_id=2"):
        store.add(run_id, key_for(1), bad_config)
    with pytest.raises(ValueError, match="mode='graph'"):
        store.add(run_id, key_for(1), [{**row, "mode": "graph"} for row in rows(1)])
    with pytest.raises(ValueError, match="duration_ns or an error"):
        store.add(run_id, key_for(1), rows(1) + [{"rep": 9, "kernel": "k"}])
    with pytest.raises(ValueError, match="duration_ns or an error"):
        store.add(run_id, key_for(1), [{"duration_ns": 3.0, "error": "both"}])
    with pytest.raises(ValueError, match="duration_ns=inf is not a finite number"):
        store.add(run_id, key_for(1), rows(1) + [{"rep": 9, "kernel": "k", "duration_ns": float("inf")}])
    timed_out = {
        "error": "timeout: still running after inf s",
        "failure_kind": "timeout",
        "timeout_s": math.inf,
    }
    with pytest.raises(ValueError, match="timeout_s=inf is not a finite number"):
        store.add(run_id, key_for(1), [timed_out])
    with pytest.raises(ValueError, match="no rows"):
        store.add(run_id, key_for(1), [])
    with pytest.raises(ValueError, match="no run 42"):
        store.add(42, key_for(1), rows(1))
    with pytest.raises(TypeError):
        store.add(run_id, key_for(1), rows(1)[0])
    assert store.frame().empty
    assert store.add(run_id, key_for(1), rows(1)) == 3


def test_measurement_key():
    import numpy as np

    key = MeasurementKey(**GROUP, config_id=np.int64(3), config_json=config_json({"b": 1, "a": [1, 2]}))
    assert type(key.config_id) is int and key.config_json == '{"a":[1,2],"b":1}'
    assert key.without_config() == GROUP and tuple(GROUP) == GROUP_FIELDS
    assert [f for f in KEY_FIELDS if f not in GROUP_FIELDS] == ["config_id", "config_json"]
    with pytest.raises(AttributeError):
        key.gpu = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match="gpu"):
        MeasurementKey(**{**GROUP, "gpu": None}, config_id=0, config_json="{}")
    with pytest.raises(TypeError, match="config_id"):
        MeasurementKey(**GROUP, config_id="0", config_json="{}")


def test_ctrl_c_inside_add_rolls_the_config_back(store):
    run_id = store.start_run()
    store.add(run_id, key_for(0), rows(0))

    def interrupted_rows():
        yield from rows(1, count=50)
        signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, arriving after 50 rows went in
        yield from rows(1, count=50)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.add(run_id, key_for(1), interrupted_rows())
    finally:
        signal.signal(signal.SIGINT, previous)

    assert store.frame(config_id=1).empty
    assert store.missing(GROUP, [0, 1]) == [1]
    assert len(store.frame(config_id=0)) == 3
    # nothing is left locked: another connection writes at once
    with ResultStore(store.path, busy_timeout_s=0.5) as other:
        other.add(run_id, key_for(1), rows(1))
    assert store.missing(GROUP, [0, 1]) == []


CRASHING_WRITER = textwrap.dedent("""
    import sys, time
    from nsprof.store import MeasurementKey, ResultStore
    group = dict(fingerprint="0123456789abcdef", gpu="NVIDIA H200", backend="ncu", mode="direct",
                 clock_control="base", cache_control="all", tool_version="2025.3.1")
    store = ResultStore(sys.argv[1])
    run_id = store.start_run(target="t.py:space")

    def rows(config_id, count):
        for rep in range(count):
            yield {"config_id": config_id, "rep": rep, "kernel": "k", "duration_ns": 100.0 + rep}

    for config_id in range(3):
        store.add(run_id, MeasurementKey(**group, config_id=config_id, config_json="{}"), rows(config_id, 5))

    def half_written():
        # enough rows that SQLite spills uncommitted pages into the WAL before the kill
        yield from rows(3, 50_000)
        print("mid-write", flush=True)
        time.sleep(120)
        yield from rows(3, 10)

    store.add(run_id, MeasurementKey(**group, config_id=3, config_json="{}"), half_written())
""")


def test_sigkill_mid_write_leaves_whole_configs_only(tmp_path):
    path = tmp_path / "results.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHING_WRITER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        line = child.stdout.readline()
        assert line == "mid-write\n", child.stderr.read()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()

    with ResultStore(path) as store:
        assert store.frame(config_id=3).empty
        assert store.missing(GROUP, range(5)) == [3, 4]
        for config_id in range(3):
            assert list(store.frame(config_id=config_id)["duration_ns"]) == [100.0 + rep for rep in range(5)]
        run = store.runs().iloc[0]
        assert run["status"] == "running" and pd.isna(run["finished_at"])
        # and it takes writes again
        store.add(int(run["id"]), key_for(3), rows(3))
        assert store.missing(GROUP, range(5)) == [4]
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    raw.close()


CONCURRENT_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from nsprof.store import MeasurementKey, ResultStore
    path, gpu, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():  # start together, so that both create the new store at once too
        time.sleep(0.001)
    group = dict(fingerprint="f", gpu=gpu, backend="ncu", mode="direct", clock_control="base",
                 cache_control="all", tool_version="v")
    with ResultStore(path) as store:
        run_id = store.start_run(gpu=gpu)
        for config_id in store.missing(group, range(200)):
            rows = [{"rep": rep, "kernel": "k", "duration_ns": float(config_id * 10 + rep)}
                    for rep in range(8)]
            store.add(run_id, MeasurementKey(**group, config_id=config_id, config_json="{}"), rows)
            store.frame(config_id=config_id, gpu=gpu)  # readers interleave with the other's writes
        store.finish_run(run_id, "ok")
""")


def test_two_processes_write_one_store_at_once(tmp_path):
    path = tmp_path / "new" / "results.sqlite"
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WRITER, str(path), gpu, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for gpu in ("gpu-a", "gpu-b")
    ]
    time.sleep(0.5)  # let both interpreters start and wait at the line
    go.touch()
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
        assert err == ""  # no "database is locked", no warnings

    with ResultStore(path) as store:
        frame = store.frame()
        assert len(frame) == 2 * 200 * 8
        for gpu in ("gpu-a", "gpu-b"):
            group = {**GROUP, "gpu": gpu, "fingerprint": "f", "tool_version": "v"}
            assert store.missing(group, range(200)) == []
            mine = frame[frame["gpu"] == gpu]
            assert mine["run_id"].nunique() == 1
            expected = sorted(float(c * 10 + r) for c in range(200) for r in range(8))
            assert sorted(mine["duration_ns"]) == expected
        assert list(store.runs()["status"]) == ["ok", "ok"]


OPENER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from nsprof.store import MeasurementKey, ResultStore
    while not Path(sys.argv[2]).exists():
        time.sleep(0.0005)
    with ResultStore(sys.argv[1]) as store:
        run_id = store.start_run()
        key = MeasurementKey("f", int(sys.argv[3]), "{}", "g", "ncu", "direct", "base", "all", "v")
        store.add(run_id, key, [{"rep": 0, "kernel": "k", "duration_ns": 1.0}])
""")


def test_many_processes_create_one_new_store_together(tmp_path):
    # Switching a new file to WAL takes a lock SQLite does not wait for: openers must retry.
    for round_ in range(2):
        path, go = tmp_path / f"r{round_}" / "results.sqlite", tmp_path / f"go{round_}"
        openers = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(path), str(go), str(i)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
            )
            for i in range(6)
        ]
        time.sleep(0.8)
        go.touch()
        for opener in openers:
            _, err = opener.communicate(timeout=120)
            assert opener.returncode == 0 and err == "", err
        with ResultStore(path) as store:
            assert sorted(store.frame()["config_id"]) == list(range(6))


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "results.sqlite"
    ResultStore(path).close()
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    raw.close()
    with pytest.raises(NsprofError, match="schema version 7, written by a newer nsprof") as caught:
        ResultStore(path)
    assert isinstance(caught.value, StoreError)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "content", [b"this is not a database\n" * 300, b"SQLite format 3\x00" + b"\xff" * 4000]
)
def test_garbage_file_gives_one_line_and_is_left_alone(tmp_path, content):
    path = tmp_path / "results.sqlite"
    path.write_bytes(content)
    with pytest.raises(NsprofError) as caught:
        ResultStore(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    assert path.read_bytes() == content


def test_another_programs_sqlite_is_not_taken_over(tmp_path):
    path = tmp_path / "other.sqlite"
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("CREATE TABLE notes (text TEXT)")
    raw.close()
    with pytest.raises(StoreError, match="not an nsprof results store"):
        ResultStore(path)


def _journal_mode(path) -> str:
    raw = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return raw.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        raw.close()


@pytest.mark.parametrize(
    "script",
    [
        "CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('mine')",
        # nsprof's table names, without its schema version: still not nsprof's
        "CREATE TABLE meta (key TEXT, value TEXT); CREATE TABLE measurements (x); PRAGMA user_version = 3",
        "PRAGMA user_version = 42; CREATE TABLE runs (id INTEGER)",
        "CREATE TABLE meta (name TEXT, size INTEGER); INSERT INTO meta VALUES ('a', 1)",
    ],
    ids=["notes", "meta-without-version", "user-version", "meta-of-another-program"],
)
def test_a_refused_foreign_sqlite_is_left_byte_for_byte(tmp_path, script):
    path = tmp_path / "other.sqlite"
    raw = sqlite3.connect(path)
    raw.executescript(script)
    raw.close()
    before, mode = path.read_bytes(), _journal_mode(path)
    assert mode == "delete"
    with pytest.raises(StoreError, match="not an nsprof results store") as caught:
        ResultStore(path)
    assert "\n" not in str(caught.value)
    assert path.read_bytes() == before
    assert _journal_mode(path) == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]  # no -wal, -shm or -journal left


def test_a_refused_newer_store_is_left_byte_for_byte(tmp_path):
    path = tmp_path / "results.sqlite"
    ResultStore(path).close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode=DELETE")
    with raw:
        raw.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    raw.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="written by a newer nsprof"):
        ResultStore(path)
    assert path.read_bytes() == before and _journal_mode(path) == "delete"


def test_the_store_command_line_leaves_a_foreign_sqlite_alone(tmp_path):
    from click.testing import CliRunner

    from nsprof.cli import cli

    path = tmp_path / "other.sqlite"
    raw = sqlite3.connect(path)
    raw.executescript("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('mine')")
    raw.close()
    before = path.read_bytes()
    result = CliRunner().invoke(cli, ["results", "--store", str(path)])
    assert isinstance(result.exception, StoreError) and "not an nsprof results store" in str(result.exception)
    assert path.read_bytes() == before and _journal_mode(path) == "delete"


def _filled_store(path, configs: int) -> None:
    with ResultStore(path) as store:
        run_id = store.start_run()
        for config_id in range(configs):
            store.add(run_id, key_for(config_id), rows(config_id, count=20))


def test_damaged_pages_give_one_line_when_read(tmp_path):
    path = tmp_path / "results.sqlite"
    _filled_store(path, 200)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 20 * page
    data[10 * page : len(data) - 2 * page] = os.urandom(len(data) - 12 * page)
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as caught:  # at opening or at the first read, never a raw sqlite3 error
        with ResultStore(path) as store:
            store.frame()
            store.missing(GROUP, range(200))
    assert "\n" not in str(caught.value)


def _measurements(path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as raw:
        return raw.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]


def test_a_store_deleted_while_a_run_writes_is_written_again_at_the_runs_end(tmp_path):
    path = tmp_path / "results.sqlite"
    with ResultStore(path) as store:
        run_id = store.start_run()
        store.add(run_id, key_for(0), rows(0, count=3))
        for leftover in tmp_path.glob("results.sqlite*"):  # another process's `rm results.sqlite*`
            leftover.unlink()
        store.add(run_id, key_for(1), rows(1, count=3))
        store.finish_run(run_id)
        store.add(store.start_run(), key_for(2), rows(2, count=3))  # goes on in the file written again
    assert _measurements(path) == 9  # nothing measured lost with the unlinked file


def test_a_store_replaced_while_a_run_writes_keeps_the_replacement_and_says_where_the_run_went(tmp_path):
    path = tmp_path / "results.sqlite"
    with ResultStore(path) as store:
        run_id = store.start_run()
        store.add(run_id, key_for(0), rows(0, count=3))
        for leftover in tmp_path.glob("results.sqlite*"):
            leftover.unlink()
        ResultStore(path).close()  # someone else's new, empty store at the same name
        with pytest.raises(StoreError, match="replaced while nsprof wrote") as caught:
            store.finish_run(run_id)
    assert "\n" not in str(caught.value)
    assert _measurements(path) == 0  # the replacement is left alone
    (saved,) = [p for p in tmp_path.glob("results.sqlite.*") if p.name in str(caught.value)]
    assert _measurements(saved) == 3


def test_two_replaced_stores_rescue_each_run_to_a_file_of_its_own(tmp_path):
    path = tmp_path / "results.sqlite"
    saved = []
    for configs in (1, 2):
        with ResultStore(path) as store:
            run_id = store.start_run()
            for config_id in range(configs):
                store.add(run_id, key_for(config_id), rows(config_id, count=3))
            for leftover in tmp_path.glob("results.sqlite*"):
                if leftover.name.count(".") == 1 or leftover.name.endswith(("-wal", "-shm")):
                    leftover.unlink()
            ResultStore(path).close()
            with pytest.raises(StoreError) as caught:
                store.finish_run(run_id)
        saved += [p for p in tmp_path.glob("results.sqlite.*") if p.name in str(caught.value)]
    assert len(set(saved)) == 2 and [_measurements(p) for p in saved] == [3, 6]


def test_a_store_whose_folder_was_deleted_mid_run_is_rescued_elsewhere_and_said(tmp_path):
    import shutil

    folder = tmp_path / "store"
    with ResultStore(folder / "results.sqlite") as store:
        run_id = store.start_run()
        store.add(run_id, key_for(0), rows(0, count=3))
        shutil.rmtree(folder)
        with pytest.raises(StoreError, match="deleted") as caught:
            store.finish_run(run_id)
    message = str(caught.value)
    assert "\n" not in message
    (rescued,) = [word.strip(",;:()") for word in message.split() if word.strip(",;:()").endswith(".sqlite")][
        -1:
    ]
    assert _measurements(rescued) == 3


@pytest.mark.parametrize("page", [1, 2])
def test_a_damaged_page_near_the_start_gives_one_line_at_opening(tmp_path, page):
    path = tmp_path / "results.sqlite"
    _filled_store(path, 20)
    data = bytearray(path.read_bytes())
    data[page * 4096 : (page + 1) * 4096] = bytes(4096)  # one page of zeros, where the tables begin
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="cannot open results store") as caught:
        with ResultStore(path) as store:
            store.frame()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("column", ["duration_ns", "config_id"])
def test_a_value_edited_into_another_type_gives_one_line_naming_its_column(tmp_path, column):
    path = tmp_path / "results.sqlite"
    with ResultStore(path) as store:
        run_id = store.start_run()
        store.add(run_id, key_for(0), rows(0, count=3))
    raw = sqlite3.connect(path)
    raw.execute(f"UPDATE measurements SET {column} = 'abc'")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError) as caught:
        with ResultStore(path) as store:
            store.frame()
    message = str(caught.value)
    assert "\n" not in message and column in message and "'abc'" in message, message


def test_default_location_and_journal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with ResultStore() as store:
        assert store.path == tmp_path / ".nsprof" / "results.sqlite"
        store.start_run()
    raw = sqlite3.connect(tmp_path / ".nsprof" / "results.sqlite")
    assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    raw.close()


def test_closed_store_says_so(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.start_run()


def test_export_by_suffix(store, tmp_path):
    run_id = store.start_run()
    store.add(run_id, key_for(0), rows(0))
    store.add(run_id, key_for(1), failure(1, 'crashed: SIGSEGV, "quoted", ünïcode'))

    assert store.export(tmp_path / "all.csv") == 4
    from_csv = pd.read_csv(tmp_path / "all.csv")
    assert list(from_csv.columns) == list(MEASUREMENT_COLUMNS)
    assert list(from_csv["duration_ns"][:3]) == [1000.0, 1001.0, 1002.0]
    assert from_csv["error"].iloc[3] == 'crashed: SIGSEGV, "quoted", ünïcode'

    assert store.export(tmp_path / "ok.json", error=None) == 3
    records = json.loads((tmp_path / "ok.json").read_text(encoding="utf-8"))
    assert [r["rep"] for r in records] == [0, 1, 2] and records[0]["gpu"] == "NVIDIA H200"

    pytest.importorskip("pyarrow")
    assert store.export(tmp_path / "all.parquet") == 4
    back = pd.read_parquet(tmp_path / "all.parquet")
    assert list(back["config_id"]) == [0, 0, 0, 1] and math.isnan(back["duration_ns"].iloc[3])

    with pytest.raises(StoreError, match=r"\.csv, \.json or \.parquet"):
        store.export(tmp_path / "all.xlsx")

    # a reason holding what a terminal acts on is written escaped, and read back the same
    store.add(run_id, key_for(2), failure(2, "crashed \u202e\x9b2J"))
    store.export(tmp_path / "bad.json", error="crashed \u202e\x9b2J")
    text = (tmp_path / "bad.json").read_text(encoding="utf-8")
    assert "\u202e" not in text and "\x9b" not in text and "ünïcode" not in text
    assert json.loads(text)[0]["error"] == "crashed \u202e\x9b2J"


# The schema of version 2 as nsprof wrote it before each measurement kept its worker's pid.
_BEFORE_PIDS = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '2');
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at TEXT NOT NULL, target TEXT,
    fingerprint TEXT, gpu TEXT, gpu_uuid TEXT, backend TEXT, mode TEXT, clock_control TEXT,
    cache_control TEXT, tool_version TEXT, nsprof_version TEXT NOT NULL, settings_json TEXT,
    finished_at TEXT, status TEXT NOT NULL DEFAULT 'running');
CREATE TABLE measurements (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
    fingerprint TEXT NOT NULL, config_id INTEGER NOT NULL, config_json TEXT NOT NULL, gpu TEXT NOT NULL,
    backend TEXT NOT NULL, mode TEXT NOT NULL, clock_control TEXT NOT NULL, cache_control TEXT NOT NULL,
    tool_version TEXT NOT NULL, shape_json TEXT NOT NULL DEFAULT '', shape INTEGER,
    kernel TEXT, rep INTEGER, duration_ns REAL, cycles REAL, clock_hz REAL, graph_node INTEGER,
    error TEXT, failure_kind TEXT, timeout_s REAL, CHECK ((error IS NULL) <> (duration_ns IS NULL)));
INSERT INTO runs (started_at, nsprof_version) VALUES ('2026-12-01', '0.1');
INSERT INTO measurements (run_id, fingerprint, config_id, config_json, gpu, backend, mode, clock_control,
    cache_control, tool_version, kernel, rep, duration_ns)
    VALUES (1, 'f', 0, '{}', 'g', 'ncu', 'direct', 'base', 'all', 'v', 'k', 0, 5.0);
"""


def test_each_measurement_keeps_its_worker_pid(store):
    """A stored measurement keeps the pid of the worker process that measured it (what tells a served
    worker's sessions apart from sessions in processes of their own); a failure has none."""
    run_id = store.start_run()
    store.add(run_id, key_for(0), [{**row, "pid": 4242} for row in rows(0)])
    store.add(run_id, key_for(1), failure(1))
    stored = store.frame()
    assert stored["pid"].dtype == pd.api.types.pandas_dtype(COLUMN_DTYPES["pid"])
    assert stored["pid"].tolist()[:3] == [4242] * 3 and pd.isna(stored["pid"].iloc[3])


def test_a_store_from_before_pids_gains_the_column_and_its_rows_have_none(tmp_path):
    path = tmp_path / "old.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(_BEFORE_PIDS)
    with ResultStore(path) as store:
        run_id = store.start_run()
        store.add(run_id, MeasurementKey(**{**GROUP, "fingerprint": "f"}, config_id=1, config_json="{}"),
                  [{"kernel": "k", "rep": 0, "duration_ns": 7.0, "pid": 99}])  # fmt: skip
        stored = store.frame()
    assert list(stored.columns) == list(MEASUREMENT_COLUMNS)
    assert pd.isna(stored["pid"].iloc[0]) and stored["pid"].iloc[1] == 99
    with contextlib.closing(sqlite3.connect(path)) as db:
        (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        # an older nsprof still writes it (additive: its rows get no pid)
        db.execute(
            "INSERT INTO measurements (run_id, fingerprint, config_id, config_json, gpu, backend, mode, "
            "clock_control, cache_control, tool_version, kernel, rep, duration_ns) "
            "VALUES (1, 'f', 2, '{}', 'g', 'ncu', 'direct', 'base', 'all', 'v', 'k', 0, 6.0)"
        )
        db.commit()
    assert version == "2"
    with ResultStore(path) as store:
        assert store.frame(config_id=2)["pid"].isna().all()


def test_importing_the_store_stays_light():
    code = (
        "import sys, nsprof.store, nsprof.host.lock; "
        "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "rep": st.integers(0, 2**62),
                "kernel": st.text(max_size=40),
                "duration_ns": finite,
                "cycles": st.one_of(st.none(), finite),
                "clock_hz": st.one_of(st.none(), finite),
                "graph_node": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
            }
        ),
        min_size=1,
        max_size=20,
    )
)
def test_any_rows_come_back_exactly(tmp_path_factory, generated):
    path = tmp_path_factory.getbasetemp() / "hypothesis.sqlite"
    with ResultStore(path) as store:
        run_id = store.start_run()
        config_id = int(store.frame()["config_id"].max()) + 1 if len(store.frame()) else 0
        store.add(run_id, key_for(config_id), generated)
        back = store.frame(config_id=config_id).to_dict("records")
    assert len(back) == len(generated)
    for written, read in zip(generated, back):
        for name, value in written.items():
            assert pd.isna(read[name]) if value is None else read[name] == value, (name, value, read[name])
