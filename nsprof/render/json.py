"""The JSON documents nsprof writes: the tidy rows (analyze, profile), validate's agreement
document and tune's ranked document.

NaN/NA become null (JSON has no NaN); numpy scalars become plain numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from nsprof.analysis.agreement import floor_map
from nsprof.analysis.stats import is_missing

if TYPE_CHECKING:
    import pandas as pd

# Rows per JSON chunk: --json on a 1M-kernel report writes ~0.5 GB; one to_json string of it
# (plus its encoded copy) tripled the peak memory.
JSON_CHUNK_ROWS = 20_000


def write_rows(frame, out: TextIO) -> None:
    """The rows as one JSON array and a newline, written chunk by chunk (same text as to_json)."""
    if len(frame) == 0:
        out.write("[]\n")
        return
    out.write("[")
    for begin in range(0, len(frame), JSON_CHUNK_ROWS):
        chunk = frame.iloc[begin : begin + JSON_CHUNK_ROWS].to_json(orient="records", force_ascii=False)
        out.write(("," if begin else "") + chunk[1:-1])
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


def agreement_document(
    agreement_df: pd.DataFrame,
    per_config: pd.DataFrame,
    floors: pd.DataFrame | Mapping[str, float] | None,
    verdict: str,
    *,
    matched: pd.DataFrame | None = None,
    conditions: Mapping[str, str] | None = None,
    repeat: pd.DataFrame | None = None,
) -> str:
    """A JSON object: agreement (rows), per_config (long rows as given), noise_floor (each row
    with its winner stability where computed: winner, winner_against, tie_set, tie_set_against,
    winners), verdict; and where given matched (each timer vs the truth under its own
    conditions), conditions (method -> how it was taken) and repeat_per_config (the truths'
    repeated runs). NaN -> null."""
    if floors is None or isinstance(floors, Mapping):
        floor_rows = [{"truth": t, "kendall_tau": tau} for t, tau in floor_map(floors).items()]
    else:
        floor_rows = records(floors)
    doc = {
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
    # allow_nan=False: a NaN that slipped through would make invalid JSON; fail here instead
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)


def tune_document(result) -> str:
    """`nsprof tune --json`: label, best config, notes, the tuner's own pick, errors, the interval
    method, the tie set and the decision (winner or tie, in words too), what the adaptive reps did
    (sessions, reps, why they stopped: nsprof.analysis.adaptive.AdaptiveSummary), where the first
    pass's session time went (first_pass_phases: nsprof.session.timing_record) and the ranked rows, each
    with ci_low_ns, ci_high_ns, ci_coverage and tied_with_best (`result`: an nsprof.tune.TuneResult)."""
    from nsprof.analysis.confidence import LEVEL, METHOD
    from nsprof.render.tables import describe_decision

    decision = result.decision
    coverages = [float(c) for c in result.table.loc[result.table["rank"].notna(), "ci_coverage"] if c == c]
    interval = {
        "method": METHOD,
        "level": LEVEL,
        "achieved": min(coverages) if coverages else None,
        "of": "median",
    }
    document = {
        "label": result.label,
        "best_config_id": result.best_config_id,
        "best_config": result.best_config,
        "notes": result.notes,
        "tuner_pick": result.tuner_pick,
        "errors": result.errors,
        "stat": result.stat,
        "interval": interval,
        "tie_set": result.tie_set,
        "decision": {**decision.as_json(), "words": describe_decision(result)},
        "adaptive": None if result.adaptive is None else result.adaptive.as_json(),
        "first_pass_phases": result.first_pass_phases,
        "ranked": json.loads(result.table.to_json(orient="records")),
    }
    document.update(cross_truth_document(result))
    if getattr(result, "shapes", None):
        # A target with shapes: the top-level fields are the first shape's; every shape's in full here.
        document["shapes"] = [shape_document(shaped) for shaped in result.shapes]
    return json.dumps(document, default=str)


def shape_document(result) -> dict:
    """One shape's part of tune --json: the shape, its deploy winner, and everything a tune of one
    shape says (its truths' rankings, their agreement, its notes)."""
    from nsprof.render.tables import describe_decision

    return {
        "shape": result.shape,
        "shape_value": jsonable(result.shape_value),
        "label": result.label,
        "best_config_id": result.best_config_id,
        "best_config": result.best_config,
        "notes": result.notes,
        "tie_set": result.tie_set,
        "decision": {**result.decision.as_json(), "words": describe_decision(result)},
        "ranked": json.loads(result.table.to_json(orient="records")),
        **cross_truth_document(result),
    }


def _ranking(ranked) -> dict:
    from nsprof.render.tables import describe_decision

    return {
        "truth": ranked.truth or ranked.backend,
        "label": ranked.label,
        "labels": jsonable(ranked.labels),
        "best_config_id": ranked.best_config_id,
        "tie_set": ranked.tie_set,
        "first_pass_wall_s": ranked.first_pass_wall_s,
        "first_pass_phases": ranked.first_pass_phases,
        "adaptive": None if ranked.adaptive is None else ranked.adaptive.as_json(),
        "decision": {**ranked.decision.as_json(), "words": describe_decision(ranked)},
        "ranked": json.loads(ranked.table.to_json(orient="records")),
    }


def cross_truth_document(result) -> dict:
    """tune --json's cross-truth part: the deploy condition, every truth's ranking, each pair's
    agreement (agree | tied | disagree | unknown, each winner under the other truth), what explains
    a disagreement (the probes of the contenders), and the closing verdict in words."""
    from nsprof.analysis.crosstruth import condition_words
    from nsprof.render.tables import describe_cause, describe_decision, describe_pair, describe_verdict

    labels = result.labels or {}
    deploy = {
        "truth": result.deploy or result.truth or result.backend,
        "labels": jsonable(labels),
        "conditions": condition_words(labels, labels.get("mode")) if labels else None,
        "config_id": result.best_config_id,
    }
    cross = result.cross
    if cross is None:
        return {
            "deploy": deploy,
            "truths": [_ranking(r) for r in result.rankings.values()],
            "agreement": [],
            "explanations": [],
            "verdict": describe_decision(result),
        }
    pairs = [{**jsonable(vars(pair)), "words": describe_pair(pair)} for pair in cross.pairs]
    explanations = []
    for e in cross.explanations:
        probes = [
            {
                "truth": p.truth,
                "changed": p.changed,
                "labels": jsonable(p.labels),
                "winner": p.winner,
                "tie_set": p.ties,
                "verdict": p.verdict,
                "ranked": [] if p.table is None else json.loads(p.table.to_json(orient="records")),
            }
            for p in e.probes
        ]
        explanations.append(
            {
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
        )
    return {
        "deploy": deploy,
        "truths": [_ranking(r) for r in result.rankings.values()],
        "agreement": pairs,
        "explanations": explanations,
        "verdict": describe_verdict(result),
    }


def summary_records(summaries) -> list[dict[str, Any]]:
    """analyze --format json's rows: each (file, analysis.summary.summarize rows) pair's rows,
    `file` first, without the old `group` column (durations in ns)."""
    out = []
    for file, summary in summaries:
        out += [
            {"file": str(file), **row} for row in records(summary.drop(columns=["group"], errors="ignore"))
        ]
    return out


def compare_document(joined, file_a: str, file_b: str) -> str:
    """analyze --compare --format json: the files, the joined rows (durations in ns), the ranges
    on one side only, the per-range ratios and the closing numbers (analysis.summary's)."""
    from nsprof.analysis.summary import compare_overall, one_side_ranges, per_range

    only_a, only_b = one_side_ranges(joined)
    document = {
        "a": str(file_a),
        "b": str(file_b),
        "rows": records(joined.drop(columns=["group"], errors="ignore")),
        "only_in_a": only_a,
        "only_in_b": only_b,
        "per_range": records(per_range(joined)),
        "overall": jsonable(compare_overall(joined)),
    }
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
