"""Capture the real Nsight reports that nsprof's tests read (run on a GPU machine).

    source .device/setup.sh && python3 scripts/capture_fixtures.py OUTDIR [--tar FILE]

Runs scripts/fixture_workload.py (two TileLang seed-GEMM configs and a two-kernel torch op,
direct launches and CUDA-graph replays, each inside an NVTX range) under:
  1. ncu, --graph-profiling node  -> fixture_node.ncu-rep, plus its raw and details CSV
  2. ncu, --graph-profiling graph -> fixture_graph.ncu-rep, plus its raw CSV
  3. nsys, --cuda-graph-trace=node -> fixture.nsys-rep and its SQLite export
  4. ncu, --clock-control none --cache-control none -> fixture_clock_none.ncu-rep and its
     raw CSV, and ncu with neither flag (its defaults) -> fixture_clock_default.ncu-rep
and writes capture.json with the commands, tool versions, GPU and date.

With --only-timers: `nsprof validate` of examples/softmax_triton.py:space with the plain and the
interleaved graph and CUPTI timers (nsys as truth), kept as the worker wrote them: each timer
session's result lines (timers<i>.jsonl, validate's folder names: per config and method, the kept
rounds, their SM clocks, the rounds discarded as throttled) and the saved validate run (validate_timers.json),
recorded in capture_timers.json.

With --only-l2: `nsprof validate --l2-check` of the seed GEMM's space (examples/seed_gemm.py, whose 2 MiB
of weights stay in L2 unflushed; ncu as truth, the CUPTI timers, mode graph, 3 reps): the two ncu reports of its L2 check, kept as fixture_l2_ncu.ncu-rep (ncu's flush) and
fixture_l2_flushed.ncu-rep (reps taking turns: the cold timers' flush, none), the saved validate run
(validate_l2.json), recorded in capture_l2.json. The CSV exports
are made from the .ncu-rep with `ncu --import`, once in the default locale and once in
de_DE (if that locale exists) to get the other thousands separator.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nsprof.host.tools import find_ncu, find_nsys, find_qdstrm_importer  # noqa: E402

WORKLOAD = Path(__file__).resolve().parent / "fixture_workload.py"
ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "examples" / "softmax_triton.py"
METRICS = "gpu__time_duration.sum,gpc__cycles_elapsed.max,gpc__cycles_elapsed.avg.per_second"


def run(cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None) -> int:
    print("$", " ".join(cmd), flush=True)
    with open(log, "w") as handle:
        proc = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    print(f"  -> exit {proc.returncode}, log {log.name}", flush=True)
    return proc.returncode


def tool_version(path: Path) -> str:
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--tar", type=Path, help="also pack OUTDIR into this .tar.gz")
    parser.add_argument(
        "--only-clock", action="store_true", help="capture only the clock-control reports (step 4)"
    )
    parser.add_argument(
        "--only-timers", action="store_true", help="capture only the fast timers' result lines"
    )
    parser.add_argument("--only-l2", action="store_true", help="capture only the L2 check's ncu reports")
    args = parser.parse_args()
    out: Path = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    ncu = find_ncu().path
    nsys = find_nsys().path
    python = sys.executable
    commands: dict[str, list[str]] = {}

    if args.only_timers:
        capture_timer_lines(python, out, commands)
        finish(out, ncu, nsys, commands, args.tar, record="capture_timers.json")
        return
    if args.only_l2:
        capture_l2_reports(python, out, commands)
        finish(out, ncu, nsys, commands, args.tar, record="capture_l2.json")
        return
    if args.only_clock:
        capture_clock_reports(ncu, python, out, commands)
        finish(out, ncu, nsys, commands, args.tar, record="capture_clock.json")
        return
    common = [
        str(ncu),
        "--nvtx",
        "--nvtx-include",
        "nsprof@nsprof/",
        "--nvtx-include",
        "startend",
        "--metrics",
        METRICS,
        "--clock-control",
        "base",
        "--cache-control",
        "all",
        "-f",
    ]
    for mode in ("node", "graph"):
        rep = out / f"fixture_{mode}.ncu-rep"
        cmd = common + ["--graph-profiling", mode, "-o", str(rep.with_suffix("")), python, str(WORKLOAD)]
        commands[f"ncu_{mode}"] = cmd
        run(cmd, out / f"ncu_{mode}.log")
        pages = ("raw", "details") if mode == "node" else ("raw",)
        for page in pages:
            csv_cmd = [str(ncu), "--import", str(rep), "--csv", "--page", page]
            commands[f"csv_{mode}_{page}"] = csv_cmd
            with open(out / f"fixture_{mode}_{page}.csv", "w") as handle:
                subprocess.run(csv_cmd, stdout=handle, stderr=subprocess.STDOUT)
    locales = subprocess.run(["locale", "-a"], capture_output=True, text=True).stdout.split()
    de = next((loc for loc in locales if loc.lower().startswith("de_de")), None)
    if de:
        env = dict(os.environ, LC_ALL=de, LANG=de)
        with open(out / "fixture_node_raw_de.csv", "w") as handle:
            subprocess.run(commands["csv_node_raw"], stdout=handle, stderr=subprocess.STDOUT, env=env)
    print("locales:", locales[:20])

    nsys_base = out / "fixture"
    cmd = [
        str(nsys),
        "profile",
        "-t",
        "cuda,nvtx",
        "-s",
        "none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "-f",
        "true",
        "-o",
        str(nsys_base),
        python,
        str(WORKLOAD),
    ]
    commands["nsys"] = cmd
    run(cmd, out / "nsys.log")
    rep = nsys_base.with_suffix(".nsys-rep")
    qdstrm = nsys_base.with_suffix(".qdstrm")
    if not rep.exists() and qdstrm.exists():
        importer = find_qdstrm_importer(nsys)
        print("no .nsys-rep; importer:", importer)
        if importer:
            commands["import"] = [str(importer), "-i", str(qdstrm)]
            run(commands["import"], out / "import.log")
    if rep.exists():
        commands["export"] = [
            str(nsys),
            "export",
            "--type",
            "sqlite",
            "-f",
            "true",
            "-o",
            str(nsys_base.with_suffix(".sqlite")),
            str(rep),
        ]
        run(commands["export"], out / "export.log")
    if qdstrm.exists() and rep.exists():
        qdstrm.unlink()
    capture_clock_reports(ncu, python, out, commands)
    finish(out, ncu, nsys, commands, args.tar)


def capture_clock_reports(ncu: Path, python: str, out: Path, commands: dict[str, list[str]]) -> None:
    """Step 4: the same workload with free clocks and caches, and with ncu's own defaults."""
    nvtx = [
        str(ncu),
        "--nvtx",
        "--nvtx-include",
        "nsprof@nsprof/",
        "--nvtx-include",
        "startend",
        "--metrics",
        METRICS,
    ]
    runs = {"clock_none": ["--clock-control", "none", "--cache-control", "none"], "clock_default": []}
    for name, flags in runs.items():
        rep = out / f"fixture_{name}.ncu-rep"
        cmd = nvtx + flags + ["-f", "-o", str(rep.with_suffix("")), python, str(WORKLOAD)]
        commands[f"ncu_{name}"] = cmd
        run(cmd, out / f"ncu_{name}.log")
    csv_cmd = [str(ncu), "--import", str(out / "fixture_clock_none.ncu-rep"), "--csv", "--page", "raw"]
    commands["csv_clock_none_raw"] = csv_cmd
    with open(out / "fixture_clock_none_raw.csv", "w") as handle:
        subprocess.run(csv_cmd, stdout=handle, stderr=subprocess.STDOUT)


def capture_timer_lines(python: str, out: Path, commands: dict[str, list[str]]) -> None:
    """validate with the plain and interleaved timers; each timer session's timers.jsonl kept as
    timers<i>.jsonl (validate's folder name for it: i in the order it runs its timer sessions).
    A failed validate ends the script, its log and work folder kept."""
    work = out.resolve() / "work"
    # run from the project's root with the target named relative to it: the save records the
    # target as given, and a fixture holds no path of the machine it was captured on
    target = f"{SOFTMAX.relative_to(ROOT)}:space"
    cmd = [python, "-m", "nsprof", "validate", target, "--timers",
           "graph,interleaved", "--no-external", "--truth", "nsys", "--mode", "graph",
           "--work-dir", str(work), "--save", str(out.resolve() / "validate_timers.json")]  # fmt: skip
    commands["validate_timers"] = cmd
    if run(cmd, out / "validate_timers.log", cwd=ROOT) != 0:
        sys.exit(f"validate failed: its log and work folder are kept in {out}")
    for lines in sorted(work.rglob("timers.jsonl")):
        shutil.copyfile(lines, out / f"{lines.parent.name}.jsonl")
    shutil.rmtree(work)


def capture_l2_reports(python: str, out: Path, commands: dict[str, list[str]]) -> None:
    """validate --l2-check; the L2 check's two ncu reports and the saved run kept. A failed validate
    ends the script, its log and work folder kept."""
    work = out.resolve() / "work"
    cmd = [python, "-m", "nsprof", "validate", "examples/seed_gemm.py:space", "--timers", "cupti", "--no-external",
           "--truth", "ncu", "--mode", "graph", "--reps", "3", "--no-repeat", "--l2-check",
           "--work-dir", str(work), "--save", str(out.resolve() / "validate_l2.json")]  # fmt: skip
    commands["validate_l2"] = cmd
    if run(cmd, out / "validate_l2.log", cwd=ROOT) != 0:
        sys.exit(f"validate failed: its log and work folder are kept in {out}")
    for name in ("ncu", "flushed"):
        (report,) = sorted((work / f"l2_{name}").rglob("*.ncu-rep"))
        shutil.copyfile(report, out / f"fixture_l2_{name}.ncu-rep")
    shutil.rmtree(work)


def finish(
    out: Path,
    ncu: Path,
    nsys: Path,
    commands: dict[str, list[str]],
    tar: Path | None,
    record: str = "capture.json",
) -> None:
    smi = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    import torch

    info = {
        "captured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": smi,
        "ncu": {"path": str(ncu), "version": tool_version(ncu)},
        "nsys": {"path": str(nsys), "version": tool_version(nsys)},
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "commands": {k: [Path(c).name if c.startswith("/") else c for c in v] for k, v in commands.items()},
    }
    try:
        import tilelang

        info["tilelang"] = tilelang.__version__
    except ImportError as exc:
        info["tilelang"] = f"not importable: {exc}"
    (out / record).write_text(json.dumps(info, indent=2) + "\n")
    for f in sorted(out.iterdir()):
        print(f"{f.stat().st_size:>10}  {f.name}")
    if tar:
        with tarfile.open(tar, "w:gz") as packed:
            packed.add(out, arcname=out.name)
    shutil.rmtree(out / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
