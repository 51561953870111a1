"""Kernels -> the CPU calls that launched them (``CUPTI_ACTIVITY_KIND_RUNTIME``).

A runtime row with a kernel's ``correlationId`` (in the same process) is the API call
(``cuLaunchKernel``, ``cudaGraphLaunch``, ...) that launched it: its ``start`` is the launch
time and ``globalTid`` the launching thread. All kernel nodes of one graph launch share it.
"""

from __future__ import annotations

import numpy as np

from nsprof.reports.nsys.sqlite import NULL, distinct_values


def match_launches(
    kernel_corr: np.ndarray,
    kernel_process: np.ndarray | None,
    runtime_corr: np.ndarray,
    runtime_process: np.ndarray,
) -> np.ndarray:
    """Row of each kernel's runtime call (same process and correlationId, first row), or -1."""
    result = np.full(len(kernel_corr), -1, dtype=np.int64)
    valid = kernel_corr != NULL
    if not len(runtime_corr) or not valid.any():
        return result
    k_corr, r_corr = kernel_corr[valid], runtime_corr
    if kernel_process is None:  # no globalPid column: correlation ids alone
        k_key, r_key = k_corr, r_corr
    else:
        k_proc = kernel_process[valid]
        both = np.concatenate([k_proc, runtime_process])
        if both.min() == both.max():  # one process: the usual case
            k_key, r_key = k_corr, r_corr
        else:
            codes = distinct_values(both)[1].astype(np.int64)
            corr = distinct_values(np.concatenate([k_corr, r_corr]))[1].astype(np.int64)
            span = int(corr.max()) + 1
            k_key = codes[: len(k_corr)] * span + corr[: len(k_corr)]
            r_key = codes[len(k_corr) :] * span + corr[len(k_corr) :]
    low = min(int(k_key.min()), int(r_key.min()))
    high = max(int(k_key.max()), int(r_key.max()))
    rows = np.arange(len(r_key), dtype=np.int64)
    if high - low <= 4 * (len(k_key) + len(r_key)) + 4096:
        # Dense ids: a lookup table, no sort. Reversed writes leave the first row per key.
        table = np.full(high - low + 1, -1, dtype=np.int64)
        table[r_key[::-1] - low] = rows[::-1]
        result[valid] = table[k_key - low]
    else:
        order = np.argsort(r_key, kind="stable")
        sorted_key = r_key[order]
        at = np.minimum(np.searchsorted(sorted_key, k_key), len(sorted_key) - 1)
        result[valid] = np.where(sorted_key[at] == k_key, order[at], -1)
    return result
