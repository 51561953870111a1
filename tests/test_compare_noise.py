"""`analyze --compare`'s closing verdicts against the noise: the fastest range is
decided by tune's rule (each range's median interval, the tie set of the fastest, the two
sides' winners related as validate's winner stability relates two runs), and Kendall τ is left
out when there are too few shared ranges for it to mean anything.

The reports are copies of the real nsys fixture whose kernel durations were edited with
sqlite3 (so that two ranges are close, or tied); every expected verdict is computed here from
plain SQL reads of those copies (test_analyze_options.nsys_kernels), the intervals by counting
sign patterns (test_confidence.brute_interval), never from nsprof's own output.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics

import pytest
from test_analyze_options import CFG, NO_RANGE, SQLITE, by_key, natural, nsys_kernels, ok, tau_b
from test_confidence import brute_interval
from test_nsys import expected_fixture_rows

MIN_TAU_RANGES = 4  # the smallest n with 1/n! < 5%: τ = ±1 by chance less than 1 time in 20


def edited(tmp_path, name: str, durations: dict[str, list[float]]):
    """A copy of the nsys fixture whose kernels in each range (`cfg0.direct`, ...: as analyze names
    it) take the given durations, in launch order."""
    path = tmp_path / name
    shutil.copy(SQLITE, path)
    rows = expected_fixture_rows(path)
    with sqlite3.connect(path) as conn:
        for group, values in durations.items():
            mine = [r for r in rows if _group(r) == group]
            assert len(mine) == len(values), group
            for row, value in zip(mine, values):
                conn.execute(
                    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + ? WHERE correlationId = ?",
                    (int(value), row["launch_id"]),
                )
    return path


def _group(row) -> str:
    if row["config_id"] is not None:
        return f"cfg{row['config_id']}.{CFG.fullmatch(row['range'])[2]}"
    return row["range"] or NO_RANGE


def reference_durations(group: str) -> list[float]:
    return [r["duration_ns"] for r in expected_fixture_rows(SQLITE) if _group(r) == group]


def expected_overall(path_a, path_b, keep=lambda r: True) -> dict:
    """The closing verdicts computed from the two files' SQL: per shared range (kernels matched by
    full name) the sum of the kernels' medians and of their interval ends; the fastest of each
    side (lowest time, then the earlier range), its tie set (the ranges not told slower: an interval that
    overlaps its own or lies below it, or without one a time within its interval), and how the two winners
    relate."""
    sides = []
    for path in (path_a, path_b):
        sides.append({k: v for k, v in by_key(nsys_kernels(path)).items() if k[0] != NO_RANGE and keep(k[0])})
    shared = sorted({r for r, _ in sides[0]} & {r for r, _ in sides[1]}, key=natural)
    per_side = []
    for side in sides:
        times = {}
        for r in shared:
            keys = [k for k in side if k[0] == r and k in sides[0] and k in sides[1]]
            intervals = [brute_interval(side[k])[:2] if len(side[k]) > 1 else (None, None) for k in keys]
            low = None if any(i[0] is None for i in intervals) else sum(i[0] for i in intervals)
            high = None if any(i[1] is None for i in intervals) else sum(i[1] for i in intervals)
            times[r] = (sum(statistics.median(side[k]) for k in keys), low, high)
        order = sorted(shared, key=lambda r: (times[r][0], shared.index(r)))
        best = order[0]
        _, low, high = times[best]
        if low is None:
            tie_set = None
        else:
            tie_set = [
                r for r in order if r == best or (times[r][0] if times[r][1] is None else times[r][1]) <= high
            ]
        per_side.append((best, tie_set, times))
    (best_a, ties_a, times_a), (best_b, ties_b, times_b) = per_side
    if best_a == best_b:
        fastest = "same"
    elif ties_a is None or ties_b is None:
        fastest = "untested"
    else:
        fastest = "tied" if best_b in ties_a and best_a in ties_b else "different"
    tau = None
    if len(shared) >= MIN_TAU_RANGES:
        tau = tau_b([times_a[r][0] for r in shared], [times_b[r][0] for r in shared])
    return {
        "ranges": len(shared),
        "fastest_a": best_a,
        "fastest_b": best_b,
        "tie_set_a": ties_a,
        "tie_set_b": ties_b,
        "fastest": fastest,
        "kendall_tau": tau,
    }


def closing(stdout: str) -> str:
    return stdout.strip().splitlines()[-1]


def overall_json(*args) -> dict:
    return json.loads(ok("--compare", *args, "--format", "json").stdout)["overall"]


def test_two_ranges_one_percent_apart_are_a_tie_and_too_few_for_tau(tmp_path):
    # A: cfg1.direct 0.8% slower than cfg0.direct; B: 1.1% faster. The old verdict was
    # "Kendall τ -1.000, fastest differs".
    base = reference_durations("cfg0.direct")
    a = edited(tmp_path, "a.sqlite", {"cfg1.direct": [round(d * 1.008) for d in base]})
    b = edited(tmp_path, "b.sqlite", {"cfg1.direct": [round(d * 0.989) for d in base]})
    only = r"^cfg[01]\.direct$"
    expected = expected_overall(a, b, lambda r: r in ("cfg0.direct", "cfg1.direct"))
    assert expected["ranges"] == 2 and expected["fastest"] == "tied"
    assert (expected["fastest_a"], expected["fastest_b"]) == ("cfg0.direct", "cfg1.direct")
    line = closing(ok("--compare", a, b, "--range", only).stdout)
    assert "Kendall τ -1" not in line and "fastest differs" not in line
    assert f"Kendall τ not computed: 2 shared ranges, τ needs {MIN_TAU_RANGES} or more" in line
    assert "fastest tied within noise (A cfg0.direct, B cfg1.direct: each inside the other's tie set)" in line
    doc = overall_json(a, b, "--range", only)
    assert doc["kendall_tau"] is None and doc["kendall_tau_min_ranges"] == MIN_TAU_RANGES
    assert doc["fastest"] == "tied" and doc["same_fastest"] is False
    assert doc["tie_set_a"] == expected["tie_set_a"] and doc["tie_set_b"] == expected["tie_set_b"]


def test_an_exact_tie_on_one_side_is_not_a_different_fastest(tmp_path):
    # The real fixture's cfg0.direct and cfg0.graph have the same median (2.880 µs): A picks
    # cfg0.direct by the tie rule (the lower time, then the earlier range). B: one cfg0.graph
    # rep 32 ns shorter, so B ranks cfg0.graph first, its interval touching cfg0.direct's.
    graph = reference_durations("cfg0.graph")
    b_graph = sorted(graph)[:1] * 2 + sorted(graph)[2:]
    assert statistics.median(b_graph) < statistics.median(graph)
    b = edited(tmp_path, "b.sqlite", {"cfg0.graph": b_graph})
    expected = expected_overall(SQLITE, b)
    assert (expected["fastest_a"], expected["fastest_b"], expected["fastest"]) == (
        "cfg0.direct",
        "cfg0.graph",
        "tied",
    )
    line = closing(ok("--compare", SQLITE, b).stdout)
    assert "fastest tied within noise (A cfg0.direct, B cfg0.graph: each inside the other's tie set)" in line
    assert f"Kendall τ {expected['kendall_tau']:.3f}" in line  # 8 shared ranges: enough for τ
    doc = overall_json(SQLITE, b)
    assert doc["tie_set_a"] == expected["tie_set_a"] and doc["tie_set_b"] == expected["tie_set_b"]
    assert doc["kendall_tau"] == pytest.approx(expected["kendall_tau"])


def test_a_fastest_outside_the_other_sides_noise_differs(tmp_path):
    b = edited(tmp_path, "b.sqlite", {"cfg1.graph": [1616.0] * 3})
    expected = expected_overall(SQLITE, b)
    assert expected["fastest"] == "different" and expected["tie_set_b"][0] == "cfg1.graph"
    line = closing(ok("--compare", SQLITE, b).stdout)
    ties = ", ".join(expected["tie_set_b"])
    assert (
        f"fastest differs: A cfg0.direct, B cfg1.graph (cfg0.direct outside B's tie set {{{ties}}})" in line
    )
    assert overall_json(SQLITE, b)["fastest"] == "different"


def test_same_fastest_and_untested_without_intervals(tmp_path):
    line = closing(ok("--compare", SQLITE, SQLITE).stdout)
    assert "same fastest: cfg0.direct" in line
    # torch_push and startend hold one launch per kernel: no interval, so a different winner is untested
    b = edited(tmp_path, "b.sqlite", {"torch_push": [5000.0]})
    keep = "^(torch_push|startend)$"
    expected = expected_overall(SQLITE, b, lambda r: r in ("torch_push", "startend"))
    assert expected["fastest"] == "untested"
    line = closing(ok("--compare", SQLITE, b, "--range", keep).stdout)
    assert (
        "fastest differs: A torch_push, B startend (untested against the noise: too few samples "
        "for an interval)"
    ) in line
    assert overall_json(SQLITE, b, "--range", keep)["fastest"] == "untested"


@pytest.mark.parametrize("ranges,shown", [(r"^cfg[01]\.", True), (r"^cfg0\.|^cfg1\.direct$", False)])
def test_tau_needs_enough_shared_ranges(ranges, shown):
    line = closing(ok("--compare", SQLITE, SQLITE, "--range", ranges).stdout)
    assert ("Kendall τ 1.000" in line) == shown
    assert ("Kendall τ not computed" in line) == (not shown)
