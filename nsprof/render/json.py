"""The JSON documents nsprof writes: the tidy rows (analyze, profile), validate's agreement
document and tune's ranked document.

NaN/NA become null (JSON has no NaN); numpy scalars become plain numbers. Text is written as it is,
but for what a terminal would act on (json_text: its JSON escapes, the same string to a reader).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TextIO

from nsprof.analysis.agreement import floor_map
from nsprof.analysis.stats import is_missing
from nsprof.errors import JSON_ESCAPES

if TYPE_CHECKING:
    import pandas as pd

# Rows per JSON chunk: --json on a 1M-kernel report writes ~0.5 GB; one to_json string of it
# (plus its encoded copy) tripled the peak memory.
JSON_CHUNK_ROWS = 20_000


def json_text(value: Any, indent: int | None = 2) -> str:
    """`value` as JSON text, non-ASCII as it is, but for what a terminal acts on (errors.JSON_ESCAPES);
    NaN is refused: it would make invalid JSON."""
    return json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False).translate(JSON_ESCAPES)


def write_rows(frame, out: TextIO) -> None:
    """The rows as one JSON array and a newline, written chunk by chunk (same text as to_json)."""
    if len(frame) == 0:
        out.write("[]\n")
        return
    out.write("[")
    for begin in range(0, len(frame), JSON_CHUNK_ROWS):
        chunk = frame.iloc[begin : begin + JSON_CHUNK_ROWS].to_json(orient="records", force_ascii=False)
        out.write(("," if begin else "") + chunk[1:-1].translate(JSON_ESCAPES))
    out.write("]\n")
    out.flush()


def jsonable(value: Any) -> Any:
    """Plain Python for json: numpy scalars unwrapped, NaN/NA/None -> None (JSON null)."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, (bool, int, str)):
        return value
    if is_missing(value):
        return None
    return str(value)


def records(df: pd.DataFrame | None) -> list[dict[str, Any]]:
    """A frame's rows as jsonable dicts ([] for None)."""
    if df is None:
        return []
    return [jsonable(dict(zip(df.columns, row))) for row in df.itertuples(index=False, name=None)]


VALIDATE_FORMAT = "nsprof validate"  # the "format" of validate --save's JSON


def validate_document(shapes: list[dict]) -> str:
    """`validate --json`/`--save` of agreement_record's objects, one per shape: the one object of a
    target without shapes; with shapes, the first shape's at the top level and every shape's in
    `shapes` (each with its `shape` and `shape_value`). NaN -> null."""
    doc = shapes[0] if len(shapes) == 1 and "shape" not in shapes[0] else {**shapes[0], "shapes": shapes}
    return json_text(doc)


def agreement_record(
    agreement_df: pd.DataFrame,
    per_config: pd.DataFrame,
    floors: pd.DataFrame | Mapping[str, float] | None,
    verdict: str,
    *,
    matched: pd.DataFrame | None = None,
    conditions: Mapping[str, str] | None = None,
    repeat: pd.DataFrame | None = None,
    l2_check: pd.DataFrame | None = None,
    about: Mapping[str, Any] | None = None,
) -> dict:
    """An object of JSON values: `about` (what nsprof.validate_saved.load_validate needs to show the run again:
    target, timers, truths, configs, failures) under format VALIDATE_FORMAT, then agreement (rows), per_config (long rows as given), noise_floor (each row
    with its winner stability where computed: winner, winner_against, tie_set, tie_set_against,
    winners), verdict; and where given matched (each timer vs the truth under its own
    conditions), conditions (method -> how it was taken) and repeat_per_config (the truths'
    repeated runs)."""
    if floors is None or isinstance(floors, Mapping):
        floor_rows = [{"truth": t, "kendall_tau": tau} for t, tau in floor_map(floors).items()]
    else:
        floor_rows = records(floors)
    doc = {
        **({"format": VALIDATE_FORMAT, **jsonable(dict(about))} if about else {}),
        "agreement": records(agreement_df),
        "per_config": records(per_config),
        "noise_floor": floor_rows,
        "verdict": verdict,
    }
    if matched is not None:
        doc["matched"] = records(matched)
    if conditions:
        doc["conditions"] = dict(conditions)
    if repeat is not None:
        doc["repeat_per_config"] = records(repeat)
    if l2_check is not None:
        doc["l2_check"] = records(l2_check)
    return doc


# The mark of a saved tune (tune --json), so that load_tune can tell one from other JSON.
TUNE_FORMAT = "nsprof tune"
# A Ranking's fields written as they are (its table, adaptive reps and decision are written apart).
_RANKING_KEYS = (
    "truth",
    "backend",
    "label",
    "labels",
    "stat",
    "notes",
    "first_pass_wall_s",
    "first_pass_phases",
)


def tune_document(report) -> str:
    """`nsprof tune --json` (`report`: an nsprof.analysis.tune_report.TuneReport): the first shape's
    findings at the top level (shape_document), the target, its configs, the settings, the errors,
    the steps' wall seconds (`steps_s`), and for a target with shapes every shape's in `shapes`.
    load_tune reads it back."""
    document = {
        "format": TUNE_FORMAT,
        "target": report.target,
        **shape_document(report.shapes[0], report.configs),
        "errors": report.errors,
        "configs": report.configs,
        "settings": report.settings,
        "steps_s": report.steps,
    }
    if report.shaped:
        document["shapes"] = [shape_document(shaped, report.configs) for shaped in report.shapes]
    return json.dumps(jsonable(document))


def frame_records(frame) -> dict:
    """A table as JSON: its rows (`ranked`) and each column's dtype (`columns`), so that frame_of
    rebuilds it as it was."""
    return {"ranked": records(frame), "columns": {str(c): str(t) for c, t in frame.dtypes.items()}}


def frame_of(doc: dict | None):
    """The table of frame_records' dict (None for None, or for no dtypes: no table was written)."""
    import pandas as pd

    if doc is None or doc["columns"] is None:
        return None
    return pd.DataFrame.from_records(doc["ranked"], columns=list(doc["columns"])).astype(doc["columns"])


def shape_document(shape, configs: list) -> dict:
    """One shape's part of tune --json (`shape`: a ShapeReport): the shape, its deploy ranking (label,
    winner, notes, the interval method, the tie set and the decision, in words too, what the adaptive
    reps did: nsprof.analysis.adaptive.AdaptiveSummary, where the first pass's session time went:
    nsprof.session.timing_record, the ranked rows), the tuner's own pick, the prescreen's table, and
    every truth's ranking with their agreement (cross_truth_document)."""
    from nsprof.analysis.confidence import LEVEL, METHOD
    from nsprof.render.tune_tables import describe_decision

    ranking = shape.ranking
    table = ranking.table
    coverages = [float(c) for c in table.loc[table["rank"].notna(), "ci_coverage"] if c == c]
    best = ranking.best_config_id
    return {
        "shape": shape.shape,
        "shape_value": shape.shape_value,
        "label": ranking.label,
        "best_config_id": best,
        "best_config": None if best is None or best >= len(configs) else configs[best],
        "notes": ranking.notes,
        "tuner_pick": shape.tuner_pick,
        "stat": ranking.stat,
        "interval": {
            "method": METHOD,
            "level": LEVEL,
            "achieved": min(coverages, default=None),
            "of": "median",
        },
        "tie_set": ranking.tie_set,
        "decision": {**ranking.decision.as_json(), "words": describe_decision(ranking)},
        "adaptive": None if ranking.adaptive is None else ranking.adaptive.as_json(),
        "first_pass_phases": ranking.first_pass_phases,
        "ranked": records(table),
        "prescreen": None if shape.prescreen is None else frame_records(shape.prescreen),
        **cross_truth_document(shape),
    }


def _ranking(ranked) -> dict:
    from nsprof.render.tune_tables import describe_decision

    return {
        **{key: getattr(ranked, key) for key in _RANKING_KEYS},
        "best_config_id": ranked.best_config_id,
        "tie_set": ranked.tie_set,
        "adaptive": None if ranked.adaptive is None else ranked.adaptive.as_json(),
        "decision": {**ranked.decision.as_json(), "words": describe_decision(ranked)},
        **frame_records(ranked.table),
    }


def _explanation(e) -> dict:
    from nsprof.render.crosstruth_words import describe_cause

    probes = [
        {
            "truth": p.truth,
            "changed": p.changed,
            "labels": p.labels,
            "winner": p.winner,
            "tie_set": p.ties,
            "verdict": p.verdict,
            **(frame_records(p.table) if p.table is not None else {"ranked": [], "columns": None}),
        }
        for p in e.probes
    ]
    return {
        "a": e.pair.a,
        "b": e.pair.b,
        "probed": e.probed.name,
        "target": e.target,
        "contenders": e.contenders,
        "cause": e.cause,
        "words": describe_cause(e),
        "reason": e.reason or None,
        "warnings": e.warnings,
        "probes": probes,
    }


def cross_truth_document(shape) -> dict:
    """tune --json's cross-truth part of one shape (a ShapeReport): the deploy condition, every
    truth's ranking, each pair's agreement (agree | tied | disagree | unknown, each winner under the
    other truth), what explains a disagreement (the probes of the contenders), and the closing
    verdict in words."""
    from nsprof.analysis.crosstruth import condition_words
    from nsprof.render.crosstruth_words import describe_pair, describe_verdict
    from nsprof.render.tune_tables import describe_decision

    labels = shape.ranking.labels
    deploy = {
        "truth": shape.deploy,
        "labels": labels,
        "conditions": condition_words(labels, labels.get("mode")) if labels else None,
        "config_id": shape.ranking.best_config_id,
    }
    cross = shape.cross
    return {
        "deploy": deploy,
        "truths": [_ranking(r) for r in shape.truths.values()],
        "agreement": [] if cross is None else [{**vars(p), "words": describe_pair(p)} for p in cross.pairs],
        "explanations": [] if cross is None else [_explanation(e) for e in cross.explanations],
        "verdict": describe_decision(shape.ranking) if cross is None else describe_verdict(shape),
    }


def load_tune(text: str):
    """The TuneReport of a saved tune (tune_document's JSON). An NsprofError in one line when `text`
    is not JSON, not a tune's document, one cut short or edited past reading, or one with nothing ranked
    under any truth (check_ranked)."""
    from nsprof.analysis.tune_report import TuneReport, check_ranked
    from nsprof.errors import NsprofError

    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past what json reads
        raise NsprofError(f"not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != TUNE_FORMAT:
        raise NsprofError("not a saved tune (nsprof tune --json writes one)")
    from nsprof.render.saved_shape import Unreadable, tune_spec

    try:
        tune_spec().check(document, "")
    except Unreadable as exc:
        raise NsprofError(f"a saved tune that cannot be read: {exc}") from None
    try:
        shapes = [_shape_of(shaped) for shaped in document.get("shapes") or [document]]
        report = TuneReport(
            document["target"],
            document["configs"],
            shapes,
            document["settings"],
            document["errors"],
            document.get("steps_s", {}),
        )
        check_ranked(report)
        return report
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise NsprofError(f"a saved tune that cannot be read: {type(exc).__name__} {exc}") from None


def _shape_of(document: dict):
    """The ShapeReport of shape_document's dict."""
    from nsprof.analysis.adaptive import AdaptiveSummary
    from nsprof.analysis.crosstruth import CrossTruth, Pair
    from nsprof.analysis.tune_report import Ranking, ShapeReport

    def ranking(doc: dict) -> Ranking:
        adaptive = doc["adaptive"]
        if adaptive is not None:
            # a field an earlier nsprof did not write (clock_step_ns) takes its default
            given = {f.name: adaptive[f.name] for f in fields(AdaptiveSummary) if f.name in adaptive}
            given["reps_per_config"] = {int(c): n for c, n in adaptive["reps_per_config"].items()}
            if given["budget_s"] is None:  # --budget-s inf, written as JSON's null
                given["budget_s"] = float("inf")
            adaptive = AdaptiveSummary(**given)
        return Ranking(frame_of(doc), adaptive=adaptive, **{key: doc[key] for key in _RANKING_KEYS})

    truths = {doc["truth"]: ranking(doc) for doc in document["truths"]}
    if document["deploy"]["truth"] not in truths:
        raise ValueError(f"its deploy truth {document['deploy']['truth']!r} is not one of its rankings")
    cross = None
    if len(truths) > 1:
        pairs = [_pair_of(Pair, pair) for pair in document["agreement"]]
        explanations = [_explanation_of(e, pairs) for e in document["explanations"]]
        cross = CrossTruth(pairs, explanations)
    found = (cross, frame_of(document["prescreen"]), document["tuner_pick"])
    return ShapeReport(
        truths, document["deploy"]["truth"], document["shape"], document["shape_value"], *found
    )


def _pair_of(pair_class, doc: dict):
    """The crosstruth.Pair of its dict; null relative numbers as the NaN they were written from."""
    given = {f.name: doc[f.name] for f in fields(pair_class)}
    for name in ("a_under_b", "b_under_a"):
        given[name] = float("nan") if given[name] is None else given[name]
    return pair_class(**given)


def _explanation_of(doc: dict, pairs: list):
    """The crosstruth.Explanation of _explanation's dict, its pair one of `pairs`."""
    from nsprof.analysis.crosstruth import Explanation, Probe
    from nsprof.settings import Truth

    keys = ("truth", "changed", "labels", "winner", "tie_set", "verdict")
    probes = [Probe(*(p[key] for key in keys), frame_of(p)) for p in doc["probes"]]
    pair = {(p.a, p.b): p for p in pairs}.get((doc["a"], doc["b"]))
    if pair is None:
        raise ValueError(
            f"it explains the truths {doc['a']} and {doc['b']}, which its agreement does not compare"
        )
    given = (Truth.parse(doc["probed"]), doc["target"], doc["contenders"], probes, doc["cause"])
    return Explanation(pair, *given, doc["reason"] or "", doc["warnings"])


def summary_records(summaries) -> list[dict[str, Any]]:
    """analyze --format json's rows: each (file, analysis.summary.summarize rows) pair's rows,
    `file` first, without the old `group` column (durations in ns)."""
    out = []
    for file, summary in summaries:
        out += [
            {"file": str(file), **row} for row in records(summary.drop(columns=["group"], errors="ignore"))
        ]
    return out


def compare_document(joined, file_a: str, file_b: str, taken: tuple[str, str]) -> str:
    """analyze --compare --format json: the files and how each was taken (`taken`: describe_report's), the
    joined rows (durations in ns), the ranges on one side only, the per-range ratios and the closing numbers
    (analysis.summary's)."""
    from nsprof.analysis.summary import compare_overall, one_side_ranges, per_range

    only_a, only_b = one_side_ranges(joined)
    document = {
        "a": str(file_a),
        "b": str(file_b),
        "a_taken": taken[0],
        "b_taken": taken[1],
        "rows": records(joined.drop(columns=["group"], errors="ignore")),
        "only_in_a": only_a,
        "only_in_b": only_b,
        "per_range": records(per_range(joined)),
        "overall": jsonable(compare_overall(joined)),
    }
    return json_text(document)
