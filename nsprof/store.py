"""The results store: every measurement nsprof takes, in one SQLite file, for resuming and comparing.

    with ResultStore() as store:                       # .nsprof/results.sqlite
        run_id = store.start_run(target=target, fingerprint=fp, gpu=gpu, backend="ncu", ...)
        for config_id in store.missing(group, list(range(len(space.configs)))):
            frame = ...measure config_id...
            store.add(run_id, MeasurementKey(**group, config_id=config_id,
                                             config_json=config_json(space.configs[config_id])), frame)
        store.finish_run(run_id, "ok")

A `MeasurementKey` names what a number depends on (target source, config, GPU, tool and its
settings, and for a target with shapes the shape: its JSON in `shape_json`, its index in
`shape`); `missing()` answers "which configs still need measuring under this key" (for one
shape: `shape_json=`). Stores written before shapes are read as they are: their rows have
shape_json "" (no shape), the columns being added when such a store is opened. A failure row keeps
its kind (nsprof.schema.FAILURE_KINDS) and a timeout's bound beside its reason; a store from before
kinds (schema version 1) gets them when it is opened, derived once from the reasons' words
(_migrate_to_kinds), and nowhere else are those words read.
Each `add` is one transaction, so a crash, SIGKILL or Ctrl-C leaves whole configs or none.
Only plain SQL values are stored (text, integers, reals); settings are JSON text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import numbers
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nsprof.errors import StoreError
from nsprof.schema import FAILURE_KINDS, Failure

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
MEASUREMENT_COLUMNS = ("run_id", *KEY_FIELDS, *ROW_FIELDS, *SHAPE_FIELDS, *FAILURE_FIELDS)
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
# What start_run(**labels) accepts; the rest of a run's columns nsprof fills in itself.
RUN_LABELS = (
    "target",
    "fingerprint",
    "gpu",
    "gpu_uuid",
    "backend",
    "mode",
    "clock_control",
    "cache_control",
    "tool_version",
    "settings",
)

_INT_FIELDS = {"config_id", "rep", "graph_node", "shape"}
_FLOAT_FIELDS = {"duration_ns", "cycles", "clock_hz", "timeout_s"}

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


def config_json(config: Any) -> str:
    """The canonical JSON text of one config (sorted keys), for MeasurementKey.config_json."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)


@dataclasses.dataclass(frozen=True)
class MeasurementKey:
    """Everything one config's numbers depend on. Unknown or not-applicable parts are "" (not None)
    so that keys compare equal in SQL."""

    fingerprint: str  # nsprof.space.target_fingerprint(target)
    config_id: int
    config_json: str  # config_json(space.configs[config_id])
    gpu: str
    backend: str  # ncu | nsys | event | cupti | graph | ...
    mode: str  # direct | graph
    clock_control: str
    cache_control: str
    tool_version: str
    # The problem shape (a target with shapes): nsprof.space.shape_json of it, and its index in the
    # target's shapes; "" and None for a target without shapes.
    shape_json: str = ""
    shape: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.config_id, numbers.Integral) or isinstance(self.config_id, bool):
            raise TypeError(f"config_id must be an int, not {self.config_id!r}")
        object.__setattr__(self, "config_id", int(self.config_id))  # numpy ints bind badly in sqlite3
        for name in (*KEY_FIELDS, "shape_json"):
            if name != "config_id" and not isinstance(getattr(self, name), str):
                raise TypeError(f"MeasurementKey.{name} must be a str, not {getattr(self, name)!r}")
        if self.shape is not None:
            if not isinstance(self.shape, numbers.Integral) or isinstance(self.shape, bool):
                raise TypeError(f"shape must be an int or None, not {self.shape!r}")
            object.__setattr__(self, "shape", int(self.shape))
        if (self.shape is None) != (self.shape_json == ""):
            raise ValueError("a MeasurementKey has both shape and shape_json, or neither")

    def without_config(self) -> dict[str, str]:
        """The key of the whole space (what missing() takes)."""
        return {name: getattr(self, name) for name in GROUP_FIELDS}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class ResultStore:
    """One SQLite results file, safe to write from several processes at once (WAL, busy timeout)."""

    def __init__(self, path: str | Path | None = None, *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path) if path is not None else Path.cwd() / DEFAULT_PATH
        self.busy_timeout_s = busy_timeout_s
        # One connection shared by threads (progress callbacks may write); the lock keeps each
        # transaction whole.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the folder of results store {self.path}: {_one_line(exc)}"
            ) from None
        self._refuse_foreign()
        try:
            # isolation_level=None: no implicit transactions; add() opens and closes its own.
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            self._enable_wal()
            # NORMAL: no fsync per commit; a WAL file stays consistent, only power loss can lose
            # the last commits
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._check_schema()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"cannot open results store {self.path}: {_one_line(exc)}") from None
        except BaseException:
            self.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _refuse_foreign(self) -> None:
        """Refuse another program's SQLite file, or a newer nsprof's store, before anything
        writes to it: opening read-write switches a file to WAL (its header changes on disk)
        and may leave -wal and -shm files beside it. So an existing file is read first through
        a read-only connection; a new or empty file, or one with no table yet, is nsprof's to
        make. What the read-only look cannot settle (a file that is no database, a locked one)
        is left to the normal open, whose errors say why."""
        try:
            if self.path.stat().st_size == 0:
                return
        except OSError:
            return  # missing: created below
        try:
            conn = sqlite3.connect(
                self.path.resolve().as_uri() + "?mode=ro", uri=True, timeout=self.busy_timeout_s
            )
        except sqlite3.Error:
            return
        try:
            try:
                tables = {
                    row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
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
        finally:
            conn.close()
        problem = self._schema_problem(row)
        if problem:
            raise StoreError(problem)

    def _enable_wal(self) -> None:
        """WAL: readers never block the writer, and a killed writer leaves only uncommitted frames behind.

        Switching a new file to WAL needs an exclusive lock that SQLite does not wait for (no busy
        handler), so processes opening a new store together retry here until the busy timeout.
        """
        deadline = time.monotonic() + self.busy_timeout_s
        delay_s = 0.001
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    raise
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.05)

    def _tables(self) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _check_schema(self) -> None:
        tables = self._tables()
        if not tables:
            # IMMEDIATE: two processes creating the same new store take turns; the second sees tables.
            with self._transaction():
                if not self._tables():
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            tables = self._tables()
        row = None
        if "meta" in tables:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        problem = self._schema_problem(row)
        if problem:
            raise StoreError(problem)
        self._add_shape_columns()
        if int(row[0]) < SCHEMA_VERSION:
            self._migrate_to_kinds()

    def _schema_problem(self, row: tuple | None) -> str | None:
        """Why a file whose meta table gave `row` for schema_version (None: no such row or
        table) is not a store this nsprof may open; None when it is."""
        if row is None or not str(row[0]).isdigit():
            return (
                f"{self.path} is an SQLite file but not an nsprof results store; "
                "move it away or pass another store path"
            )
        version = int(row[0])
        if version > SCHEMA_VERSION:
            return (
                f"results store {self.path} has schema version {version}, written by a newer "
                f"nsprof (this one reads up to {SCHEMA_VERSION}); upgrade nsprof or use another store path"
            )
        if version < 1:
            return f"results store {self.path} has an invalid schema version {version}"
        return None

    def _add_shape_columns(self) -> None:
        """A store from before shapes gets their columns (every old row: no shape). Additive, so
        the schema version stays and an older nsprof still reads and writes the store."""

        def columns() -> set[str]:
            return {row[1] for row in self._db.execute("PRAGMA table_info(measurements)")}

        if {"shape_json", "shape"} <= columns():
            return
        with self._transaction():
            have = columns()  # another process may have added them meanwhile
            if "shape_json" not in have:
                self._db.execute("ALTER TABLE measurements ADD COLUMN shape_json TEXT NOT NULL DEFAULT ''")
            if "shape" not in have:
                self._db.execute("ALTER TABLE measurements ADD COLUMN shape INTEGER")

    def _migrate_to_kinds(self) -> None:
        """Version 1 -> 2: the failure columns, and each old failure's kind (and a timeout's bound)
        derived once from its reason (kind_from_words), in one transaction with the version's bump."""
        with self._transaction() as db:
            (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if int(version) >= SCHEMA_VERSION:
                return  # another process migrated it meanwhile
            have = {row[1] for row in db.execute("PRAGMA table_info(measurements)")}
            if "failure_kind" not in have:
                db.execute("ALTER TABLE measurements ADD COLUMN failure_kind TEXT")
            if "timeout_s" not in have:
                db.execute("ALTER TABLE measurements ADD COLUMN timeout_s REAL")
            reasons = [
                row[0]
                for row in db.execute("SELECT DISTINCT error FROM measurements WHERE error IS NOT NULL")
            ]
            db.executemany(
                "UPDATE measurements SET failure_kind = ?, timeout_s = ? WHERE error = ?",
                [(*kind_from_words(reason), reason) for reason in reasons],
            )
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"results store {self.path} is closed")
        return self._conn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._db
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

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """SQLite's failures (locked past the timeout, disk full, read-only, corrupt pages) as one line."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise  # a bug in nsprof, not a problem of the file
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            hint = (
                f" (another process held it for over {self.busy_timeout_s:g} s)"
                if "locked" in text or "busy" in text
                else ""
            )
            raise StoreError(f"results store {self.path}: {what} failed: {_one_line(exc)}{hint}") from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResultStore({str(self.path)!r})"

    # -- runs ------------------------------------------------------------------------------

    def start_run(self, **labels: Any) -> int:
        """Record one nsprof invocation; returns its id. Labels: target, fingerprint, gpu, gpu_uuid,
        backend, mode, clock_control, cache_control, tool_version, settings (a dict or dataclass,
        stored as JSON)."""
        unknown = sorted(set(labels) - set(RUN_LABELS))
        if unknown:
            raise ValueError(f"unknown run labels {unknown}; known: {', '.join(RUN_LABELS)}")
        settings = labels.pop("settings", None)
        if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
            settings = dataclasses.asdict(settings)
        from nsprof import __version__

        values = {
            "started_at": _now(),
            **{name: None if value is None else str(value) for name, value in labels.items()},
            "nsprof_version": __version__,
            "settings_json": None if settings is None else json.dumps(settings, sort_keys=True, default=str),
            "status": "running",
        }
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self._lock, self._errors("starting a run"), self._transaction() as db:
            cursor = db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", tuple(values.values()))
            return int(cursor.lastrowid)

    def finish_run(self, run_id: int, status: str = "ok") -> None:
        """Mark a run finished (status: ok, failed, interrupted, ... free text)."""
        with self._lock, self._errors(f"finishing run {run_id}"), self._transaction() as db:
            cursor = db.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?", (_now(), str(status), int(run_id))
            )
            if cursor.rowcount != 1:
                raise ValueError(f"results store {self.path} has no run {run_id}")

    def relabel_gpu(self, run_id: int, gpu: str, gpu_uuid: str) -> None:
        """Key a run's rows by the GPU its worker says it measured on (one transaction)."""
        with self._lock, self._errors(f"relabelling run {run_id}"), self._transaction() as db:
            db.execute("UPDATE measurements SET gpu = ? WHERE run_id = ?", (gpu, int(run_id)))
            db.execute("UPDATE runs SET gpu = ?, gpu_uuid = ? WHERE id = ?", (gpu, gpu_uuid, int(run_id)))

    # -- measurements ----------------------------------------------------------------------

    def add(self, run_id: int, key: MeasurementKey, frame_or_rows: Any) -> int:
        """Write one config's rows (a tidy DataFrame or an iterable of row dicts) in one transaction;
        returns how many. Rows keep kernel, rep, duration_ns, cycles, clock_hz, graph_node, error and a
        failure's failure_kind (nsprof.schema.FAILURE_KINDS, or the kind of an error that is an
        nsprof.schema.Failure) and timeout_s; a row's config_id, mode, clock_control and cache_control,
        where set, must agree with `key`."""
        if not isinstance(key, MeasurementKey):
            raise TypeError(f"key must be a MeasurementKey, not {type(key).__name__}")
        key_values = tuple(getattr(key, name) for name in KEY_FIELDS)
        shape_values = tuple(getattr(key, name) for name in SHAPE_FIELDS)
        columns = ", ".join(MEASUREMENT_COLUMNS)
        marks = ", ".join("?" for _ in MEASUREMENT_COLUMNS)
        written = 0

        def values() -> Iterator[tuple]:
            nonlocal written
            for row in _records(frame_or_rows):
                written += 1
                values = _row_values(row, key)
                yield (
                    int(run_id),
                    *key_values,
                    *values[: len(ROW_FIELDS)],
                    *shape_values,
                    *values[len(ROW_FIELDS) :],
                )

        with self._lock, self._errors(f"writing config {key.config_id}"), self._transaction() as db:
            try:
                db.executemany(f"INSERT INTO measurements ({columns}) VALUES ({marks})", values())
            except sqlite3.IntegrityError as exc:
                if "FOREIGN KEY" in str(exc):
                    raise ValueError(f"results store {self.path} has no run {run_id}") from None
                raise
            if written == 0:
                raise ValueError(
                    f"no rows for config {key.config_id}: a failed config is a row with error set"
                )
        return written

    def missing(
        self,
        key_without_config: Mapping[str, str],
        config_ids: Iterable[int],
        *,
        config_jsons: Mapping[int, str] | None = None,
        retry_failed: bool = False,
        retry_if: Callable[[Failure], bool] | None = None,
        shape_json: str = "",
    ) -> list[int]:
        """The config_ids (in the order given) with nothing stored yet under this key, at the shape
        `shape_json` (nsprof.space.shape_json; "" for a target without shapes).

        config_jsons ({config_id: config_json(config)}): a config counts only where its stored rows
        were taken of the same config (an id names another config once the space is edited).
        Each config is judged by its latest run. A config whose rows there are all failures counts
        as done, unless retry_failed, or retry_if(failure) is true for one of them (an
        nsprof.schema.Failure: its reason, kind and bound; nsprof.tune.retryable tests the kind).
        Rows of runs that crashed count too: each config's rows were committed whole.
        """
        where, params = self._group_where(key_without_config)
        where, params = f"{where} AND shape_json = ?", (*params, str(shape_json))
        with self._lock, self._errors("reading"):
            rows = self._db.execute(
                f"SELECT config_id, config_json, run_id, error, failure_kind, timeout_s FROM measurements "
                f"WHERE {where}",
                params,
            ).fetchall()
        latest: dict[int, int] = {}
        errors: dict[tuple[int, int], list[Failure | None]] = {}
        for config_id, config_text, run_id, error, kind, bound in rows:
            if config_jsons is not None and config_jsons.get(config_id) != config_text:
                continue
            latest[config_id] = max(run_id, latest.get(config_id, run_id))
            # (a kind the store lacks, written past nsprof: the config's own failure, as Failure.of takes it)
            failure = (
                None if error is None else Failure(error, kind if kind in FAILURE_KINDS else "crash", bound)
            )
            errors.setdefault((config_id, run_id), []).append(failure)

        def done(config_id: int) -> bool:
            if config_id not in latest:
                return False
            reasons = errors[(config_id, latest[config_id])]
            if any(reason is None for reason in reasons):
                return True  # measured
            return not (retry_failed or (retry_if is not None and any(retry_if(r) for r in reasons)))

        return [int(c) for c in config_ids if not done(int(c))]

    def _group_where(self, key_without_config: Mapping[str, str]) -> tuple[str, tuple]:
        # Exactly the group fields: leaving one out (say tool_version) would silently resume from
        # numbers taken under other conditions.
        given = set(key_without_config)
        if given != set(GROUP_FIELDS):
            problems = []
            if set(GROUP_FIELDS) - given:
                problems.append(f"lacks {sorted(set(GROUP_FIELDS) - given)}")
            if given - set(GROUP_FIELDS):
                problems.append(f"has unexpected {sorted(given - set(GROUP_FIELDS))}")
            raise ValueError(
                f"the key without config {' and '.join(problems)} (it needs exactly "
                f"{', '.join(GROUP_FIELDS)}; MeasurementKey.without_config() gives it)"
            )
        where = " AND ".join(f"{name} = ?" for name in GROUP_FIELDS)
        return where, tuple(str(key_without_config[name]) for name in GROUP_FIELDS)

    # -- reading ---------------------------------------------------------------------------

    def frame(self, **filters: Any):
        """Stored rows as a DataFrame: run_id, the key columns, then the tidy columns (schema dtypes).

        Each filter is a column = value; a list/tuple/set means any of them, None means NULL:
        `store.frame(backend="ncu", config_id=[0, 3], error=None)`.
        """
        where, params = _filter_sql(filters, MEASUREMENT_COLUMNS)
        query = f"SELECT {', '.join(MEASUREMENT_COLUMNS)} FROM measurements{where} ORDER BY id"
        return self._read(query, params, MEASUREMENT_COLUMNS, _measurement_dtypes())

    def runs(self):
        """Every run, oldest first, as a DataFrame (settings_json stays JSON text)."""
        query = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY id"
        dtypes = {name: "string[python]" for name in RUN_COLUMNS}
        dtypes["id"] = "Int64"
        return self._read(query, (), RUN_COLUMNS, dtypes)

    def _read(self, query: str, params: tuple, columns: tuple[str, ...], dtypes: dict[str, str]):
        import pandas as pd

        with self._lock, self._errors("reading"):
            records = self._db.execute(query, params).fetchall()
        # Column by column from the Python values: going through a float64 frame first would round
        # integers above 2**53 (and then refuse to cast them to Int64).
        values = list(zip(*records)) if records else [()] * len(columns)
        return pd.DataFrame(
            {name: pd.Series(list(column), dtype=dtypes[name]) for name, column in zip(columns, values)}
        )

    def export(self, path: str | Path, **filters: Any) -> int:
        """Write frame(**filters) to .csv, .json (an array of records) or .parquet; returns the row count."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".csv", ".json", ".parquet"):
            raise StoreError(f"cannot export to {path}: the name must end in .csv, .json or .parquet")
        if suffix == ".parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise StoreError("exporting .parquet needs pyarrow: pip install 'nsprof[parquet]'") from None
        frame = self.frame(**filters)
        if suffix == ".csv":
            frame.to_csv(path, index=False)
        elif suffix == ".json":
            frame.to_json(path, orient="records", force_ascii=False)
        else:
            frame.to_parquet(path, index=False)
        return len(frame)


def _records(frame_or_rows: Any) -> Iterator[Mapping[str, Any]]:
    """Rows of a DataFrame or an iterable of mappings, lazily (the caller may stream them)."""
    if hasattr(frame_or_rows, "to_dict") and hasattr(frame_or_rows, "columns"):
        wanted = [
            c
            for c in (
                "config_id",
                "shape",
                "mode",
                "clock_control",
                "cache_control",
                *ROW_FIELDS,
                *FAILURE_FIELDS,
            )
            if c in frame_or_rows.columns
        ]
        yield from frame_or_rows[wanted].to_dict("records")
        return
    if isinstance(frame_or_rows, Mapping):
        raise TypeError("add() takes a DataFrame or an iterable of row dicts, not a single dict")
    for row in frame_or_rows:
        if not isinstance(row, Mapping):
            raise TypeError(f"each row must be a dict, not {type(row).__name__}")
        yield row


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, numbers.Real):
        return bool(value != value)  # NaN, of any float type
    # pd.NA and NaT can only come from an imported pandas; plain rows need not import it
    pandas = sys.modules.get("pandas")
    return pandas is not None and pandas.api.types.is_scalar(value) and bool(pandas.isna(value))


def _row_values(row: Mapping[str, Any], key: MeasurementKey) -> tuple:
    for name in ("config_id", "mode", "clock_control", "cache_control"):
        value = row.get(name)
        if _missing(value):
            continue
        expected = getattr(key, name)
        same = int(value) == expected if name == "config_id" else str(value) == expected
        if not same:
            raise ValueError(
                f"a row has {name}={value!r} but the key says {expected!r}; "
                "add() takes the rows of one key (split the frame first)"
            )
    shape = row.get("shape")
    if (None if _missing(shape) else int(shape)) != key.shape:
        raise ValueError(
            f"a row has shape={None if _missing(shape) else int(shape)!r} but the key says "
            f"{key.shape!r}; add() takes the rows of one (shape, config) (split the frame first)"
        )
    values: list[Any] = []
    for name in ROW_FIELDS:
        value = row.get(name)
        if _missing(value):
            values.append(None)
        elif name in _INT_FIELDS:
            values.append(int(value))
        elif name in _FLOAT_FIELDS:
            values.append(float(value))
        else:
            values.append(str(value))
    duration, error = values[ROW_FIELDS.index("duration_ns")], values[ROW_FIELDS.index("error")]
    if (duration is None) == (error is None):
        raise ValueError(
            f"config {key.config_id}: each row needs a duration_ns or an error, not both "
            f"or neither (got duration_ns={duration!r}, error={error!r})"
        )
    kind, bound = row.get("failure_kind"), row.get("timeout_s")
    if _missing(kind) and isinstance(row.get("error"), Failure):
        kind, bound = row["error"].kind, row["error"].timeout_s
    kind, bound = None if _missing(kind) else str(kind), None if _missing(bound) else float(bound)
    if error is None and (kind is not None or bound is not None):
        raise ValueError(
            f"config {key.config_id}: a measurement has no failure_kind or timeout_s "
            f"(got {kind!r}, {bound!r})"
        )
    if error is not None and kind not in FAILURE_KINDS:
        raise ValueError(
            f"config {key.config_id}: a failure row needs its failure_kind, one of "
            f"{', '.join(FAILURE_KINDS)} (got {kind!r} for {error!r})"
        )
    return (*values, kind, bound)


def _filter_sql(filters: Mapping[str, Any], columns: tuple[str, ...]) -> tuple[str, tuple]:
    unknown = sorted(set(filters) - set(columns))
    if unknown:
        raise ValueError(f"cannot filter on {unknown}; columns: {', '.join(columns)}")
    clauses: list[str] = []
    params: list[Any] = []
    for name, value in filters.items():
        if value is None:
            clauses.append(f"{name} IS NULL")
        elif isinstance(value, (list, tuple, set, frozenset)):
            values = [_sql_value(v) for v in value]
            clauses.append(f"{name} IN ({', '.join('?' for _ in values)})" if values else "0")
            params.extend(values)
        else:
            clauses.append(f"{name} = ?")
            params.append(_sql_value(value))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _sql_value(value: Any) -> Any:
    # numpy scalars do not bind in sqlite3
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _measurement_dtypes() -> dict[str, str]:
    from nsprof.schema import COLUMN_DTYPES

    dtypes = {name: COLUMN_DTYPES.get(name, "string[python]") for name in MEASUREMENT_COLUMNS}
    dtypes["run_id"] = "Int64"
    return dtypes
