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
(nsprof.store_schema), and nowhere else are those words read. A row keeps the pid of the worker
that measured it (nsprof.adaptive.process_counts: runs served by one worker are one process); a store
from before pids gains the column on opening, its rows without one.
Each `add` is one transaction, so a crash, SIGKILL or Ctrl-C leaves whole configs or none.
Only plain SQL values are stored (text, integers, reals); settings are JSON text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nsprof.errors import JSON_ESCAPES, StoreError
from nsprof.host.owned import check_own_file, own_folder
from nsprof.schema import FAILURE_KINDS, Failure
from nsprof.store_rescue import file_identity, rescue
from nsprof.store_rows import (
    FLOAT_FIELDS,
    MeasurementKey,
    config_json,
    filter_sql,
    group_where,
    measurement_dtypes,
    records,
    row_values,
)
from nsprof.store_schema import (
    DEFAULT_PATH,
    GROUP_FIELDS,
    KEY_FIELDS,
    MEASUREMENT_COLUMNS,
    ROW_FIELDS,
    RUN_COLUMNS,
    RUN_LABELS,
    SCHEMA_VERSION,
    SHAPE_FIELDS,
    check_schema,
    enable_wal,
    one_line,
    refuse_foreign,
    transaction,
)

# What callers import from here, though it lives in store_rows and store_schema.
__all__ = [
    "DEFAULT_PATH",
    "GROUP_FIELDS",
    "KEY_FIELDS",
    "MEASUREMENT_COLUMNS",
    "SCHEMA_VERSION",
    "MeasurementKey",
    "ResultStore",
    "StoreError",
    "config_json",
]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class ResultStore:
    """One SQLite results file, safe to write from several processes at once (WAL, busy timeout)."""

    def __init__(self, path: str | Path | None = None, *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path) if path is not None else Path.cwd() / DEFAULT_PATH
        self.busy_timeout_s = busy_timeout_s
        # One connection shared by threads (progress callbacks may write); the lock keeps each
        # transaction whole.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # the file opened (_still_at_its_path)
        # The file the path leads to (through a link: the one it names), where the store stays
        self.real_path = Path(os.path.realpath(self.path))
        self.run_ids: set[int] = set()  # the runs started here (nsprof.store_rescue adds them to a store)
        self.renumbered: dict[int, int] = {}  # a run's id as start_run gave it -> its id in the file now
        # this user's own, as the file (SQLite writes its -wal and -shm files beside the one it opens)
        for folder in dict.fromkeys((self.path.parent, self.real_path.parent)):
            own_folder(folder, "the folder of results store")
        check_own_file(self.path, "results store")
        refuse_foreign(self.path, busy_timeout_s)
        self._open()

    def _open(self) -> None:
        try:
            # isolation_level=None: no implicit transactions; add() opens and closes its own.
            self._conn = sqlite3.connect(
                self.real_path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            enable_wal(self._conn, self.busy_timeout_s)
            # NORMAL: no fsync per commit; a WAL file stays consistent, only power loss can lose
            # the last commits
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            check_schema(self._conn, self.path)
            self._file = file_identity(self.real_path)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"cannot open results store {self.path}: {one_line(exc)}") from None
        except BaseException:
            self.close()
            raise

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"results store {self.path} is closed")
        return self._conn

    connection = _db

    def reopen(self) -> None:
        """Go on in the file now at the store's real path (nsprof.store_rescue)."""
        self.close()
        self._open()

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return transaction(self._db)

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
            raise StoreError(f"results store {self.path}: {what} failed: {one_line(exc)}{hint}") from None

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
            self.run_ids.add(int(cursor.lastrowid))
            return int(cursor.lastrowid)

    def finish_run(self, run_id: int, status: str = "ok") -> None:
        """Mark a run finished (status: ok, failed, interrupted, ... free text); then, should the store's
        file have gone meanwhile, rescue what was written (nsprof.store_rescue)."""
        run_id = self.renumbered.get(int(run_id), int(run_id))
        with self._lock, self._errors(f"finishing run {run_id}"), self._transaction() as db:
            cursor = db.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?", (_now(), str(status), int(run_id))
            )
            if cursor.rowcount != 1:
                raise ValueError(f"results store {self.path} has no run {run_id}")
        self._still_at_its_path()

    def _still_at_its_path(self) -> None:
        now = file_identity(self.real_path)
        if now != self._file:
            with self._lock:
                rescue(self, now)

    def relabel_gpu(self, run_id: int, gpu: str, gpu_uuid: str) -> None:
        """Key a run's rows by the GPU its worker says it measured on (one transaction)."""
        run_id = self.renumbered.get(int(run_id), int(run_id))
        with self._lock, self._errors(f"relabelling run {run_id}"), self._transaction() as db:
            db.execute("UPDATE measurements SET gpu = ? WHERE run_id = ?", (gpu, int(run_id)))
            db.execute("UPDATE runs SET gpu = ?, gpu_uuid = ? WHERE id = ?", (gpu, gpu_uuid, int(run_id)))

    # -- measurements ----------------------------------------------------------------------

    def add(self, run_id: int, key: MeasurementKey, frame_or_rows: Any) -> int:
        """Write one config's rows (a tidy DataFrame or an iterable of row dicts) in one transaction;
        returns how many. Rows keep kernel, rep, duration_ns, cycles, clock_hz, graph_node, error, a
        failure's failure_kind (nsprof.schema.FAILURE_KINDS, or the kind of an error that is an
        nsprof.schema.Failure) and timeout_s, and pid (the worker's); a row's config_id, mode,
        clock_control and cache_control, where set, must agree with `key`."""
        if not isinstance(key, MeasurementKey):
            raise TypeError(f"key must be a MeasurementKey, not {type(key).__name__}")
        run_id = self.renumbered.get(int(run_id), int(run_id))
        key_values = tuple(getattr(key, name) for name in KEY_FIELDS)
        shape_values = tuple(getattr(key, name) for name in SHAPE_FIELDS)
        columns = ", ".join(MEASUREMENT_COLUMNS)
        marks = ", ".join("?" for _ in MEASUREMENT_COLUMNS)
        written = 0

        def values() -> Iterator[tuple]:
            nonlocal written
            for row in records(frame_or_rows):
                written += 1
                values = row_values(row, key)
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
        adding_runs: Collection[int] = (),
    ) -> list[int]:
        """The config_ids (in the order given) with nothing stored yet under this key, at the shape
        `shape_json` (nsprof.space.shape_json; "" for a target without shapes).

        config_jsons ({config_id: config_json(config)}): a config counts only where its stored rows
        were taken of the same config (an id names another config once the space is edited).
        Each config is judged by its latest run but `adding_runs` (sessions that add reps to an earlier
        run, tune's adaptive sessions: what they lost leaves that run's rows standing). A config whose
        rows there are all failures counts
        as done, unless retry_failed, or retry_if(failure) is true for one of them (an
        nsprof.schema.Failure: its reason, kind and bound; nsprof.tune.retryable tests the kind).
        Rows of runs that crashed count too: each config's rows were committed whole.
        """
        where, params = group_where(key_without_config)
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
            if (
                config_jsons is not None
                and config_jsons.get(config_id) != config_text
                or run_id in adding_runs
            ):
                continue
            latest[config_id] = max(run_id, latest.get(config_id, run_id))
            # (a kind the store lacks, written past nsprof: the config's own failure, as Failure.of takes it)
            failure = (
                None
                if error is None
                else Failure(error, kind if kind in FAILURE_KINDS else "crash", self._bound(bound))
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

    def _bound(self, value) -> float | None:
        """A failure's timeout_s as stored; one that is no finite number (edited by hand): StoreError."""
        try:
            bound = None if value is None else float(value)
        except (TypeError, ValueError):
            bound = math.inf
        if bound is not None and not math.isfinite(bound):
            raise self.edited(f"{value!r} in column timeout_s, which holds finite numbers")
        return bound

    # -- reading ---------------------------------------------------------------------------

    def frame(self, **filters: Any):
        """Stored rows as a DataFrame: run_id, the key columns, then the tidy columns (schema dtypes).

        Each filter is a column = value; a list/tuple/set means any of them, None means NULL:
        `store.frame(backend="ncu", config_id=[0, 3], error=None)`.
        """
        where, params = filter_sql(filters, MEASUREMENT_COLUMNS)
        query = f"SELECT {', '.join(MEASUREMENT_COLUMNS)} FROM measurements{where} ORDER BY id"
        return self._read(query, params, MEASUREMENT_COLUMNS, measurement_dtypes())

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
            {name: self._column(name, column, dtypes[name]) for name, column in zip(columns, values)}
        )

    def edited(self, what: str) -> StoreError:
        """The one line for a store that holds `what`, which nsprof never writes."""
        return StoreError(
            f"the results store {self.path} holds {what}: it was damaged or edited by hand "
            "(export what it holds with sqlite3)"
        )

    def _column(self, name: str, values: tuple, dtype: str):
        """One column as its dtype; a value that cannot be one (a store edited by hand): StoreError, one line."""
        import pandas as pd

        def shown(value) -> str:
            return repr(value) if len(repr(value)) <= 60 else repr(value)[:59] + "…"

        def as_dtype(some: list):
            with warnings.catch_warnings():  # numpy's cast warning comes before pandas' refusal of the value
                warnings.simplefilter("ignore", RuntimeWarning)
                return pd.Series(some, dtype=dtype)

        try:
            column = as_dtype(list(values))
        except (TypeError, ValueError):
            for value in values:
                try:
                    as_dtype([value])
                except (TypeError, ValueError):
                    raise self.edited(
                        f"{shown(value)} in column {name}, which holds {dtype} values"
                    ) from None
            raise
        if name in FLOAT_FIELDS:  # a time, a count, a clock or a timeout: an infinite one would be ranked
            for value, number in zip(values, column):
                if math.isinf(number):  # the value as read: SQLite may hold it as text ('inf')
                    raise self.edited(f"{shown(value)} in column {name}, which holds finite numbers")
        return column

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
        from nsprof.host.owned import written_over

        frame = self.frame(**filters)
        with written_over(path) as out:
            if suffix == ".csv":
                frame.to_csv(out, index=False)
            elif suffix == ".json":  # as json_text writes it: what a terminal acts on, escaped
                out.write(frame.to_json(orient="records", force_ascii=False).translate(JSON_ESCAPES).encode())
            else:
                frame.to_parquet(out, index=False)
        return len(frame)
