"""Compares the seed space's tables from two checkouts (written by scripts/seed_tables.sh):
per config and mode, the median after ÷ before, beside each run's own spread.

    python3 scripts/compare_seed_tables.py FOLDER [--out FILE.json]

FOLDER holds NAME.1.txt (before) and NAME.2.txt (after) for profile_ncu, profile_nsys, tune.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _rows(path: Path) -> dict[tuple[int, str], tuple[float, float]]:
    """(config id, mode) -> (median µs, spread %) of a profile or tune table's measured rows; the
    columns are cut where the table's dashed line puts them."""
    lines = path.read_text().splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("--  ") or line.startswith("----  "))
    spans, pos = [], 0
    for dashes in lines[rule].split("  "):
        spans.append((pos, pos + len(dashes)))
        pos += len(dashes) + 2
    names = [lines[rule - 1][a:b].strip() for a, b in spans]
    out = {}
    for line in lines[rule + 1 :]:
        if not line.strip() or line.startswith(("best", "note", "nsprof")):
            break
        row = {name: line[a:b].strip() for name, (a, b) in zip(names, spans)}
        value = row.get("median µs", row.get("µs"))
        if value in (None, "-", ""):
            continue
        out[(int(row["id"]), row.get("mode", "graph"))] = (float(value), float(row["spread %"]))
    return out


def compare(folder: Path) -> dict:
    report = {}
    for name in ("profile_ncu", "profile_nsys", "tune"):
        before, after = _rows(folder / f"{name}.1.txt"), _rows(folder / f"{name}.2.txt")
        keys = sorted(set(before) & set(after))
        ratios = [after[k][0] / before[k][0] for k in keys]
        spreads = [max(before[k][1], after[k][1]) for k in keys]
        report[name] = {
            "points": len(keys),
            "only_before": sorted(map(list, set(before) - set(after))),
            "only_after": sorted(map(list, set(after) - set(before))),
            "ratio_min": min(ratios),
            "ratio_median": statistics.median(ratios),
            "ratio_max": max(ratios),
            "spread_pct_median": statistics.median(spreads),
            "outside_spread": sum(abs(r - 1) * 100 > s for r, s in zip(ratios, spreads)),
            "best_before": min(before, key=lambda k: before[k][0]),
            "best_after": min(after, key=lambda k: after[k][0]),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = compare(args.folder)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{'table':<13} {'points':>6} {'after/before min':>16} {'median':>7} {'max':>6} {'spread % (med)':>14} "
        f"{'outside spread':>14}  best before -> after"
    )
    for name, r in report.items():
        print(
            f"{name:<13} {r['points']:>6} {r['ratio_min']:>16.3f} {r['ratio_median']:>7.3f} {r['ratio_max']:>6.3f} "
            f"{r['spread_pct_median']:>14.1f} {r['outside_spread']:>14}  {r['best_before']} -> {r['best_after']}"
        )


if __name__ == "__main__":
    main()
