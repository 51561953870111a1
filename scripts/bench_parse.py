"""Parse benchmark (not a test): how long the report parsers take on large reports.

(a) An nsys SQLite export with 1,000,000 kernels and 100,000 NVTX ranges, made by
    replicating the rows of tests/fixtures/fixture.sqlite with SQL, timed through
    nsprof.reports.nsys.read_nsys_sqlite (parse + NVTX attribution).
(b) A 100,000-row ncu raw CSV shaped like a real nsprof tuning run (build_ncu_csv: one
    NVTX range per measured call, cfg<id>.<mode>.r<rep>, so 75,000 distinct NVTX cells),
    timed through nsprof.reports.ncu_csv.read_ncu_csv, with the default CSV engine and with
    pandas' C engine (NSPROF_CSV_ENGINE=c, as without pyarrow).

Each input is parsed --runs times (at least 3), each run in a fresh child process so that
its peak RSS (ru_maxrss) belongs to that parse alone; best, median and worst wall time are
reported, each with its run's peak RSS. The nsys section also times `nsprof analyze FILE
--json` as a whole command. Sections (--only; all by default):

    nsys              (a) parse and analyze --json  -> benchmarks/results/bench_parse_nsys.json
    ncu_csv           (b), default CSV engine       -> benchmarks/results/bench_parse.json
    ncu_csv_c_engine  (b), pandas' C engine         -> benchmarks/results/bench_parse.json

Figures of sections not run this time keep their previous values in those files.

    python scripts/bench_parse.py [--only nsys,ncu_csv,ncu_csv_c_engine] [--runs N]
                                  [--kernels N] [--ranges N] [--csv-rows N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
RESULTS = REPO / "benchmarks" / "results" / "bench_parse.json"
GOAL_NSYS_S = 3.0
GOAL_NCU_CSV_S = 2.0

NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange

# Runs in a child process: one parse, then its wall time and peak RSS as JSON on stdout.
_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
kind, path = sys.argv[2], sys.argv[3]
if kind == "nsys":
    from nsprof.reports.nsys.reader import read_nsys_sqlite as read
else:
    from nsprof.reports.ncu_csv import read_ncu_csv as read
import pandas  # imported before the clock starts: library start-up is not parse time
try:
    import pyarrow.csv  # the ncu CSV reader's engine when installed; also start-up, not parsing
    import pyarrow.compute
except ImportError:
    pass
rss_before_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
frame = read(path)
wall_s = time.perf_counter() - t0
attributed = int(frame["range"].notna().sum())
rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
print(json.dumps({"wall_s": wall_s, "rows": len(frame), "attributed": attributed,
                  "peak_rss_mib": rss_mib, "rss_before_parse_mib": rss_before_mib}))
"""


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _select_list(columns: list[str], shifted: dict[str, str]) -> str:
    # Every column copied as is, except those given an expression (time or id offsets).
    return ", ".join(shifted.get(name, f'"{name}"') for name in columns)


def build_nsys_db(out: Path, n_kernels: int, n_ranges: int) -> dict:
    """Replicate the fixture's kernels, their runtime rows and its NVTX ranges.

    Copy i of the kernels is shifted in time onto copy (i mod range_copies) of the ranges, so
    every kernel keeps its place inside (or outside) the replicated ranges; its runtime row
    gets the same shift and a new correlationId. Copies of ranges never overlap each other,
    so push/pop ranges stay properly nested.
    """
    shutil.copyfile(FIXTURES / "fixture.sqlite", out)
    conn = sqlite3.connect(out)
    kernel_t, runtime_t = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"
    nvtx_t = "NVTX_EVENTS"
    types = ",".join(map(str, NVTX_RANGE_TYPES))
    k0 = conn.execute(f"SELECT count(*) FROM {kernel_t}").fetchone()[0]
    r0 = conn.execute(f"SELECT count(*) FROM {nvtx_t} WHERE eventType IN ({types})").fetchone()[0]
    lo_ns, hi_ns = conn.execute(
        f"""SELECT min(t0), max(t1) FROM (
              SELECT min(start) t0, max(end) t1 FROM {kernel_t}
              UNION ALL SELECT min(start), max(end) FROM {runtime_t}
              UNION ALL SELECT min(start), max(coalesce(end, start)) FROM {nvtx_t})"""
    ).fetchone()
    span_ns = hi_ns - lo_ns + 1_000_000
    corr_span = (
        1
        + conn.execute(
            f"SELECT max(c) FROM (SELECT max(correlationId) c FROM {kernel_t}"
            f" UNION ALL SELECT max(correlationId) FROM {runtime_t})"
        ).fetchone()[0]
    )
    kernel_copies = math.ceil(n_kernels / k0)
    range_copies = math.ceil(n_ranges / r0)
    conn.execute("CREATE TEMP TABLE copies (i INTEGER PRIMARY KEY)")
    conn.executemany(
        "INSERT INTO copies VALUES (?)",
        ((i,) for i in range(1, max(kernel_copies, range_copies))),
    )
    shift = f"((c.i % {range_copies}) * {span_ns})"
    time_shift = {"start": f"start + {shift}", "end": f"end + {shift}"}
    corr_shift = {"correlationId": f"correlationId + c.i * {corr_span}"}

    kernel_cols = _columns(conn, kernel_t)
    conn.execute(
        f"INSERT INTO {kernel_t} ({_select_list(kernel_cols, {})})"
        f" SELECT {_select_list(kernel_cols, time_shift | corr_shift)}"
        f" FROM (SELECT * FROM {kernel_t}) AS k, copies AS c WHERE c.i < {kernel_copies}"
        f" ORDER BY c.i, k.rowid LIMIT {n_kernels - k0}"
    )
    runtime_cols = _columns(conn, runtime_t)
    conn.execute(
        f"INSERT INTO {runtime_t} ({_select_list(runtime_cols, {})})"
        f" SELECT {_select_list(runtime_cols, time_shift | corr_shift)}"
        f" FROM (SELECT * FROM {runtime_t} WHERE correlationId IN"
        f"   (SELECT correlationId FROM {kernel_t} WHERE correlationId < {corr_span})) AS r,"
        f" copies AS c WHERE c.i < {kernel_copies}"
    )
    nvtx_cols = _columns(conn, nvtx_t)
    conn.execute(
        f"INSERT INTO {nvtx_t} ({_select_list(nvtx_cols, {})})"
        f" SELECT {_select_list(nvtx_cols, time_shift)}"
        f" FROM (SELECT * FROM {nvtx_t} WHERE eventType IN ({types})) AS n,"
        f" copies AS c WHERE c.i < {range_copies}"
        f" ORDER BY c.i, n.rowid LIMIT {n_ranges - r0}"
    )
    conn.commit()
    counts = {
        "kernels": conn.execute(f"SELECT count(*) FROM {kernel_t}").fetchone()[0],
        "nvtx_ranges": conn.execute(f"SELECT count(*) FROM {nvtx_t} WHERE eventType IN ({types})").fetchone()[
            0
        ],
        "runtime_rows": conn.execute(f"SELECT count(*) FROM {runtime_t}").fetchone()[0],
    }
    conn.close()
    counts["file_mib"] = round(out.stat().st_size / 2**20, 1)
    return counts


# What one measured call launches in a real nsprof run, by the kind of target: a TileLang
# GEMM (one kernel), a CUTLASS-style kernel whose name carries its tile shape (one kernel,
# a name per config), and a torch op (a cuBLAS kernel and an elementwise one). The rows of
# the fixture give every other column; the CUTLASS names follow CUTLASS 3's profiler names.
_TARGETS = ("tilelang", "cutlass", "torch")
_TILES = [(m, n, k) for m in (64, 128, 256) for n in (16, 32, 64, 128, 256) for k in (32, 64, 128)]


def _cutlass_name(config_id: int) -> str:
    m, n, k = _TILES[config_id % len(_TILES)]
    stages = 2 + config_id // len(_TILES) % 5
    return (
        f"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::"
        f"GemmShape<{m}, {n}, {k}>, cutlass::gemm::collective::StageCount<{stages}>, "
        f"cutlass::half_t, cutlass::layout::RowMajor, float>>(T1::Params)"
    )


def build_ncu_csv(out: Path, n_rows: int, reps: int = 5) -> dict:
    """An ncu raw page shaped like a real nsprof tuning run, n_rows kernels long.

    As nsprof's worker runs it (nsprof/worker.py): configs one after another, each config
    `reps` calls per mode (direct, then graph replays profiled per node), each call inside
    its own push/pop range `cfg<id>.<mode>.r<rep>` (nsprof.schema.range_name) in the
    "nsprof" domain, nested in the outer "nsprof" range; so every call has its own NVTX
    cell, written the way the fixture's ncu export writes them. Kernel names and metric
    values come from the fixture's rows of the same kernel.
    """
    sys.path.insert(0, str(REPO))
    from nsprof.schema import range_name

    with open(FIXTURES / "fixture_node_raw.csv", newline="", encoding="utf-8") as src:
        rows = list(csv.reader(src))
    header, units, data = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    pp = next(i for i, name in enumerate(header) if name.startswith("thread Domain:Push/Pop_Range"))
    kernel = col["Kernel Name"]
    by_kernel = {}
    for row in data:
        by_kernel.setdefault(row[kernel].split("<")[0].split()[-1].rsplit("::", 1)[-1], row)
    gemm, nvjet = by_kernel["gemm_kernel"], by_kernel["nvjet_sm90_hsh_64x24_64x16_2x4_h_bz_NNT"]
    elementwise = by_kernel["vectorized_elementwise_kernel"]
    outer = '"nsprof:nsprof:none:none:RGB:0xff:REGISTERED:nsprof"'
    tid = gemm[pp].split()[0]
    written, config_id, ranges, names = 0, 0, 0, set()
    with open(out, "w", newline="", encoding="utf-8") as dst:
        writer = csv.writer(dst, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerow(header)
        writer.writerow(units)
        while written < n_rows:
            target = _TARGETS[config_id % len(_TARGETS)]
            if target == "torch":
                call = [nvjet, elementwise]
            elif target == "cutlass":
                call = [list(gemm)]
                call[0][kernel] = _cutlass_name(config_id)
            else:
                call = [gemm]
            for mode in ("direct", "graph"):
                for rep in range(reps):
                    name = range_name(config_id, mode, rep)
                    cell = f'{tid}  {outer}  "nsprof:{name}:none:none:RGB:0xff:REGISTERED:{name}" '
                    ranges += 1
                    for template in call:
                        if written == n_rows:
                            break
                        row = list(template)
                        row[col["ID"]] = str(written)  # ncu numbers results 0..n-1
                        row[pp] = cell
                        names.add(row[kernel])
                        writer.writerow(row)
                        written += 1
            config_id += 1
    return {
        "rows": n_rows,
        "configs": config_id,
        "nvtx_ranges": ranges,
        "kernel_names": len(names),
        "file_mib": round(out.stat().st_size / 2**20, 1),
    }


def time_parse(kind: str, path: Path, runs: int = 3, env: dict | None = None) -> dict:
    """Wall time and peak RSS of `runs` parses, each in a fresh process: best, median, worst."""
    import statistics

    results = []
    for _ in range(max(3, runs)):
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(REPO), kind, str(path)],
            capture_output=True,
            text=True,
            check=False,
            env=None if env is None else os.environ | env,
        )
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise RuntimeError(f"{kind} parse failed: {tail}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ordered = sorted(results, key=lambda r: r["wall_s"])
    best, worst = ordered[0], ordered[-1]
    median_s = statistics.median(r["wall_s"] for r in results)
    return {
        "rows": best["rows"],
        "attributed": best["attributed"],
        "wall_s": best["wall_s"],  # the best run, as before
        "best_s": round(best["wall_s"], 3),
        "median_s": round(median_s, 3),
        "worst_s": round(worst["wall_s"], 3),
        "all_wall_s": [round(r["wall_s"], 3) for r in results],
        "peak_rss_mib": round(max(r["peak_rss_mib"] for r in results), 1),
        "all_peak_rss_mib": [round(r["peak_rss_mib"], 1) for r in results],
        "rss_before_parse_mib": round(statistics.median(r["rss_before_parse_mib"] for r in results), 1),
    }


def _verdict(figure: dict, goal_s: float) -> dict:
    figure["goal_s"] = goal_s
    figure["pass"] = figure["wall_s"] <= goal_s  # the goal, as before, is on the best run
    figure["median_pass"] = figure["median_s"] <= goal_s
    figure["worst_pass"] = figure["worst_s"] <= goal_s
    return figure


def _csv_engine() -> str | None:
    try:
        from nsprof.reports.ncu_cells import csv_engine
    except ImportError:
        return None
    return csv_engine()


def _nproc() -> int | None:
    # Like nproc(1): the CPUs this process may run on, not all of the machine's.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _ncu_csv_available() -> bool:
    return (REPO / "nsprof" / "reports" / "ncu_csv.py").is_file()


# --- ncu raw CSV (results: benchmarks/results/bench_parse.json) --------------------------

_BUILT: dict[Path, dict] = {}


def _ncu_csv_input(work: Path, args) -> tuple[Path, dict]:
    """The ncu CSV input, built once for every section that parses it."""
    csv_path = work / "bench_ncu_raw.csv"
    if csv_path not in _BUILT:
        print(f"building {csv_path} ...", flush=True)
        _BUILT[csv_path] = build_ncu_csv(csv_path, args.csv_rows)
    return csv_path, dict(_BUILT[csv_path])


def bench_ncu_csv(work: Path, args) -> dict:
    """(b): the ncu raw CSV, default engine (pyarrow's when installed)."""
    csv_path, built = _ncu_csv_input(work, args)
    figure = built | time_parse("ncu_csv", csv_path, args.runs)
    figure["engine"] = _csv_engine()
    return _verdict(figure, GOAL_NCU_CSV_S)


def bench_ncu_csv_c_engine(work: Path, args) -> dict:
    """(b) again with pandas' C reader: what a machine without pyarrow gets."""
    csv_path, built = _ncu_csv_input(work, args)
    figure = built | time_parse("ncu_csv", csv_path, args.runs, env={"NSPROF_CSV_ENGINE": "c"})
    figure["engine"] = "c"
    return _verdict(figure, GOAL_NCU_CSV_S)


# --- nsys: parse and `analyze --json` (results: benchmarks/results/bench_parse_nsys.json) ----
# Kept apart from the ncu CSV part so that each can change alone.

RESULTS_NSYS = REPO / "benchmarks" / "results" / "bench_parse_nsys.json"
NSYS_RUNS = 5

# Runs `nsprof analyze FILE --json` as its own child, output to /dev/null; reports that
# child's wall time and peak RSS (RUSAGE_CHILDREN of this otherwise idle wrapper). The child
# runs in the tree given (cwd too: `python -m` puts the cwd first on sys.path).
_JSON_CHILD = r"""
import json, os, resource, subprocess, sys, time
env = {**os.environ, "PYTHONPATH": sys.argv[1]}
t0 = time.perf_counter()
proc = subprocess.run([sys.executable, "-m", "nsprof", "analyze", sys.argv[2], "--json"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=sys.argv[1])
wall_s = time.perf_counter() - t0
if proc.returncode:
    sys.exit(proc.stderr.decode()[-500:])
rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"wall_s": wall_s, "peak_rss_mib": rss_mib}))
"""


def _spread(results: list[dict]) -> dict:
    """best / median / worst wall time of several runs, each with its own peak RSS."""
    ordered = sorted(results, key=lambda r: r["wall_s"])
    picks = {"best": ordered[0], "median": ordered[len(ordered) // 2], "worst": ordered[-1]}
    figure = {f"{name}_s": round(r["wall_s"], 3) for name, r in picks.items()}
    figure |= {f"{name}_peak_rss_mib": round(r["peak_rss_mib"], 1) for name, r in picks.items()}
    figure["runs"] = [
        {"wall_s": round(r["wall_s"], 3), "peak_rss_mib": round(r["peak_rss_mib"], 1)} for r in results
    ]
    return figure


def _child_runs(argv: list[str], runs: int) -> list[dict]:
    results = []
    for _ in range(runs):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise RuntimeError(f"{argv[-2:]} failed: {tail}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return results


def bench_nsys(work: Path, n_kernels: int, n_ranges: int, runs: int = NSYS_RUNS) -> dict:
    """The nsys figures: read_nsys_sqlite alone, and the whole `analyze --json` command."""
    db = work / "bench_nsys.sqlite"
    print(f"building {db} ...", flush=True)
    built = build_nsys_db(db, n_kernels, n_ranges)
    parse_runs = _child_runs([sys.executable, "-c", _CHILD, str(REPO), "nsys", str(db)], runs)
    parse = built | {"rows": parse_runs[0]["rows"], "attributed": parse_runs[0]["attributed"]}
    parse |= _spread(parse_runs) | {"goal_s": GOAL_NSYS_S}
    parse["pass"] = parse["median_s"] <= GOAL_NSYS_S
    json_runs = _child_runs([sys.executable, "-c", _JSON_CHILD, str(REPO), str(db)], max(3, runs // 2 + 1))
    as_json = _spread(json_runs) | {"what": "nsprof analyze FILE --json > /dev/null, whole command"}
    return {"nsys_sqlite": parse, "nsys_analyze_json": as_json}


def main_nsys(work: Path, args) -> bool:
    """The nsys section: runs bench_nsys and writes bench_parse_nsys.json; whether it passed."""
    import pandas

    figures = bench_nsys(work, args.kernels, args.ranges, max(3, args.runs))
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "nproc": _nproc(),
        "load_average_before": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "pandas": pandas.__version__,
        "figures": figures,
        "goal_s": {"nsys_sqlite (median)": GOAL_NSYS_S},
        "pass": figures["nsys_sqlite"]["pass"],
    }
    RESULTS_NSYS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_NSYS.write_text(json.dumps(report, indent=2) + "\n")
    for name, fig in figures.items():
        print(
            f"{name:<18} best/median/worst {fig['best_s']:.2f}/{fig['median_s']:.2f}/{fig['worst_s']:.2f} s,"
            f" peak RSS {fig['best_peak_rss_mib']:.0f}/{fig['median_peak_rss_mib']:.0f}/"
            f"{fig['worst_peak_rss_mib']:.0f} MiB"
            + ("" if "pass" not in fig else f"  goal {fig['goal_s']} s: {'met' if fig['pass'] else 'MISSED'}")
        )
    print(f"wrote {RESULTS_NSYS.relative_to(REPO)}")
    return report["pass"]


# One entry per section (--only): a function of (work folder, args). The ncu sections return
# their figure for bench_parse.json; the nsys section writes bench_parse_nsys.json itself and
# returns whether it passed.
SECTIONS = {
    "nsys": main_nsys,
    "ncu_csv": bench_ncu_csv,
    "ncu_csv_c_engine": bench_ncu_csv_c_engine,
}
NCU_SECTIONS = ("ncu_csv", "ncu_csv_c_engine")
# --part (the nsys branch's selector) kept as an alias of --only for old command lines.
_PARTS = {"all": ",".join(SECTIONS), "nsys": "nsys", "ncu": ",".join(NCU_SECTIONS)}


# --- the whole benchmark -------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated sections to run (of {', '.join(SECTIONS)}; default: all)",
    )
    parser.add_argument("--part", choices=list(_PARTS), default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--runs", type=int, default=5, help="parses per input, each in a fresh process (>= 3)"
    )
    parser.add_argument("--kernels", type=int, default=1_000_000, help="nsys: kernels in the SQLite")
    parser.add_argument("--ranges", type=int, default=100_000, help="nsys: NVTX ranges in the SQLite")
    parser.add_argument("--csv-rows", type=int, default=100_000, help="ncu: rows in the raw CSV")
    parser.add_argument("--keep", type=Path, help="build the inputs here and keep them")
    args = parser.parse_args()
    if args.only is not None and args.part is not None:
        parser.error("--part is an old spelling of --only; give one of them")
    only = args.only if args.only is not None else _PARTS[args.part or "all"]
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in SECTIONS]
    if unknown or not wanted:
        parser.error(
            f"unknown section(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SECTIONS)}"
        )
    wanted_ncu = [name for name in wanted if name in NCU_SECTIONS]
    if wanted_ncu and not _ncu_csv_available():
        parser.error("nsprof/reports/ncu_csv.py not found")

    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    figures: dict[str, dict] = {
        name: fig for name, fig in previous.get("figures", {}).items() if name in NCU_SECTIONS
    }  # nsys figures live in RESULTS_NSYS
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    work = args.keep or Path(tempfile.mkdtemp(prefix="nsprof-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    nsys_pass = True
    try:
        if "nsys" in wanted:
            nsys_pass = main_nsys(work, args)
        for name in wanted_ncu:
            figures[name] = SECTIONS[name](work, args) | {"date": now}
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if not wanted_ncu:
        return 0 if nsys_pass else 1

    import pandas

    report = {
        "date": now,
        "machine": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "nproc": _nproc(),
        "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "pandas": pandas.__version__,
        "pyarrow": _version("pyarrow"),
        "ncu_csv_engine": _csv_engine(),
        "figures": figures,
        "goals_s": {name: GOAL_NCU_CSV_S for name in NCU_SECTIONS},
        "pass": all(f["pass"] for f in figures.values()),
        "nsys": f"see {RESULTS_NSYS.relative_to(REPO)}",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")

    print(
        f"\n{'input':<17} {'rows':>10} {'MiB':>7} {'best s':>7} {'median':>7} {'worst':>7} {'goal':>5}"
        f" {'peak MiB':>8}  ok"
    )
    for name, fig in figures.items():
        rows = fig.get("kernels", fig.get("rows"))
        verdict = "pass" if fig["pass"] else "FAIL"
        if fig["pass"] and not fig.get("worst_pass", True):
            verdict += " (best run only)"
        print(
            f"{name:<17} {rows:>10,} {fig['file_mib']:>7} {fig['wall_s']:>7.2f} {fig.get('median_s', 0):>7.2f}"
            f" {fig.get('worst_s', 0):>7.2f} {fig['goal_s']:>5.1f} {fig['peak_rss_mib']:>8.0f}  {verdict}"
            + ("" if name in wanted else f"  (from {fig.get('date', previous.get('date', '?'))})")
        )
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0 if report["pass"] and nsys_pass else 1


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
