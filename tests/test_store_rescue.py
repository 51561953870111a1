"""A results store's file that goes away while runs write to it: the runs' rows end in the store where
they can, and a rescue file is made only where they cannot (a store genuinely replaced by another
file: tests/test_store.py). Real processes where two write at once, their order from files they
make and wait for, never from the clock."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import wait_for

from nsprof.store import MeasurementKey, ResultStore, config_json

ROOT = Path(__file__).resolve().parents[1]
GROUP = dict(
    fingerprint="f", backend="ncu", mode="direct", clock_control="base", cache_control="all", tool_version="v"
)

# A run of store argv[1] keyed by GPU argv[2] (each writer's own), in steps the test lets it take
# through the files of folder argv[3]: config 0, then (once the store was deleted) config 1, then
# (once told) its end, and a second run in whatever file the store is in after that.
WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from nsprof.errors import StoreError
    from nsprof.store import MeasurementKey, ResultStore

    path, gpu, gates = sys.argv[1], sys.argv[2], Path(sys.argv[3])

    def wait(gate):
        while not (gates / gate).exists():
            time.sleep(0.01)

    def add(store, run_id, config_id):
        key = MeasurementKey(fingerprint="f", config_id=config_id, config_json="{}", gpu=gpu, backend="ncu",
                             mode="direct", clock_control="base", cache_control="all", tool_version="v")
        store.add(run_id, key, [{"rep": rep, "kernel": "k", "duration_ns": 100.0 + rep} for rep in range(3)])

    with ResultStore(path) as store:
        run_id = store.start_run(gpu=gpu)
        add(store, run_id, 0)
        (gates / f"{gpu}-started").touch()
        wait("deleted")
        add(store, run_id, 1)
        (gates / f"{gpu}-added").touch()
        wait(f"{gpu}-finish")
        try:
            store.finish_run(run_id, "ok")
        except StoreError as exc:
            print(exc, file=sys.stderr)
            sys.exit(3)
        again = store.start_run(gpu=gpu)
        add(store, again, 2)
        store.finish_run(again, "ok")
""")


def _child_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def _measurements(path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as raw:
        return raw.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]


def test_two_runs_through_a_deleted_store_both_end_in_the_store_the_first_wrote_again(tmp_path):
    path, gates = tmp_path / "results.sqlite", tmp_path / "gates"
    gates.mkdir()
    writers = {
        gpu: subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), gpu, str(gates)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )  # fmt: skip
        for gpu in ("gpu-a", "gpu-b")
    }
    try:
        assert wait_for(lambda: all((gates / f"{gpu}-started").exists() for gpu in writers))
        for leftover in tmp_path.glob("results.sqlite*"):  # `rm results.sqlite*` while both write
            leftover.unlink()
        (gates / "deleted").touch()
        assert wait_for(lambda: all((gates / f"{gpu}-added").exists() for gpu in writers))
        for gpu, writer in writers.items():  # gpu-a ends first and writes the store again
            (gates / f"{gpu}-finish").touch()
            _, err = writer.communicate(timeout=120)
            assert writer.returncode == 0 and err == "", err
    finally:
        for writer in writers.values():
            if writer.poll() is None:
                writer.kill()
                writer.communicate()
    assert list(tmp_path.glob("results.sqlite.*")) == []  # no rescue file beside the store
    with ResultStore(path) as store:
        frame, runs = store.frame(), store.runs()
    for gpu in writers:
        mine = frame[frame["gpu"] == gpu]
        assert sorted(mine["config_id"]) == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # each row once, none lost
        assert mine.groupby("config_id")["run_id"].nunique().tolist() == [1, 1, 1]
    assert sorted(runs["gpu"]) == ["gpu-a", "gpu-a", "gpu-b", "gpu-b"] and set(runs["status"]) == {"ok"}


def _key(config_id: int) -> MeasurementKey:
    return MeasurementKey(**GROUP, gpu="g", config_id=config_id, config_json=config_json({"c": config_id}))


def _rows() -> list[dict]:
    return [{"rep": rep, "kernel": "k", "duration_ns": 100.0 + rep} for rep in range(3)]


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """A store's path that is a link (results.sqlite) to where the store is (kept/results.sqlite)."""
    real = tmp_path / "kept" / "results.sqlite"
    real.parent.mkdir()
    link = tmp_path / "results.sqlite"
    link.symlink_to(real)
    return real, link


def test_a_store_reached_through_a_link_removed_mid_run_keeps_every_row_where_the_link_led(tmp_path):
    real, link = _linked(tmp_path)
    with ResultStore(link) as store:
        run_id = store.start_run()
        store.add(run_id, _key(0), _rows())
        link.unlink()  # the link alone: the store it named is still there
        store.add(run_id, _key(1), _rows())
        store.finish_run(run_id)
        store.add(store.start_run(), _key(2), _rows())
    assert not link.exists() and not link.is_symlink()  # no new file where the link was
    assert _measurements(real) == 9


def test_a_store_deleted_through_its_link_is_written_again_where_the_link_leads(tmp_path):
    real, link = _linked(tmp_path)
    with ResultStore(link) as store:
        run_id = store.start_run()
        store.add(run_id, _key(0), _rows())
        for leftover in real.parent.glob("results.sqlite*"):
            leftover.unlink()
        store.add(run_id, _key(1), _rows())
        store.finish_run(run_id)
    assert link.is_symlink() and _measurements(real) == 6


def _written_again_by_another_run(path: Path, theirs: int, gpu: str) -> None:
    """The store at `path` deleted (`rm results.sqlite*`) and written again by another run that also
    wrote to it: a copy in which run `theirs` is that run's own (another start, another GPU)."""
    copy = path.with_name("other.sqlite")
    with contextlib.closing(sqlite3.connect(path)) as db, contextlib.closing(sqlite3.connect(copy)) as other:
        db.backup(other)
        other.execute("UPDATE runs SET started_at = 'then', gpu = ? WHERE id = ?", (gpu, theirs))
        other.execute("DELETE FROM measurements WHERE run_id = ?", (theirs,))
        other.commit()
        other.execute("PRAGMA journal_mode = DELETE")  # one file, to be moved whole
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
        (path.parent / name).unlink(missing_ok=True)
    os.replace(copy, path)


def _runs_by_gpu(path: Path) -> dict[str, tuple[str, int]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {
            gpu: (
                status,
                db.execute("SELECT COUNT(*) FROM measurements WHERE run_id = ?", (run,)).fetchone()[0],
            )
            for run, gpu, status in db.execute("SELECT id, gpu, status FROM runs")
        }


def test_a_run_renumbered_twice_by_two_rescues_keeps_its_rows_and_its_end(tmp_path):
    """Each rescue adds this store's runs under the ids they have in the file it writes to now, and a
    run's id as its caller knows it leads to its row there, however many rescues renumbered it."""
    path = tmp_path / "results.sqlite"
    with ResultStore(path) as store:
        first, ours = store.start_run(gpu="a"), store.start_run(gpu="ours")
        key = MeasurementKey(config_id=0, config_json=config_json({}), gpu="ours", **GROUP)
        store.add(ours, key, [{"rep": rep, "kernel": "k", "duration_ns": 100.0} for rep in range(3)])
        _written_again_by_another_run(path, ours, "theirs-1")  # their run took our id: ours is added anew
        store.finish_run(first, "ok")
        assert _runs_by_gpu(path)["ours"] == ("running", 3)
        now = store.renumbered[ours]
        _written_again_by_another_run(path, now, "theirs-2")  # and once more, under its new id
        store.finish_run(ours, "ok")
    runs = _runs_by_gpu(path)
    assert runs["ours"] == ("ok", 3)  # our run, its rows and its end
    assert runs["theirs-1"] == ("running", 0) and runs["theirs-2"] == ("running", 0)  # theirs untouched


def test_a_store_written_again_but_held_by_its_writer_is_not_said_to_be_replaced(tmp_path):
    """The other run that wrote the deleted store again holds it (a write under way) past the busy
    timeout: this run's rows go to a file beside it, and the error says what happened, not that the
    store was replaced by another file."""
    import pytest

    from nsprof.errors import StoreError

    path = tmp_path / "results.sqlite"
    with ResultStore(path, busy_timeout_s=0.2) as store:
        first, ours = store.start_run(gpu="a"), store.start_run(gpu="ours")
        key = MeasurementKey(config_id=0, config_json=config_json({}), gpu="ours", **GROUP)
        store.add(ours, key, [{"rep": rep, "kernel": "k", "duration_ns": 100.0} for rep in range(3)])
        _written_again_by_another_run(path, ours, "theirs")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as writer:
            writer.execute("BEGIN IMMEDIATE")  # its writer's transaction, open
            with pytest.raises(StoreError) as raised:
                store.finish_run(first, "ok")
            writer.execute("ROLLBACK")
    words = str(raised.value)
    assert "written again by another nsprof run" in words and "replaced" not in words, words
    beside = [p for p in tmp_path.glob("results.sqlite.*.sqlite")]
    assert len(beside) == 1 and str(beside[0]) in words
    assert _runs_by_gpu(beside[0])["ours"] == ("running", 3)
    assert _runs_by_gpu(path) == {"a": ("running", 0), "theirs": ("running", 0)}  # theirs left alone


def test_a_store_whose_folder_went_away_is_rescued_into_a_private_folder(tmp_path, monkeypatch):
    """Its folder removed, the run's rows go to the temporary folder: into a folder of this user's alone, not
    a file of /tmp itself, where another user who saw its name could plant a hot journal beside it
    (sqlite3 rolls one back into the file it opens)."""
    import shutil
    import stat
    import tempfile

    from nsprof.errors import StoreError

    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    folder = tmp_path / "project"
    folder.mkdir()
    with ResultStore(folder / "results.sqlite") as store:
        run_id = store.start_run(gpu="g")
        key = MeasurementKey(config_id=0, config_json=config_json({"a": 1}), gpu="g", **GROUP)
        store.add(run_id, key, [{"rep": 0, "kernel": "k", "duration_ns": 100.0}])
        shutil.rmtree(folder)
        try:
            store.finish_run(run_id, "ok")
        except StoreError as exc:
            said = str(exc)
        else:
            raise AssertionError("the store's folder is gone: the run cannot end there")
    (rescued,) = [p for p in shared.rglob("*.sqlite")]
    assert str(rescued) in said
    assert rescued.parent != shared and rescued.parent.parent == shared
    st = os.stat(rescued.parent)
    assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert _measurements(rescued) == 1
