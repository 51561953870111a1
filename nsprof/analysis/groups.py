"""How the tidy table's rows group and order: `NO_RANGE`, each row's range label (`add_group`),
kernel keys, natural order; and the statistics of a group computed as pandas' groupby computes
them (`group_sums`, `sample_std`, `median`)."""

from __future__ import annotations

import math
import re

NO_RANGE = "(no range)"


def missing(value) -> bool:
    """None or NaN: a missing cell of lists' columns."""
    return value is None or (isinstance(value, float) and value != value)


def lists(frame, columns) -> dict[str, list]:
    """Columns of `frame` as lists of Python values, None for pd.NA; None for a column it lacks."""
    import pandas as pd

    return {
        column: [None if value is pd.NA else value for value in frame[column].tolist()]
        if column in frame
        else None
        for column in columns
    }


def divide(a: float, b: float) -> float:
    """a / b as numpy divides float64: inf or NaN where b is 0."""
    if b == 0:
        return float("nan") if a == 0 or a != a else math.copysign(float("inf"), a) * math.copysign(1.0, b)
    return a / b


def group_labels(
    config_id: list, mode: list, range_: list, shape: list | None, where: list | None = None
) -> list:
    """`group` of each row (add_group): `cfg<id>[.s<shape>].<mode>` where the row has a config
    (missing where its mode is), else its range, "(no range)" where it has none; then
    ` (gpu <d>, pid <p>)` for what of the two varies among the rows (`where`: place_labels)."""
    labels = []
    for i, config in enumerate(config_id):
        if missing(config):
            labels.append(NO_RANGE if missing(range_[i]) else str(range_[i]))
        elif missing(mode[i]):
            labels.append(None)
        else:
            part = "" if shape is None or missing(shape[i]) else f".s{shape[i]}"
            labels.append(f"cfg{config}{part}.{mode[i]}")
    if where is None:
        return labels
    return [
        label if label is None or not place else f"{label} ({place})" for label, place in zip(labels, where)
    ]


def place_labels(device: list | None, pid: list | None) -> list | None:
    """Where each row ran, as group_labels adds it: `gpu <d>` where the rows hold several devices,
    `pid <p>` where several processes (a median is never pooled across GPUs or processes); None
    where the rows hold one of each."""
    varying = [
        (name, values)
        for name, values in (("gpu", device), ("pid", pid))
        if values is not None and len({v for v in values if not missing(v)}) > 1
    ]
    if not varying:
        return None
    return [
        ", ".join(f"{name} {'?' if missing(values[i]) else int(values[i])}" for name, values in varying)
        for i in range(len(varying[0][1]))
    ]


def add_group(frame):
    """A `group` column: `cfg<id>.<mode>` (`cfg<id>.s<shape>.<mode>` for a target's shapes) for
    nsprof's ranges (reps pooled), else the range; with the GPU or process where rows hold several."""
    import pandas as pd

    frame = frame.copy()
    cells = lists(frame, ("config_id", "mode", "range", "shape", "device", "pid"))
    where = place_labels(cells["device"], cells["pid"])
    group = group_labels(cells["config_id"], cells["mode"], cells["range"], cells["shape"], where)
    frame["group"] = pd.Series(pd.array(group, dtype="string"), index=frame.index)
    return frame


def kernel_key(frame):
    """What tells kernels apart: the full name, else the short one (else "?")."""
    full = frame["kernel_full"] if "kernel_full" in frame else frame["kernel"]
    return full.fillna(frame["kernel"]).fillna("?")


def natural_key(text) -> tuple:
    """A sort key putting cfg2 before cfg10: digit runs compare as numbers (by length without
    leading zeros, then digit by digit: no int(), which refuses a run of 4,300 digits)."""
    return tuple(
        (0, len(part.lstrip("0")), part.lstrip("0")) if part.isascii() and part.isdigit() else (1, 0, part)
        for part in re.split(r"([0-9]+)", str(text))
        if part
    )


def range_key(name) -> tuple:
    """Ranges in natural order, "(no range)" last."""
    return (str(name) == NO_RANGE, natural_key(name))


# The statistics of one group's values computed as pandas' groupby computes them, so that the
# numbers are the same to the last bit: the variance by Welford's update (sample variance, ddof
# 1), the median the mean of the two middle values, sums as group_sums says.
# tests/test_summary_numbers.py holds them to pandas' groupby.
def group_sums(values: list[float], codes: list[int], groups: int) -> tuple[list[float], list[int]]:
    """Each group's sum of its values that are not NaN, and how many those are, added as pandas'
    groupby sum adds them: where each group's rows are together and no value is NaN, numpy's
    add.reduceat (a group's first value plus numpy's pairwise sum of the rest); else its cython
    kernel's Kahan-compensated sum in row order (a NaN compensation, as an infinity leaves it,
    reset to 0)."""
    counts = [0] * groups
    for value, code in zip(values, codes):
        if value == value:
            counts[code] += 1
    if all(a <= b for a, b in zip(codes, codes[1:])) and sum(counts) == len(values):
        sums = [0.0] * groups
        start = 0
        for end in range(1, len(codes) + 1):
            if end == len(codes) or codes[end] != codes[start]:
                sums[codes[start]] = values[start] + _pairwise_sum(values, start + 1, end)
                start = end
        return sums, counts
    sums, compensation = [0.0] * groups, [0.0] * groups
    for value, code in zip(values, codes):
        if value != value:
            continue
        y = value - compensation[code]
        t = sums[code] + y
        c = t - sums[code] - y
        compensation[code] = 0.0 if c != c else c
        sums[code] = t
    return sums, counts


def _pairwise_sum(values: list[float], start: int, end: int) -> float:
    """numpy's pairwise_sum of float64 values[start:end] (8 partial sums per block of up to 128)."""
    n = end - start
    if n < 8:
        total = 0.0
        for i in range(start, end):
            total += values[i]
        return total
    if n <= 128:
        r = values[start : start + 8]
        i = start + 8
        stop = end - n % 8
        while i < stop:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for k in range(i, end):
            total += values[k]
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values, start, start + half) + _pairwise_sum(values, start + half, end)


def sample_std(values: list[float]) -> float:
    count, mean, m2 = 0, 0.0, 0.0
    for value in values:
        count += 1
        old = mean
        mean += (value - old) / count
        m2 += (value - mean) * (value - old)
    return math.sqrt(m2 / (count - 1)) if count > 1 else float("nan")


def median(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
