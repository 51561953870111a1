"""A results store's file that went away while a run wrote to it, found at a run's end
(ResultStore.finish_run): what the run wrote is kept, and said where when it is not in the store.

The store is the file its path led to when it was opened (through a symbolic link: the file the link
named, so that a link removed alone moves nothing). At a run's end that file is
- still there: nothing to do;
- deleted (`rm results.sqlite*`; its rows went on into the unlinked file): written there again,
  whole, and used from then on; where that cannot be (its folder went too), written to a new file
  of the temporary folder, and a StoreError says where;
- the same store written again there by another nsprof run that wrote to the deleted file too (it
  holds runs of this file: their ids and start times): this store's runs are added to it, each
  whole, and it is used from then on; where that run holds it past the busy timeout, this one is
  written to a new file beside it, and a StoreError says where;
- replaced by another file: that one is left alone, this one is written to a new file beside it,
  and a StoreError says where.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path

from nsprof.errors import StoreError
from nsprof.store_schema import MEASUREMENT_COLUMNS, RUN_COLUMNS, SCHEMA_VERSION, one_line


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def new_file(folder: Path, name: str) -> Path:
    """A file of `folder` no one else has (made, empty, readable by this user only), named after `name`."""
    handle, made = tempfile.mkstemp(prefix=f"{name}.", suffix=".sqlite", dir=folder)
    os.close(handle)
    return Path(made)


def copy_to(db: sqlite3.Connection, target: Path) -> None:
    with contextlib.closing(sqlite3.connect(target)) as copy:
        db.backup(copy)


def rescue(store, now: tuple[int, int] | None) -> None:
    """What the module says, for `store` (a ResultStore) whose file is no longer the one at its real
    path (`now`: the identity of the file there now, None for none). Returns once the run's rows are in
    the store (store reopened on it); raises StoreError when they are elsewhere, saying where."""
    real = store.real_path
    if now is None:
        try:
            if _written_again(store.connection, real):
                store.reopen()
                return
        except (OSError, sqlite3.Error) as exc:
            raise _in_the_temporary_folder(store, "deleted", "there again", exc) from None
    # another file is there: this store written again by another run, or something else (a file
    # that cannot be read as this store is something else)
    try:
        same = _same_store(store.connection, real)
    except sqlite3.Error:
        same = False
    if not same:
        raise _beside(store, "replaced", f"(the file at {store.path} is left alone)")
    # this store's runs under the ids they have in its file now (an earlier rescue may have
    # renumbered them), and each caller's id led on to where its run is next
    now_ids = {run: store.renumbered.get(run, run) for run in store.run_ids}
    try:
        step = _add_runs(store.connection, real, set(now_ids.values()), store.busy_timeout_s)
    except sqlite3.Error as exc:  # one transaction: nothing of it is there
        why = f"(adding this run to it failed: {one_line(exc)})"
        raise _beside(store, "written again by another nsprof run", why) from None
    store.renumbered = {run: step.get(now, now) for run, now in now_ids.items()}
    store.reopen()


def _beside(store, happened: str, why: str) -> StoreError:
    """What the run wrote, copied to a new file beside the store's (else of the temporary folder);
    the error that says where."""
    try:
        target = new_file(store.real_path.parent, store.real_path.name)
        copy_to(store.connection, target)
    except (OSError, sqlite3.Error) as exc:
        return _in_the_temporary_folder(store, happened, "beside it", exc)
    return StoreError(
        f"results store {store.path} was {happened} while nsprof wrote to it: what this run wrote is in "
        f"{target} {why}"
    )


def _in_the_temporary_folder(store, happened: str, where: str, exc: Exception) -> StoreError:
    """What the run wrote, copied to a new file in a folder of this user's alone in the temporary folder
    (beside a file of /tmp itself, another user who saw its name could plant a journal that sqlite3 would
    roll back into it); the error that says where."""
    target = new_file(Path(tempfile.mkdtemp(prefix="nsprof-rescued-")), store.path.name)
    copy_to(store.connection, target)
    return StoreError(
        f"results store {store.path} was {happened} while nsprof wrote to it, and this run could not be "
        f"written {where} ({one_line(exc)}): what it wrote is in {target}"
    )


def _written_again(db: sqlite3.Connection, real: Path) -> bool:
    """The deleted store written again, whole, at `real`: a new file beside it put there in one step
    (a hard link), so that no one sees it half written. False when another file came there first
    (another run's rescue, say)."""
    made = new_file(real.parent, real.name)
    try:
        copy_to(db, made)
        try:
            os.link(made, real)
        except FileExistsError:
            return False
        except OSError:
            os.replace(made, real)  # a file system without hard links
            return True
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(made)


def _runs(db: sqlite3.Connection) -> set[tuple[int, str]]:
    return {(int(i), str(s)) for i, s in db.execute("SELECT id, started_at FROM runs")}


def _same_store(db: sqlite3.Connection, real: Path) -> bool:
    """Whether the file at `real` is this store written again by another run: nsprof's store of this
    schema holding one of this file's runs (the same id, started at the same instant)."""
    uri = f"{real.resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as other:
        version = other.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is None or version[0] != str(SCHEMA_VERSION):
            return False
        return bool(_runs(other) & _runs(db))


def _add_runs(db: sqlite3.Connection, real: Path, run_ids, busy_timeout_s: float) -> dict[int, int]:
    """This store's runs `run_ids`, each with its rows, put into the store at `real` in one transaction:
    a run it holds (copied there while it ran) replaced by this one whole; a run it lacks added under
    an id of its own. Returns {this file's run id: its id there} for those whose id changed."""
    columns = ", ".join(RUN_COLUMNS[1:])
    rows = ", ".join(MEASUREMENT_COLUMNS[1:])
    renumbered = {}
    with contextlib.closing(sqlite3.connect(real, timeout=busy_timeout_s, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        try:
            for run_id in sorted(run_ids):
                run = db.execute(f"SELECT {columns} FROM runs WHERE id = ?", (run_id,)).fetchone()
                if run is None:
                    continue
                there = other.execute("SELECT started_at FROM runs WHERE id = ?", (run_id,)).fetchone()
                if there is not None and there[0] == run[0]:
                    other.execute("DELETE FROM measurements WHERE run_id = ?", (run_id,))
                    sets = ", ".join(f"{name} = ?" for name in RUN_COLUMNS[1:])
                    other.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*run, run_id))
                    new_id = run_id
                else:
                    marks = ", ".join("?" for _ in RUN_COLUMNS[1:])
                    new_id = other.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", run).lastrowid
                    renumbered[run_id] = int(new_id)
                measured = db.execute(
                    f"SELECT {rows} FROM measurements WHERE run_id = ? ORDER BY id", (run_id,)
                )
                marks = ", ".join("?" for _ in MEASUREMENT_COLUMNS)
                other.executemany(
                    f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) VALUES ({marks})",
                    ((new_id, *row) for row in measured),
                )
            other.execute("COMMIT")
        except BaseException:
            if other.in_transaction:
                other.execute("ROLLBACK")
            raise
    return renumbered
