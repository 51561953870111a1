"""Rank statistics without scipy: Kendall's τ-b, Spearman's ρ, average ranks, and the missing-value test.

Each takes plain sequences or arrays (NaN pairs dropped) and returns a float; numpy is imported
inside the functions so that importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def is_missing(value: Any) -> bool:
    """None, NaN or pandas' NA."""
    if type(value) is str:  # the common cell, never missing: without pd.isna's cost
        return False
    import pandas as pd

    return value is None or bool(pd.isna(value))


def paired(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both as float arrays with every pair that has a NaN on either side dropped."""
    import numpy as np

    xa = np.asarray(x, dtype=float).ravel()
    ya = np.asarray(y, dtype=float).ravel()
    if xa.shape != ya.shape:
        raise ValueError(f"x and y differ in length ({xa.size} vs {ya.size})")
    keep = ~(np.isnan(xa) | np.isnan(ya))
    return xa[keep], ya[keep]


def kendall_tau_b(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Kendall's τ-b (ties in x or y shrink the denominator); NaN pairs dropped; NaN if undefined.

    τ-b = (concordant − discordant) / sqrt((pairs − ties_x) · (pairs − ties_y)). Built on an n×n
    sign matrix: O(n²) time and memory, fine for the ≤ 2000 configs of a tuning space (2000² int8
    = 4 MB per matrix) and free of scipy.
    """
    import numpy as np

    xa, ya = paired(x, y)
    if xa.size < 2:
        return float("nan")
    sx = np.sign(xa[:, None] - xa[None, :]).astype(np.int8)
    sy = np.sign(ya[:, None] - ya[None, :]).astype(np.int8)
    # The matrices are antisymmetric with a zero diagonal, so every unordered pair is counted
    # twice; the factor cancels in the ratio.
    s = float(np.sum(sx.astype(np.int64) * sy))
    untied_x = float(np.count_nonzero(sx))
    untied_y = float(np.count_nonzero(sy))
    if untied_x == 0 or untied_y == 0:
        return float("nan")  # one side is constant: no ranking to agree with
    return s / float(np.sqrt(untied_x * untied_y))


def average_ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of the ranks they span (scipy's "average")."""
    import numpy as np

    a = np.asarray(values, dtype=float).ravel()
    n = a.size
    order = np.argsort(a, kind="mergesort")
    ordered = a[order]
    starts_group = np.r_[True, ordered[1:] != ordered[:-1]] if n else np.zeros(0, dtype=bool)
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    ends = np.r_[starts[1:], n]  # exclusive
    mean_rank = (starts + ends - 1) / 2.0 + 1.0
    ranks = np.empty(n, dtype=float)
    ranks[order] = mean_rank[group]
    return ranks


def spearman_rho(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's ρ: Pearson correlation of average ranks; NaN pairs dropped; NaN if undefined."""
    import numpy as np

    xa, ya = paired(x, y)
    if xa.size < 2:
        return float("nan")
    rx = average_ranks(xa)
    ry = average_ranks(ya)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = float(np.sqrt(np.dot(rx, rx) * np.dot(ry, ry)))
    if denom == 0.0:
        return float("nan")
    return float(np.dot(rx, ry)) / denom
