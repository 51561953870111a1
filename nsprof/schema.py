"""The one tidy table: one row per observed kernel execution (or whole-graph workload).

Every parser returns a pandas DataFrame with exactly COLUMNS, in this order, with these
dtypes. Everything downstream (analyze, profile, validate, tune) consumes it.

Also here: what names a measurement (range names, RangeName, Points), and what a failed config
is (FAILURE_KINDS, Failure, failure_frame: the one builder of failure rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import NoneType
from typing import NamedTuple

# name -> pandas dtype. Nullable dtypes so that "not known" stays distinct from zero.
COLUMN_DTYPES: dict[str, str] = {
    "source": "string[python]",  # ncu | nsys | event | cupti | graph
    "range": "string[python]",  # innermost NVTX range name holding the launch, or <NA>
    "domain": "string[python]",  # NVTX domain of `range` ("<default domain>" for the default one)
    "config_id": "Int64",  # from nsprof's own range names (cfg<id>[.s<shape>].<mode>.r<rep>), else <NA>
    "mode": "string[python]",  # direct | graph | <NA> when the report cannot tell
    "rep": "Int64",
    "kernel": "string[python]",  # short function name, for display; "graph" for a graph workload
    # The full (demangled) name where the report has it: what tells kernels apart, e.g. the
    # many torch kernels called vectorized_elementwise_kernel. Rows group by it (by `kernel`
    # where it is <NA>). Tools demangle differently: ncu's and nsys's full names of one kernel
    # need not be equal.
    "kernel_full": "string[python]",
    "duration_ns": "float64",
    "cycles": "float64",  # ncu gpc__cycles_elapsed.max
    "clock_hz": "float64",  # ncu gpc__cycles_elapsed.avg.per_second
    "graph_node": "Int64",  # nsys graphNodeId: the kernel ran as a node of a CUDA graph
    "workload": "string[python]",  # kernel | graph (ncu --graph-profiling graph)
    "clock_control": "string[python]",  # ncu --clock-control (base | none), "none" for nsys
    "cache_control": "string[python]",  # ncu --cache-control (all | none), "none" for nsys
    "start_ns": "Int64",  # nsys GPU start timestamp; <NA> for ncu
    "launch_id": "Int64",  # ncu result ID / nsys correlationId
    "pid": "Int64",
    "tid": "Int64",  # launching thread (nsys globalTid) or ncu's thread id
    "device": "Int64",
    "stream": "Int64",
    "nvtx_path": "string[python]",  # every open range: "domain@outer/inner;domain2@..."
    "error": "string[python]",  # a failed config is a row too: duration <NA>, the reason here
    # Index of the problem shape in the target's `shapes` (nsprof range names cfg<id>.s<shape>...);
    # <NA> for a target without shapes and for old reports. Last, so that old column positions stay.
    "shape": "Int64",
    # A failed row's kind (FAILURE_KINDS), beside its reason in `error`; <NA> for a measurement. For
    # kind timeout, timeout_s is the bound it ran past (NaN otherwise): what a resume compares with
    # its own --timeout. After `shape`, so that old column positions stay.
    "failure_kind": "string[python]",
    "timeout_s": "float64",
    # ncu lts__t_sector_hit_rate.pct, the kernel's L2 hit rate in percent, where the report has it (the
    # cold-L2 check of `validate --l2-check` collects it); NaN otherwise. Last: old positions stay.
    "l2_hit_pct": "float64",
}
COLUMNS: list[str] = list(COLUMN_DTYPES)

# What ended a config without a measurement, set where the cause is known (the worker, the session,
# the compile step, the cluster); the retry rule of a resume (nsprof.tune.retryable) tests these.
FAILURE_KINDS: dict[str, str] = {
    "timeout": "it ran past --timeout (the bound: timeout_s); measured again under a longer one",
    "crash": "it failed as it ran: it raised, or its worker died under it (illegal address, abort, out of memory)",
    "compile": "it did not compile, or not within its compile timeout",
    "not_run": "it never ran: the worker did not start, the restarts were spent, the compiles stalled before it, its Dask batch failed",
    "lost": "it ran, but what it measured was lost through no fault of its own: a report lost it, or its "
    "worker was killed from outside (SIGKILL, SIGTERM, SIGHUP, SIGINT)",
    "tool": "the profiler or the host could not measure it: counters not permitted, a full disk",
}


class Failure(str):
    """Why one config failed: the reason in one line (the str itself: what every reader prints and
    compares), with its `kind` (FAILURE_KINDS) and, for a timeout, the bound it ran past (`timeout_s`).
    A str (its repr too), so that every map of config -> reason carries the kind without a second map
    beside it, and reads as it did."""

    kind: str
    timeout_s: float | None

    def __new__(cls, reason: str, kind: str, timeout_s: float | None = None) -> Failure:
        if kind not in FAILURE_KINDS:
            raise ValueError(f"failure kind must be one of {', '.join(FAILURE_KINDS)}, not {kind!r}")
        self = super().__new__(cls, reason)
        self.kind = kind
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        return self

    def __reduce__(self):  # pickled whole (Dask sends a batch's failures back)
        return Failure, (str(self), self.kind, self.timeout_s)

    @classmethod
    def of(cls, reason: str) -> Failure:
        """`reason` as a Failure: itself when it is one; a plain str (a reason from outside nsprof's own
        sources, which all set the kind) is a crash: the config's own failure, not retried unasked."""
        return reason if isinstance(reason, Failure) else cls(str(reason), "crash")

    def columns(self) -> dict:
        """The tidy columns of a failed row: error, failure_kind, timeout_s."""
        return {
            "error": str(self),
            "failure_kind": self.kind,
            "timeout_s": float("nan") if self.timeout_s is None else self.timeout_s,
        }


DEFAULT_DOMAIN = "<default domain>"
NSPROF_DOMAIN = "nsprof"
MODES = ("direct", "graph")

# Ids are int64 in the table: a name with a longer number (or a non-ASCII digit) is not
# nsprof's, only a name.
_ID = r"[0-9]{1,18}"
_RANGE_RE = re.compile(
    rf"^cfg(?P<config>{_ID})(?:\.s(?P<shape>{_ID}))?\.(?P<mode>direct|graph)\.r(?P<rep>{_ID})$"
)


class RangeName(NamedTuple):
    """What an nsprof range name says. A tuple whose first three items are what
    parse_range_name always returned (config_id, mode, rep); `shape` is None for names
    without a shape (every report made before shapes, and targets without them)."""

    config_id: int
    mode: str
    rep: int
    shape: int | None = None


def range_name(config_id: int, mode: str, rep: int, shape: int | None = None) -> str:
    """nsprof's range name for one measurement, `cfg<id>.<mode>.r<rep>`, or with the target's
    shape index `cfg<id>.s<shape>.<mode>.r<rep>`; avoids '/', ',' and ':' (ncu filter/CSV syntax)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if shape is None:
        return f"cfg{config_id}.{mode}.r{rep}"
    return f"cfg{config_id}.s{shape}.{mode}.r{rep}"


def parse_range_name(name: str | None) -> RangeName | None:
    """(config_id, mode, rep, shape) for an nsprof range name, else None."""
    if not name:
        return None
    match = _RANGE_RE.match(name)
    if not match:
        return None
    shape = match["shape"]
    return RangeName(
        int(match["config"]), match["mode"], int(match["rep"]), None if shape is None else int(shape)
    )


@dataclass(frozen=True)
class Points:
    """How one session numbers what it measures: a target's configs, at each of its shapes.

    A *point* is one (shape, config) pair; its id is `shape * n_configs + config_id`. A target
    without shapes (n_shapes 0) has one point per config, its id the config id, so every run
    before shapes reads the same. The worker, the session and the results store all split ids
    with this one class, and every row says its own config_id and shape (from its range name):
    a point id never travels in a row.
    """

    n_configs: int
    n_shapes: int = 0  # 0: the target has no shapes

    @property
    def shaped(self) -> bool:
        return self.n_shapes > 0

    def id(self, config_id: int, shape: int | None = None) -> int:
        if not self.shaped:
            if shape is not None:
                raise ValueError("a target without shapes has no shape index")
            return int(config_id)
        if shape is None or not 0 <= shape < self.n_shapes or not 0 <= config_id < self.n_configs:
            raise ValueError(f"no point (shape {shape}, config {config_id}) in {self}")
        return int(shape) * self.n_configs + int(config_id)

    def split(self, point: int) -> tuple[int, int | None]:
        """(config_id, shape) of a point id (shape None without shapes)."""
        if not self.shaped:
            return int(point), None
        shape, config_id = divmod(int(point), self.n_configs)
        if not 0 <= shape < self.n_shapes:
            raise ValueError(f"point {point} is not in {self}")
        return config_id, shape

    def all(self, config_ids=None) -> list[int]:
        """Point ids, shape by shape: `config_ids` (default all) at each shape."""
        configs = range(self.n_configs) if config_ids is None else config_ids
        if not self.shaped:
            return [int(c) for c in configs]
        return [self.id(c, s) for s in range(self.n_shapes) for c in configs]

    def of_frame(self, frame):
        """Each row's point id (<NA> where the row has no config), from its config_id and shape;
        a row whose shape disagrees with the layout (one where there is none, or the reverse)
        gets <NA>, so that it never counts for another point."""
        import pandas as pd

        config = frame["config_id"].astype("Int64")
        if not self.shaped:
            return config.where(frame["shape"].isna())
        shape = frame["shape"].astype("Int64")
        ok = (shape >= 0) & (shape < self.n_shapes) & (config >= 0) & (config < self.n_configs)
        return (shape * self.n_configs + config).where(ok.fillna(False).astype(bool), pd.NA).astype("Int64")

    def rows(self, point: int) -> dict:
        """The tidy columns naming a point: {"config_id", "shape"}."""
        config_id, shape = self.split(point)
        return {"config_id": config_id, "shape": shape}


def _filled(rows: list[dict] | dict[str, list]) -> tuple[dict[str, list], int]:
    """make_frame's columns as lists, and how many rows: config_id/mode/rep/shape filled from
    nsprof range names where the rows do not set them."""
    import pandas as pd

    if isinstance(rows, dict):
        columns = {column: list(values) for column, values in rows.items()}
        lengths = {len(values) for values in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
    else:
        frame = pd.DataFrame(rows)
        n = len(frame)
        columns = {column: frame[column].astype(object).tolist() for column in frame.columns}
    names = columns.get("range")
    if n and names is not None:
        # Parse each distinct range name once; reports repeat names many times.
        parsed = {name: parse_range_name(name) for name in dict.fromkeys(names) if isinstance(name, str)}
        parsed = {name: p for name, p in parsed.items() if p}
        for position, column in enumerate(("config_id", "mode", "rep", "shape")):
            if not parsed:
                break
            from_name = [parsed[name][position] if name in parsed else None for name in names]
            given = columns.get(column)
            columns[column] = (
                from_name
                if given is None
                else [named if _missing(value) else value for value, named in zip(given, from_name)]
            )
    return columns, n


def make_frame(rows: list[dict] | dict[str, list]):
    """Build a tidy DataFrame from row dicts (or columns: equal-length lists), filling what rows lack.

    Fills config_id/mode/rep/shape from nsprof range names where the rows do not set them, and
    casts every column to its dtype. Columns are built as lists and each cast once: a small
    report (a few dozen rows) would otherwise pay more for pandas' work per column than for
    its rows. Integers stay exact (an id of 18 digits is not read through float64).
    """
    import pandas as pd

    columns, n = _filled(rows)
    import numpy as np

    dtypes = _dtypes()
    out = {}
    for column in COLUMNS:
        dtype = COLUMN_DTYPES[column]
        values = columns.get(column)
        if values is None:
            if dtype == "Int64":  # a column the report lacks
                out[column] = pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.bool_))
                continue
            values = [None] * n
        if dtype == "float64":
            if any(isinstance(value, str) for value in values):
                out[column] = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(dtype)
            else:
                out[column] = np.array([float("nan") if _missing(v) else v for v in values], dtype=np.float64)
            continue
        values = [None if v is None or _missing(v) else v for v in values]
        if dtype == "Int64" and all(v is None or type(v) is int for v in values):
            try:  # plain ints: the array built directly (pd.array's checks cost more than a small column)
                out[column] = pd.arrays.IntegerArray(
                    np.array([0 if v is None else v for v in values], dtype=np.int64),
                    np.array([v is None for v in values], dtype=np.bool_),
                )
                continue
            except OverflowError:
                pass  # pd.array says what is wrong
        out[column] = pd.array(values, dtype=dtypes[dtype])
    return pd.DataFrame(out, index=pd.RangeIndex(n), copy=False)


class ListTable:
    """A table as plain lists, for a small report printed as a table (nsprof analyze's fast path:
    pandas costs more per column than a few dozen rows do): the tidy table (tidy_rows) or its
    summary (nsprof.analysis.summary.summary_rows). Each column a list holding what the
    DataFrame's column.tolist() would (tidy_rows: None where that holds pd.NA, NaN in the float
    columns); `attrs` as a frame's; `table[column]` is a list (column_list reads a ListTable and a
    DataFrame alike)."""

    def __init__(self, columns: dict[str, list], n: int):
        self.columns = columns
        self.attrs: dict = {}
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, column: str) -> list:
        return self.columns[column]

    def __setitem__(self, column: str, values: list) -> None:
        if len(values) != self._n:
            raise ValueError(f"{len(values)} values for a table of {self._n} rows")
        self.columns[column] = list(values)

    def __contains__(self, column: str) -> bool:
        return column in self.columns

    def take(self, positions: list[int]) -> ListTable:
        """The rows at `positions`, in that order (as DataFrame.iloc takes them)."""
        table = ListTable(
            {c: [values[i] for i in positions] for c, values in self.columns.items()}, len(positions)
        )
        table.attrs = dict(self.attrs)
        return table


def tidy_rows(rows: dict[str, list]) -> ListTable | None:
    """make_frame's table as a ListTable, or None where a value is not one the lists keep exactly
    (text in a number column, a number that is not a plain int or float, a non-text label): the
    caller then builds the frame."""
    columns, n = _filled(rows)
    out = {}
    for column in COLUMNS:
        dtype = COLUMN_DTYPES[column]
        values = columns.get(column)
        if values is None:
            out[column] = [float("nan")] * n if dtype == "float64" else [None] * n
            continue
        if dtype == "float64":
            if not {type(v) for v in values} <= {float, NoneType}:
                return None
            out[column] = [float("nan") if v is None else v for v in values]
            continue
        kind = int if dtype == "Int64" else str
        if not {type(v) for v in values} <= {kind, NoneType}:
            values = [None if _missing(v) else v for v in values]  # NaN, pd.NA: None
            if not {type(v) for v in values} <= {kind, NoneType}:
                return None
        else:
            values = list(values)
        if kind is int and not all(v is None or -(2**63) <= v < 2**63 for v in values):
            return None
        out[column] = values
    return ListTable(out, n)


def column_list(table, column: str) -> list:
    """A column of a DataFrame (its tolist(): pd.NA where missing) or of a ListTable or a dict
    of lists (None where missing) as a list."""
    values = table[column]
    return values if isinstance(values, list) else values.tolist()


_DTYPES: dict = {}


def _dtypes() -> dict:
    """COLUMN_DTYPES' names -> pandas dtype objects, built once (looking a name up costs more than a small column)."""
    if not _DTYPES:
        import pandas as pd

        _DTYPES.update({name: pd.api.types.pandas_dtype(name) for name in set(COLUMN_DTYPES.values())})
    return _DTYPES


def _missing(value) -> bool:
    """None, NaN, pd.NA or NaT: what pandas' isna() calls missing, for one value."""
    import pandas as pd

    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and value != value)


def failure_frame(failures, points: Points | None = None, **labels):
    """One tidy row per failed point of `failures` ({point id: reason}, in id order; point ids of
    `points`, config ids without it) with its kind and bound (Failure.columns), and `labels` (source,
    clock_control, ...): every failure row nsprof makes is made here."""
    points = points or Points(0)
    return make_frame(
        [
            {**labels, **points.rows(point), **Failure.of(reason).columns()}
            for point, reason in sorted(failures.items())
        ]
    )
