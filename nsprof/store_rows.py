"""Rows in and out of the results store: `MeasurementKey` (what a number depends on) and
`config_json`, a row's values checked for add(), the key of a space and column filters as SQL,
and the dtypes of the frame read back."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from nsprof.schema import FAILURE_KINDS, Failure
from nsprof.store_schema import (
    FAILURE_FIELDS,
    GROUP_FIELDS,
    KEY_FIELDS,
    MEASUREMENT_COLUMNS,
    PROCESS_FIELDS,
    ROW_FIELDS,
)

_INT_FIELDS = {"config_id", "rep", "graph_node", "shape"}
FLOAT_FIELDS = {"duration_ns", "cycles", "clock_hz", "timeout_s"}


# The address in an object's default text (`<X object at 0x7f...>`, `<function f at 0x7f...>`), and only
# there: a value that merely looks hexadecimal (a seed, a mask) is kept as it is.
_ADDRESS = re.compile(r"(?<= at )0x[0-9a-fA-F]+(?=>)")


def plain(value: Any) -> Any:
    """What JSON holds of a value it has no type for, the same in every process: a set's items in order
    (a set of str iterates in a per-process order), an object's text without its memory address."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=config_json)
    return _ADDRESS.sub("0x", str(value))


def config_json(config: Any) -> str:
    """The canonical JSON text of one config or shape (sorted keys, tuples as lists, sets sorted, no memory
    address), the same in every process: MeasurementKey.config_json and .shape_json."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), default=plain)


def json_digest(text: str) -> str:
    """A short digest of a config's canonical JSON (config_json), as a run records the configs it listed."""
    import hashlib

    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def settings_of(text) -> dict:
    """A stored run's settings (its settings_json): {} for none, or for text that is no JSON object (a store
    edited by hand, nested past what json reads)."""
    try:
        settings = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return {}
    return settings if isinstance(settings, dict) else {}


def key_order(values) -> list:
    """The keys of the dicts among `values`, and of the dicts inside them, in the order the target first gave
    them, as [[key, its values' key order], ...] (lists: a run's settings are stored with sorted keys): what
    a run records, so that configs and shapes read back from their canonical JSON (keys sorted) are shown as
    it showed them (in_order)."""
    tree: dict = {}
    for value in values:
        _grown(tree, value)
    return _pairs(tree)


def key_orders(values) -> dict:
    """Each value's own key order (key_order's), as a run records it: {"orders": the distinct orders, "of":
    each value's index among them}, "of" left out where all agree."""
    seen: dict[str, int] = {}  # an order's JSON -> its index
    orders, of = [], []
    for value in values:
        order = key_order([value])
        index = seen.setdefault(json.dumps(order), len(orders))
        if index == len(orders):
            orders.append(order)
        of.append(index)
    return {"orders": orders, "of": of} if len(orders) > 1 else {"orders": orders}


def own_order(recorded: dict, index: int):
    """Value `index`'s own key order from key_orders' record; None where it holds none for it."""
    orders, of = recorded.get("orders"), recorded.get("of", [0] * (index + 1))
    if isinstance(orders, list) and isinstance(of, list) and 0 <= index < len(of):
        at = of[index]
        if isinstance(at, int) and 0 <= at < len(orders):
            return orders[at]
    return None


def _grown(tree: dict, value) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _grown(tree.setdefault(str(key), {}), inner)


def _pairs(tree: dict) -> list:
    return [[key, _pairs(inner)] for key, inner in tree.items()]


def in_order(value, order):
    """`value` (a config or shape read back from its JSON) with its dicts' keys in `order` (key_order's), keys
    it does not name after them as they were; anything but a dict, or an order that is none, as it is."""
    if not isinstance(value, dict) or not isinstance(order, list):
        return value
    inner = {
        pair[0]: pair[1]
        for pair in order
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
    }
    rank = {key: i for i, key in enumerate(inner)}
    ordered = sorted(value.items(), key=lambda item: rank.get(item[0], len(rank)))
    return {key: in_order(item, inner.get(key)) for key, item in ordered}


@dataclasses.dataclass(frozen=True)
class MeasurementKey:
    """Everything one config's numbers depend on. Unknown or not-applicable parts are "" (not None)
    so that keys compare equal in SQL."""

    fingerprint: str  # nsprof.space_source.target_fingerprint(target)
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


def records(frame_or_rows: Any) -> Iterator[Mapping[str, Any]]:
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
                *PROCESS_FIELDS,
            )
            if c in frame_or_rows.columns
        ]
        # Column by column (Series.tolist gives Python scalars, as to_dict does, at a fifth of its cost)
        columns = [frame_or_rows[c].tolist() for c in wanted]
        for values in zip(*columns):
            yield dict(zip(wanted, values))
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


def _finite(key: MeasurementKey, name: str, value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"config {key.config_id}: {name}={number!r} is not a finite number")
    return number


def row_values(row: Mapping[str, Any], key: MeasurementKey) -> tuple:
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
        elif name in FLOAT_FIELDS:
            values.append(_finite(key, name, value))
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
    kind, bound = (
        None if _missing(kind) else str(kind),
        None if _missing(bound) else _finite(key, "timeout_s", bound),
    )
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
    pid = row.get("pid")
    return (*values, kind, bound, None if _missing(pid) else int(pid))


def filter_sql(filters: Mapping[str, Any], columns: tuple[str, ...]) -> tuple[str, tuple]:
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


def measurement_dtypes() -> dict[str, str]:
    from nsprof.schema import COLUMN_DTYPES

    dtypes = {name: COLUMN_DTYPES.get(name, "string[python]") for name in MEASUREMENT_COLUMNS}
    dtypes["run_id"] = "Int64"
    return dtypes


def group_where(key_without_config: Mapping[str, str]) -> tuple[str, tuple]:
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
