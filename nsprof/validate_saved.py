"""validate --save's JSON: what it keeps beside the tables (saved_about) and its read back
(load_validate), so that `nsprof results FILE.json` shows a validate run again, every shape of it."""

from __future__ import annotations

from nsprof.errors import NsprofError
from nsprof.validate import ValidateResult


def saved_about(target: str, result: ValidateResult) -> dict:
    """What validate --save keeps beside the tables, so that load_validate shows the run again."""
    shape = {} if result.shape is None else {"shape": result.shape, "shape_value": result.shape_value}
    return {
        **shape,
        "target": target,
        "timers": list(result.timers),
        "truths": list(result.truths),
        "configs": list(result.configs),
        "failures": [
            {"method": method, "config_id": config_id, "reason": reason}
            for (method, config_id), reason in sorted(result.failures.items(), key=str)
        ],
    }


def load_validate(document: dict) -> tuple[str, list[ValidateResult]]:
    """(target, a ValidateResult per shape) of validate --save's JSON. A save without what saved_about
    adds (an older nsprof's) still loads: its timers and truths come from its agreement rows, and its
    configs are known by id only. An NsprofError in one line when it cannot be read."""
    from nsprof.render.saved_shape import Unreadable, validate_spec

    try:
        validate_spec().check(document, "")
    except Unreadable as exc:
        raise NsprofError(f"a saved validate run that cannot be read: {exc}") from None
    try:
        shapes = document.get("shapes")
        results = [_result_of(doc) for doc in (shapes or [document])]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise NsprofError(f"a saved validate run that cannot be read: {type(exc).__name__} {exc}") from None
    return str(document.get("target") or "(a saved validate run)"), results


def _result_of(document: dict) -> ValidateResult:
    """The ValidateResult of one shape's object (nsprof.render.json.agreement_record's)."""
    import pandas as pd

    from nsprof.analysis.agreement import AGREEMENT_COLUMNS, FLOOR_COLUMNS, MATCHED_COLUMNS
    from nsprof.analysis.l2 import CHECK_COLUMNS

    needs = {
        "agreement": AGREEMENT_COLUMNS,
        "per_config": ["config_id", "method", "value_ns"],
        "noise_floor": FLOOR_COLUMNS,
        "matched": MATCHED_COLUMNS,
        "repeat_per_config": ["config_id", "method", "value_ns"],
        "l2_check": CHECK_COLUMNS,
    }

    def table(key: str):
        # JSON's null was a NaN: a column of numbers and nulls is numbers again, one of nulls NaN
        rows = document[key]
        if not isinstance(rows, list):
            raise ValueError(f"its {key} is a {type(rows).__name__}, not a list of rows")
        # a table with no rows (a shape where nothing was measured) has its columns all the same
        out = pd.DataFrame(rows) if len(rows) else pd.DataFrame(columns=needs[key])
        missing = [c for c in needs[key] if c not in out.columns]
        if missing:
            raise ValueError(f"its {key} rows lack {', '.join(missing)}")
        for column in out.columns:
            given = out[column].dropna()
            if column in ("winner", "winner_against"):  # config ids, None where none: as validate has them
                out[column] = pd.Series([row.get(column) for row in rows], index=out.index, dtype=object)
                continue
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in given):
                if any(isinstance(v, int) and abs(v) >= 2**1024 for v in given):
                    raise ValueError(f"its {key} rows' {column} holds a number past a float's range")
                out[column] = pd.to_numeric(out[column], errors="coerce")
        return out

    def frame(key: str):
        return table(key) if document.get(key) is not None else None

    agreement = table("agreement")
    per_config = table("per_config")
    n_configs = int(per_config["config_id"].max()) + 1 if len(per_config) else 0
    return ValidateResult(
        per_config=per_config,
        agreement=agreement,
        floors=table("noise_floor") if document["noise_floor"] else None,
        verdict=str(document["verdict"]),
        timers=list(document["timers"] if "timers" in document else sorted(set(agreement["timer"]))),
        truths=list(document["truths"] if "truths" in document else sorted(set(agreement["truth"]))),
        configs=list(document["configs"] if "configs" in document else [{} for _ in range(n_configs)]),
        failures={(f["method"], int(f["config_id"])): f["reason"] for f in document.get("failures", [])},
        matched=frame("matched"),
        conditions=dict(document.get("conditions") or {}),
        repeat=frame("repeat_per_config"),
        shape=None if document.get("shape") is None else int(document["shape"]),
        shape_value=document.get("shape_value"),
        l2_check=frame("l2_check"),
    )
