"""`nsprof validate`'s tables on its recorded H200 run (benchmarks/results/validate_seed_gemm.json).

The agreement figures are recomputed from the recorded per-config medians, independently:
Kendall τ-b by counting concordant/discordant pairs here, bias as a median of ratios,
regret from the truth's own numbers.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from nsprof.analysis.agreement import agreement
from nsprof.render.json import agreement_record, validate_document
from nsprof.render.validate_tables import format_agreement

RECORD = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "validate_seed_gemm.json"


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


def tau_b(pairs):
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(pairs)):
        for j in range(i + 1, len(pairs)):
            dx = pairs[i][0] - pairs[j][0]
            dy = pairs[i][1] - pairs[j][1]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    return (concordant - discordant) / (
        (concordant + discordant + ties_x) * (concordant + discordant + ties_y)
    ) ** 0.5


def test_recorded_agreement_recomputes(record):
    values = {}
    for row in record["per_config"]:
        if row["value_ns"] is not None:
            values.setdefault(row["method"], {})[row["config_id"]] = row["value_ns"]
    checked = 0
    for rec in record["agreement"]:
        timer, truth = values[rec["timer"]], values[rec["truth"]]
        common = sorted(set(timer) & set(truth))
        assert rec["n"] == len(common) == 23
        pairs = [(timer[c], truth[c]) for c in common]
        assert rec["kendall_tau"] == pytest.approx(tau_b(pairs))
        assert rec["bias"] == pytest.approx(statistics.median(t / g for t, g in pairs))
        pick = min(common, key=lambda c: (timer[c], c))
        best = min(common, key=lambda c: (truth[c], c))
        assert rec["regret"] == pytest.approx(truth[pick] / truth[best] - 1)
        checked += 1
    assert checked == 44  # 11 timers x 4 ground truths


def test_tables_render_from_the_record(record):
    per_config = pd.DataFrame(record["per_config"])
    table = agreement(
        per_config,
        sorted({r["timer"] for r in record["agreement"]}),
        ["ncu:direct", "ncu:graph", "nsys:direct", "nsys:graph"],
    )
    text = format_agreement(table)
    assert text.count("\n") >= 44 + 1
    assert "cupti" in text and "nsys:graph" in text
    document = json.loads(validate_document([agreement_record(table, per_config, None, "v")]))
    assert len(document["agreement"]) == 44 and document["verdict"] == "v"
