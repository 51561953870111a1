"""What a saved run's JSON must hold where nsprof reads it back (tune --json: TUNE, read by
nsprof.render.json.load_tune; validate --save: VALIDATE, read by nsprof.validate_saved.load_validate):
each field's kind, checked once where the file is read, so that a file edited by hand is refused in
one line naming the field (Unreadable) rather than failing part way through the reading or the
drawing. Fields the readers do not read (the words, the decisions: computed again) are not checked.

A spec is an object with check(value, where): where is the field's path in the file
("shapes[1].truths[0].notes"), "" for the whole document."""

from __future__ import annotations

import math
from typing import Any


class Unreadable(ValueError):
    """A saved run's field of the wrong kind, or missing: the message names the field."""


def _shown(value: Any) -> str:
    """A JSON value in words, for a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value!r}" if len(value) <= 40 else "a text"
    return {list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _at(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _its(where: str) -> str:
    return f"its {where}" if where else "it"


class Kind:
    """A value that `test` accepts, `words` saying what it must be."""

    def __init__(self, words: str, test) -> None:
        self.words, self.test = words, test

    def check(self, value: Any, where: str) -> None:
        if not self.test(value):
            raise Unreadable(f"{_its(where)} is {_shown(value)}, not {self.words}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


ANY = Kind("anything", lambda value: True)
TEXT = Kind("text", lambda value: isinstance(value, str))
FLAG = Kind("true or false", lambda value: isinstance(value, bool))
OBJECT = Kind("an object", lambda value: isinstance(value, dict))
LIST = Kind("a list", lambda value: isinstance(value, list))
COUNT = Kind(
    "a whole number of 0 or more", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0
)
RANK = Kind(
    "a whole number of 1 or more", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1
)


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past a float's range (JSON's integers have no bound)
        return False


NUMBER = Kind("a finite number", lambda value: _is_number(value) and _finite(value))
SIZE = Kind("a finite number of 0 or more", lambda value: NUMBER.test(value) and value >= 0)


def one_of(*choices: str) -> Kind:
    return Kind(f"one of {', '.join(choices)}", lambda value: isinstance(value, str) and value in choices)


class Maybe:
    """null, or what `spec` accepts."""

    def __init__(self, spec) -> None:
        self.spec = spec

    def check(self, value: Any, where: str) -> None:
        if value is not None:
            self.spec.check(value, where)


class ListOf:
    def __init__(self, item) -> None:
        self.item = item

    def check(self, value: Any, where: str) -> None:
        LIST.check(value, where)
        for index, item in enumerate(value):
            self.item.check(item, _at(where, index))


class MapOf:
    """An object whose every value is what `value` accepts (and every key what `key` accepts)."""

    def __init__(self, value, key: Kind | None = None) -> None:
        self.value, self.key = value, key

    def check(self, value: Any, where: str) -> None:
        OBJECT.check(value, where)
        for key, item in value.items():
            if self.key is not None and not self.key.test(key):
                raise Unreadable(f"{_its(where)} has the key {key!r}, not {self.key.words}")
            self.value.check(item, _at(where, key))


class Fields:
    """An object with `required` fields and maybe `optional` ones (name: spec); others are not read."""

    def __init__(self, required: dict, optional: dict | None = None) -> None:
        self.required, self.optional = required, optional or {}

    def check(self, value: Any, where: str) -> None:
        OBJECT.check(value, where)
        for name, spec in self.required.items():
            if name not in value:
                raise Unreadable(f"{_its(where)} lacks {name}" if where else f"it lacks {name}")
            spec.check(value[name], _at(where, name))
        for name, spec in self.optional.items():
            if name in value:
                spec.check(value[name], _at(where, name))


class Rows:
    """A table as a list of row objects, the columns of `columns` (name: spec of a value) checked where
    a row has them, those of `required` present in every row (an empty table has none)."""

    def __init__(self, columns: dict, required: tuple = ()) -> None:
        self.columns, self.required = columns, required

    def check(self, value: Any, where: str) -> None:
        ListOf(OBJECT).check(value, where)
        for index, row in enumerate(value):
            Fields({name: self.columns.get(name, ANY) for name in self.required}, self.columns).check(
                row, _at(where, index)
            )


class Table:
    """nsprof.render.json.frame_records' object: `ranked` rows and `columns` (name: dtype). Each value is
    of its column's dtype (null where the dtype holds missing values), the columns of `columns` (name:
    spec) as that spec says too, and those of `required` present. nullable: `columns` may be null (no
    table was written, as a probe that measured nothing)."""

    def __init__(self, columns: dict, required: tuple = (), nullable: bool = False) -> None:
        self.columns, self.required, self.nullable = columns, required, nullable

    def check(self, value: Any, where: str) -> None:
        Fields(
            {"ranked": ListOf(OBJECT), "columns": Maybe(MapOf(TEXT)) if self.nullable else MapOf(TEXT)}
        ).check(value, where)
        dtypes = value["columns"]
        if dtypes is None:
            return
        for name in self.required:
            if name not in dtypes:
                raise Unreadable(f"{_its(_at(where, 'columns'))} lacks {name}")
        kinds = {name: _dtype_kind(dtype, _at(_at(where, "columns"), name)) for name, dtype in dtypes.items()}
        for index, row in enumerate(value["ranked"]):
            at = _at(_at(where, "ranked"), index)
            for name, (spec, nullable) in kinds.items():
                if name not in row or row[name] is None:
                    if not nullable:
                        raise Unreadable(
                            f"{_its(at)} lacks {name}, which its column's type cannot leave empty"
                        )
                    continue
                spec.check(row[name], _at(at, name))
                self.columns.get(name, ANY).check(row[name], _at(at, name))


# The column types a saved run's tables have (nsprof.render.json.frame_records writes them as pandas names them).
WRITTEN_DTYPES = frozenset(
    {"int64", "Int64", "float64", "Float64", "bool", "boolean", "object", "str", "string"}
)


def _dtype_kind(dtype: str, where: str) -> tuple[Kind, bool]:
    """(the spec of a value of pandas dtype `dtype`, whether it holds missing values)."""
    import pandas as pd

    if not isinstance(dtype, str) or dtype not in WRITTEN_DTYPES:  # pandas takes "S2000000000": 2 GB a value
        raise Unreadable(f"{_its(where)} is {_shown(dtype)}, not a column type nsprof writes")
    parsed = pd.api.types.pandas_dtype(dtype)
    whole = Kind("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool))
    if pd.api.types.is_bool_dtype(parsed):
        return FLAG, isinstance(parsed, pd.api.extensions.ExtensionDtype)
    if pd.api.types.is_integer_dtype(parsed):
        return whole, isinstance(parsed, pd.api.extensions.ExtensionDtype)
    if pd.api.types.is_numeric_dtype(parsed):
        return NUMBER, True
    return Kind("text, a number, true or false", lambda v: isinstance(v, (str, int, float))), True


# A ranked table's columns that the tables, the page and the plot read (nsprof.analysis.ranking.rank's)
_RANKED = (
    "config_id",
    "rank",
    "value_ns",
    "vs_best",
    "tied_with_best",
    "ci_low_ns",
    "ci_high_ns",
    "ci_coverage",
)
_RANKED_VALUES = {
    "config_id": COUNT,
    "rank": RANK,
    **{name: SIZE for name in ("value_ns", "median_ns", "min_ns", "max_ns", "ci_low_ns", "ci_high_ns")},
    "reps": COUNT,
}


def tune_spec():
    """What load_tune reads of tune --json's document (tune_document's)."""
    shape = Fields(
        {
            "shape": Maybe(COUNT),
            "truths": ListOf(_Both(_ranking_spec(), Table(_RANKED_VALUES, _RANKED))),
            "deploy": Fields({"truth": TEXT}),
            "agreement": ListOf(_pair_spec()),
            "explanations": ListOf(_explanation_spec()),
            "prescreen": Maybe(Table(_RANKED_VALUES, ("config_id",), nullable=True)),
        }
    )
    document = {"target": TEXT, "configs": LIST, "settings": OBJECT, "errors": ListOf(TEXT)}
    return _Both(
        _Shapes(Fields(document, {"shapes": Maybe(ListOf(shape)), "steps_s": MapOf(SIZE)}), shape),
        _TruthsNamed(),
    )


def _ranking_spec() -> Fields:
    """A truth's ranking, but its table (nsprof.render.json's _ranking)."""
    from nsprof.analysis.adaptive import STOP_REASONS
    from nsprof.settings import STATS

    adaptive = Fields(
        {
            "stopped": one_of(*STOP_REASONS),
            "max_reps": COUNT,
            "budget_s": Maybe(SIZE),  # null: --budget-s inf
            "sessions": COUNT,
            "reps": COUNT,
            "wall_s": SIZE,
            "history": ListOf(OBJECT),
            "reps_per_config": MapOf(COUNT, key=Kind("a config id", lambda k: k.isdigit())),
            "note": TEXT,
            "equivalence": SIZE,
        },
        {"clock_step_ns": COUNT},
    )
    return Fields(
        {
            **{name: TEXT for name in ("truth", "backend", "label")},
            "labels": MapOf(TEXT),
            "stat": one_of(*STATS),
            "notes": ListOf(TEXT),
            "first_pass_wall_s": Maybe(SIZE),
            "first_pass_phases": Maybe(OBJECT),
            "adaptive": Maybe(adaptive),
        }
    )


def _pair_spec() -> Fields:
    """Two truths' winners compared (nsprof.analysis.crosstruth.Pair's fields)."""
    return Fields(
        {
            "a": TEXT,
            "b": TEXT,
            "winner_a": Maybe(COUNT),
            "winner_b": Maybe(COUNT),
            "ties_a": ListOf(COUNT),
            "ties_b": ListOf(COUNT),
            "verdict": TEXT,
            "a_under_b": Maybe(NUMBER),
            "b_under_a": Maybe(NUMBER),
        }
    )


def _explanation_spec() -> Fields:
    """What explains a disagreement, with its probes (nsprof.render.json's _explanation)."""
    from nsprof.analysis.crosstruth import CAUSES, CONDITIONS

    probe = Fields(
        {
            "truth": TEXT,
            "changed": ListOf(one_of(*CONDITIONS)),
            "labels": MapOf(TEXT),
            "winner": Maybe(COUNT),
            "tie_set": ListOf(COUNT),
            "verdict": TEXT,
        }
    )
    return Fields(
        {
            **{name: TEXT for name in ("a", "b", "probed", "target")},
            "contenders": ListOf(COUNT),
            "cause": one_of(*CAUSES),
            "reason": Maybe(TEXT),
            "warnings": ListOf(TEXT),
            "probes": ListOf(_Both(probe, Table(_RANKED_VALUES, ("config_id", "value_ns"), nullable=True))),
        }
    )


class _TruthsNamed:
    """A saved tune's truths named alike where one part of it names another: each shape ranks every
    truth the first one ranks (the tables show those at each shape) when it ranks several, its deploy
    truth is one it ranks, its agreement compares two of them, and what it explains is a pair its
    agreement compares."""

    def check(self, value: Any, where: str) -> None:
        shapes = [(_at(where, f"shapes[{i}]"), s) for i, s in enumerate(value.get("shapes") or [])]
        shapes = shapes or [(where, value)]
        first = [ranking["truth"] for ranking in shapes[0][1]["truths"]]
        for at, shape in shapes:
            names = [ranking["truth"] for ranking in shape["truths"]]
            lacking = [name for name in first if name not in names] if len(first) > 1 else []
            if lacking:
                raise Unreadable(
                    f"{_its(_at(at, 'truths'))} lack {', '.join(lacking)}, which the first shape ranks"
                )
            deploy = shape["deploy"]["truth"]
            if deploy not in names:
                raise Unreadable(
                    f"{_its(_at(at, 'deploy.truth'))} is {_shown(deploy)}, not one of its truths"
                )
            pairs = {(pair["a"], pair["b"]) for pair in shape["agreement"]}
            for a, b in sorted(pairs):
                if a not in names or b not in names:
                    raise Unreadable(
                        f"{_its(_at(at, 'agreement'))} compares {a} and {b}, not two of its truths"
                    )
            for index, explained in enumerate(shape["explanations"]):
                if (explained["a"], explained["b"]) not in pairs:
                    raise Unreadable(
                        f"{_its(_at(_at(at, 'explanations'), index))} explains {explained['a']} and "
                        f"{explained['b']}, which its agreement does not compare"
                    )


class _Both:
    """What both specs accept."""

    def __init__(self, *specs) -> None:
        self.specs = specs

    def check(self, value: Any, where: str) -> None:
        for spec in self.specs:
            spec.check(value, where)


class _Shapes:
    """A saved run: `document`'s fields, and its shapes (`shape` each) or, without shapes, itself as one."""

    def __init__(self, document, shape) -> None:
        self.document, self.shape = document, shape

    def check(self, value: Any, where: str) -> None:
        self.document.check(value, where)
        if not value.get("shapes"):
            self.shape.check(value, where)


def validate_spec():
    """What load_validate reads of validate --save's document (agreement_record's, one per shape)."""
    tau = Maybe(Kind("a finite number from -1 to 1", lambda v: NUMBER.test(v) and -1 <= v <= 1))
    per_config = Rows(
        {
            "config_id": COUNT,
            "method": TEXT,
            # any sign: graph_cold takes its flush's median off, and a kernel below that noise reads < 0
            **{name: Maybe(NUMBER) for name in ("value_ns", "ci_low_ns", "ci_high_ns")},
        },
        ("config_id", "method", "value_ns"),
    )
    agreement = Rows(
        {
            "timer": TEXT,
            "truth": TEXT,
            "n": COUNT,
            "bias": Maybe(NUMBER),
            "kendall_tau": tau,
            "spearman_rho": tau,
            "same_best": Maybe(FLAG),
            "timer_pick": Maybe(COUNT),
            "truth_best": Maybe(COUNT),
            "regret": Maybe(NUMBER),
            "top_k_hit": Maybe(FLAG),
        }
    )
    floors = Rows(
        {
            "truth": TEXT,
            "against": Maybe(TEXT),
            "n": Maybe(COUNT),
            "kendall_tau": tau,
            "median_rel_change": Maybe(SIZE),
            "max_rel_change": Maybe(SIZE),
            "winner": Maybe(COUNT),
            "winner_against": Maybe(COUNT),
            "tie_set": Maybe(ListOf(COUNT)),
            "tie_set_against": Maybe(ListOf(COUNT)),
            "winners": Maybe(TEXT),
        }
    )
    failure = Fields({"method": TEXT, "config_id": COUNT, "reason": TEXT})
    shape = Fields(
        {"agreement": agreement, "per_config": per_config, "noise_floor": floors, "verdict": TEXT},
        {
            "shape": Maybe(COUNT),
            "timers": ListOf(TEXT),
            "truths": ListOf(TEXT),
            "configs": LIST,
            "failures": ListOf(failure),
            "conditions": Maybe(MapOf(TEXT)),
            "matched": Maybe(Rows({})),
            "repeat_per_config": Maybe(per_config),
            "l2_check": Maybe(Rows({"config_id": COUNT})),
        },
    )
    return _Shapes(Fields({}, {"target": Maybe(TEXT), "shapes": Maybe(ListOf(shape))}), shape)
