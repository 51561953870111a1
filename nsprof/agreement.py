"""Alias kept for callers of the old module (nsprof.validate among them): the agreement statistics
now live in nsprof.analysis (stats, agreement), their words, JSON and plot in nsprof.render.

`verdict` is render.tables.format_verdict and `to_json` render.json.agreement_document.
"""

from __future__ import annotations

from nsprof.analysis.agreement import (
    AGREEMENT_COLUMNS,
    FLOOR_COLUMNS,
    FLOOR_MARGIN,
    TAU_TIE,
    WEAK_TAU,
    Verdict,
    agreement,
    floor_map,
    mode_floor,
    noise_floor,
    recommend,
    verdicts,
    wide,
)
from nsprof.analysis.stats import average_ranks, kendall_tau_b, spearman_rho
from nsprof.render.json import agreement_document as to_json
from nsprof.render.plot import PLOT_SUFFIXES, plot
from nsprof.render.tables import format_agreement, format_per_config
from nsprof.render.tables import format_verdict as verdict

__all__ = [
    "AGREEMENT_COLUMNS", "FLOOR_COLUMNS", "FLOOR_MARGIN", "PLOT_SUFFIXES", "TAU_TIE", "WEAK_TAU", "Verdict",
    "agreement", "average_ranks", "floor_map", "format_agreement", "format_per_config", "kendall_tau_b",
    "mode_floor", "noise_floor", "plot", "recommend", "spearman_rho", "to_json", "verdict", "verdicts", "wide",
]
