"""Benchmark (not a test): what one small report costs `nsprof analyze` given many at once.

Copies a real fixture (tests/fixtures; default the 27-kernel ncu raw CSV) --files times into
a temporary folder and runs `python -m nsprof analyze` on all the copies, --runs times, each
in a fresh process with its output thrown away; and as often on one copy alone, for the
fixed cost of a process (interpreter, imports). The cost of one file is

    (time for all copies - time for one copy) / (copies - 1)

reported as best, median and worst over the runs, against the goal of GOAL_MS per small
file (median). --out writes the figures as JSON.

    python scripts/bench_analyze_many.py [--files 2000] [--runs 3] [--fixture NAME]
                                         [--format table|csv|json] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
GOAL_MS = 10.0


def _run(files: list[Path], style: str) -> float:
    """Wall seconds of one `nsprof analyze` over `files`; fails loudly if the command does."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "nsprof", "analyze", "--format", style, *map(str, files)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,  # `-m` puts the working folder first on sys.path: another checkout there would be measured
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"nsprof analyze failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000, help="copies analyzed at once (default 2000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each command (default 3)")
    parser.add_argument("--fixture", default="fixture_node_raw.csv", help="a file of tests/fixtures to copy")
    parser.add_argument(
        "--format", dest="style", default="table", choices=["table", "csv", "json", "markdown"]
    )
    parser.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.files < 2 or args.runs < 1:
        parser.error("--files needs at least 2 and --runs at least 1")
    source = FIXTURES / args.fixture
    if not source.is_file():
        parser.error(f"no fixture {source}")
    with tempfile.TemporaryDirectory(prefix="nsprof-bench-many-") as folder:
        files = []
        for index in range(args.files):
            files.append(Path(folder) / f"r{index:05d}{source.suffix}")
            shutil.copyfile(source, files[-1])
        _run(files[:2], args.style)  # warm the page cache and the bytecode cache
        per_file_ms, whole_s, one_s = [], [], []
        for _ in range(args.runs):
            one = _run(files[:1], args.style)
            whole = _run(files, args.style)
            one_s.append(one)
            whole_s.append(whole)
            per_file_ms.append(1e3 * (whole - one) / (len(files) - 1))
    ordered = sorted(per_file_ms)
    record = {
        "fixture": args.fixture,
        "bytes": source.stat().st_size,
        "files": args.files,
        "runs": args.runs,
        "format": args.style,
        "per_file_ms": {"best": ordered[0], "median": statistics.median(ordered), "worst": ordered[-1]},
        "whole_s": {"best": min(whole_s), "median": statistics.median(whole_s), "worst": max(whole_s)},
        "one_file_s": {"best": min(one_s), "median": statistics.median(one_s), "worst": max(one_s)},
        "goal_ms": GOAL_MS,
        "goal_met": statistics.median(ordered) <= GOAL_MS,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    cost = record["per_file_ms"]
    print(
        f"{args.files} copies of {args.fixture} ({record['bytes']:,} bytes), {args.runs} run(s), --format {args.style}"
    )
    print(
        f"per file: best {cost['best']:.1f} ms, median {cost['median']:.1f} ms, worst {cost['worst']:.1f} ms "
        f"(all files: median {record['whole_s']['median']:.1f} s; one file alone: "
        f"median {record['one_file_s']['median']:.2f} s)"
    )
    print(f"goal <= {GOAL_MS:g} ms per small file (median): {'met' if record['goal_met'] else 'NOT met'}")
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
