"""The results store's file: its columns and schema, the look before opening (another program's
file, a newer nsprof's store), WAL, transactions, and the upgrades of older stores (shape columns;
failure kinds derived once from a version 1 store's reasons, kind_from_words, and nowhere else)."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from nsprof.errors import StoreError

# 2: failure_kind and timeout_s. Not additive as shapes were: an older nsprof would write failures
# without a kind, so it refuses a version 2 store (a newer nsprof's) instead.
SCHEMA_VERSION = 2
DEFAULT_PATH = Path(".nsprof") / "results.sqlite"

# What a measurement depends on. The order is the column order of the table and of frame().
KEY_FIELDS = (
    "fingerprint",
    "config_id",
    "config_json",
    "gpu",
    "backend",
    "mode",
    "clock_control",
    "cache_control",
    "tool_version",
)
# The key of a whole config space: what missing() is asked about.
GROUP_FIELDS = tuple(f for f in KEY_FIELDS if f not in ("config_id", "config_json"))
# The tidy-table columns a measurement row keeps (see nsprof.schema).
ROW_FIELDS = ("kernel", "rep", "duration_ns", "cycles", "clock_hz", "graph_node", "error")
# The problem shape a row was measured at, beside its config (MeasurementKey.shape_json, .shape):
# "" and NULL for a target without shapes. Columns added to stores from before shapes on opening.
SHAPE_FIELDS = ("shape_json", "shape")
# A failure row's kind (nsprof.schema.FAILURE_KINDS) and, for a timeout, the bound it ran past; NULL
# for a measurement. Last, after the shape: old positions stay.
FAILURE_FIELDS = ("failure_kind", "timeout_s")
# The pid of the worker process that measured a row (the tidy table's `pid`): through nsprof serve
# every run's sessions are one process, which run ids cannot tell. NULL where unknown (a failure, a
# report without it, a row of a store from before pids: the column added on opening). Last.
PROCESS_FIELDS = ("pid",)
MEASUREMENT_COLUMNS = ("run_id", *KEY_FIELDS, *ROW_FIELDS, *SHAPE_FIELDS, *FAILURE_FIELDS, *PROCESS_FIELDS)
RUN_COLUMNS = (
    "id",
    "started_at",
    "target",
    "fingerprint",
    "gpu",
    "gpu_uuid",
    "backend",
    "mode",
    "clock_control",
    "cache_control",
    "tool_version",
    "nsprof_version",
    "settings_json",
    "finished_at",
    "status",
)
# What start_run(**labels) accepts: the labels among a run's columns, settings as JSON; the rest
# of a run's columns nsprof fills in itself.
RUN_LABELS = (*RUN_COLUMNS[RUN_COLUMNS.index("target") : RUN_COLUMNS.index("nsprof_version")], "settings")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so an old export's run_id stays unambiguous
    started_at TEXT NOT NULL,
    target TEXT, fingerprint TEXT, gpu TEXT, gpu_uuid TEXT, backend TEXT, mode TEXT,
    clock_control TEXT, cache_control TEXT, tool_version TEXT,
    nsprof_version TEXT NOT NULL,
    settings_json TEXT,
    finished_at TEXT,  -- NULL while running, and forever after a crash
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
    failure_kind TEXT, timeout_s REAL,
    pid INTEGER,
    -- a row is either a measurement or a failure with its reason, never both or neither
    CHECK ((error IS NULL) <> (duration_ns IS NULL))
);
CREATE INDEX measurements_key ON measurements
    (fingerprint, gpu, backend, mode, clock_control, cache_control, tool_version, config_id);
CREATE INDEX measurements_run ON measurements (run_id);
"""


# How nsprof worded failures before they had kinds (schema version 1), for _migrate_to_kinds only:
# nowhere else is a reason's text read for what it means.
_OLD_TIMEOUT = re.compile(r"^timeout: still running after ([0-9.e+]+) s")
_OLD_KINDS = (
    ("not_run", re.compile(r"^not run: ")),
    ("lost", re.compile(r"^(measured \d+ times, but |worker killed by signal SIG(KILL|TERM|HUP|INT)\b)")),
    ("tool", re.compile(r"^(profiling counters are not permitted|the disk holding )")),
    ("compile", re.compile(r"^(compile failed: |compile timed out: |not compiled: )")),
)


def kind_from_words(reason: str) -> tuple[str, float | None]:
    """(kind, timeout_s) of a failure stored before kinds, from its reason as nsprof worded it then;
    a reason of no other kind is a crash (the config's own failure, as the old retry rule took it)."""
    timed_out = _OLD_TIMEOUT.match(reason)
    if timed_out:
        return "timeout", float(timed_out.group(1))
    return next((kind for kind, words in _OLD_KINDS if words.match(reason)), "crash"), None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    # IMMEDIATE takes the write lock now (waiting up to the busy timeout), so two writers
    # never deadlock upgrading read locks.
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        # BaseException too: Ctrl-C in the middle of a config's rows leaves none of them.
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def refuse_foreign(path: Path, busy_timeout_s: float) -> None:
    """Refuse another program's SQLite file, or a newer nsprof's store, before anything
    writes to it: opening read-write switches a file to WAL (its header changes on disk)
    and may leave -wal and -shm files beside it. So an existing file is read first through
    a read-only connection; a new or empty file, or one with no table yet, is nsprof's to
    make. What the read-only look cannot settle (a file that is no database, a locked one)
    is left to the normal open, whose errors say why."""
    try:
        if path.stat().st_size == 0:
            return
    except OSError:
        return  # missing: created by the normal open
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=busy_timeout_s)
    except sqlite3.Error:
        return
    try:
        try:
            tables = _tables(conn)
        except sqlite3.Error:
            return
        if not tables:
            return
        row = None
        if "meta" in tables:
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return
                # another program's `meta`, without nsprof's columns: row stays None
            except sqlite3.DatabaseError as exc:  # damaged pages (malformed image)
                raise StoreError(f"cannot open results store {path}: {one_line(exc)}") from None
    finally:
        conn.close()
    problem = _schema_problem(path, row)
    if problem:
        raise StoreError(problem)


def enable_wal(db: sqlite3.Connection, busy_timeout_s: float) -> None:
    """WAL: readers never block the writer, and a killed writer leaves only uncommitted frames behind.

    Switching a new file to WAL needs an exclusive lock that SQLite does not wait for (no busy
    handler), so processes opening a new store together retry here until the busy timeout.
    """
    deadline = time.monotonic() + busy_timeout_s
    delay_s = 0.001
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
        time.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.05)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def check_schema(db: sqlite3.Connection, path: Path) -> None:
    """Make a new store's tables, refuse a file that is no store of this nsprof's, and bring an
    older store up to date."""
    tables = _tables(db)
    if not tables:
        # IMMEDIATE: two processes creating the same new store take turns; the second sees tables.
        with transaction(db):
            if not _tables(db):
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        tables = _tables(db)
    row = None
    if "meta" in tables:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    problem = _schema_problem(path, row) or _foreign_objects(db, path, tables)
    if problem:
        raise StoreError(problem)
    _add_shape_columns(db)
    if int(row[0]) < SCHEMA_VERSION:
        _migrate_to_kinds(db)
    _add_pid_column(db)  # after the failure columns: every store's columns in the order of the new schema's


def _schema_problem(path: Path, row: tuple | None) -> str | None:
    """Why a file whose meta table gave `row` for schema_version (None: no such row or
    table) is not a store this nsprof may open; None when it is."""
    if row is None or not (str(row[0]).isascii() and str(row[0]).isdigit()):  # int() takes '²' too
        return f"{path} is an SQLite file but not an nsprof results store; move it away or pass another store path"
    version = int(row[0])
    if version > SCHEMA_VERSION:
        return (
            f"results store {path} has schema version {version}, written by a newer "
            f"nsprof (this one reads up to {SCHEMA_VERSION}); upgrade nsprof or use another store path"
        )
    if version < 1:
        return f"results store {path} has an invalid schema version {version}"
    return None


def _foreign_objects(db: sqlite3.Connection, path: Path, tables: set[str]) -> str | None:
    """Why a store holding what nsprof never makes (a view, a trigger, or one of its tables missing, a view
    in its place, say) is not opened: a view's query may never end, a trigger acts on every row written."""
    made = db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger')").fetchone()
    missing = sorted({"runs", "measurements"} - tables)
    if made is None and not missing:
        return None
    what = f"a {made[0]} {made[1]}" if made is not None else f"no table {missing[0]}"
    return f"results store {path} holds {what}, which nsprof never makes: it was edited by hand; move it away"


def _columns(db: sqlite3.Connection) -> set[str]:
    return {row[1] for row in db.execute("PRAGMA table_info(measurements)")}


def _add_shape_columns(db: sqlite3.Connection) -> None:
    """A store from before shapes gets their columns (every old row: no shape). Additive, so
    the schema version stays and an older nsprof still reads and writes the store."""
    if {"shape_json", "shape"} <= _columns(db):
        return
    with transaction(db):
        have = _columns(db)  # another process may have added them meanwhile
        if "shape_json" not in have:
            db.execute("ALTER TABLE measurements ADD COLUMN shape_json TEXT NOT NULL DEFAULT ''")
        if "shape" not in have:
            db.execute("ALTER TABLE measurements ADD COLUMN shape INTEGER")


def _add_pid_column(db: sqlite3.Connection) -> None:
    """A store from before pids gets the column (every old row: no pid). Additive, as shapes were:
    an older nsprof of this schema version still reads and writes the store, its rows without a pid."""
    if "pid" in _columns(db):
        return
    with transaction(db):
        if "pid" not in _columns(db):  # another process may have added it meanwhile
            db.execute("ALTER TABLE measurements ADD COLUMN pid INTEGER")


def _migrate_to_kinds(db: sqlite3.Connection) -> None:
    """Version 1 -> 2: the failure columns, and each old failure's kind (and a timeout's bound)
    derived once from its reason (kind_from_words), in one transaction with the version's bump."""
    with transaction(db):
        (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if int(version) >= SCHEMA_VERSION:
            return  # another process migrated it meanwhile
        have = _columns(db)
        if "failure_kind" not in have:
            db.execute("ALTER TABLE measurements ADD COLUMN failure_kind TEXT")
        if "timeout_s" not in have:
            db.execute("ALTER TABLE measurements ADD COLUMN timeout_s REAL")
        reasons = [
            row[0] for row in db.execute("SELECT DISTINCT error FROM measurements WHERE error IS NOT NULL")
        ]
        db.executemany(
            "UPDATE measurements SET failure_kind = ?, timeout_s = ? WHERE error = ?",
            [(*kind_from_words(reason), reason) for reason in reasons],
        )
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
