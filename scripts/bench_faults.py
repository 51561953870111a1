"""Fault-injection figures on a GPU: faults injected, configs measured, measurements lost.

    source .device/setup.sh && python3 scripts/bench_faults.py --out benchmarks/results/bench_faults.json

For ncu and nsys each:
  - tests/targets/faulty_gpu.py:space: [ok, illegal address, hang, out of memory, ok];
  - tests/targets/faulty_gpu.py:healthy (4 healthy configs) with the profiler process
    SIGKILLed while the worker runs config 2.
A measurement is one (config, mode, rep) of a config that did not itself fault; lost =
expected measurements of those configs minus the ones in nsprof's table (must be 0). When
the profiler is killed, the config it was running (if any) is the fault's victim, not a loss.

And nsprof itself stopped from outside: `nsprof tune ...:healthy` sent SIGTERM, or SIGKILL,
while its worker runs config 2. Lost = configs the worker finished (its status file says
`done`) that the results store lacks whole (SIGTERM: must be 0; SIGKILL stores only what
was written before). Left = processes of that run still alive after nsprof exited (must be
none within a few seconds), and whether the GPU lock was free again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from targets.faulty_gpu import kill_profiler_at  # noqa: E402

from nsprof.profile import profile_result  # noqa: E402
from nsprof.settings import ProfileSettings  # noqa: E402

TARGETS = ROOT / "tests" / "targets" / "faulty_gpu.py"
REPS = 3
MODES = ("direct", "graph")


def one(backend: str, space: str, faulty: set[int], kill: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="nsprof-bench-faults-") as work:
        work_dir = Path(work)
        killed: list[int] = []
        thread = None
        if kill:
            thread = threading.Thread(
                target=kill_profiler_at, args=(work_dir, backend, 2, killed), daemon=True
            )
            thread.start()
        start = time.perf_counter()
        result = profile_result(
            f"{TARGETS}:{space}",
            ProfileSettings(
                backend=backend, modes=MODES, reps=REPS, warmup=1, timeout_s=20, work_dir=work_dir
            ),
        )
        wall = time.perf_counter() - start
        if thread is not None:
            thread.join(timeout=5)
        # what the killed profiler left holding the GPU lock, which nsprof killed (its log notes)
        left = [
            line.split("==NSPROF== ", 1)[1][:160]
            for log in sorted(work_dir.glob("part*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if "left holding the GPU lock" in line
        ]
    n = len(result.configs)
    failures = result.failures
    rows = result.frame[result.frame["error"].isna()]
    got = {(int(c), m, int(r)) for c, m, r in zip(rows["config_id"], rows["mode"], rows["rep"])}
    # The config the profiler was killed on (if the kill caught it running) is the fault's own victim.
    victims = set(failures) & {2} if kill else set()
    healthy = [c for c in range(n) if c not in faulty | victims]
    expected = {(c, m, r) for c in healthy for m in MODES for r in range(REPS)}
    return {
        "backend": backend,
        "space": space,
        "profiler_killed": bool(killed) if kill else None,
        "faults_injected": len(faulty) + (1 if kill else 0),
        "configs": n,
        "configs_measured": sorted({c for c, _, _ in got}),
        "failed": {str(k): v for k, v in sorted(failures.items())},
        "measurements_expected": len(expected),
        "measurements_lost": len(expected - got),
        "wall_s": round(wall, 1),
        "killed_left_holding_lock": left,
    }


def _processes_naming(folder: Path) -> list[int]:
    """PIDs of live processes whose command line names `folder` (the profiler, the worker)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(folder).encode() in argv and state != "Z":
            pids.append(int(proc.name))
    return pids


def stopped(backend: str, signum: int) -> dict:
    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock
    from nsprof.store import ResultStore
    from nsprof.worker.protocol import parse_status

    with tempfile.TemporaryDirectory(prefix="nsprof-bench-stop-") as work:
        work_dir = Path(work)
        command = [
            sys.executable,
            "-m",
            "nsprof",
            "tune",
            f"{TARGETS}:healthy",
            "--backend",
            backend,
            "--mode",
            "graph",
            "--reps",
            str(REPS),
            "--store",
            str(work_dir / "r.sqlite"),
            "--work-dir",
            str(work_dir / "wd"),
            "--no-feed-back",
            "--no-tuner-pick",
            "--timeout",
            "60",
        ]
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        status = work_dir / "wd" / "part0.status"
        deadline = time.monotonic() + 300
        while (
            proc.poll() is None
            and not (status.exists() and "start 2\n" in status.read_text())
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        proc.send_signal(signum)
        stopped_at = time.monotonic()
        _, stderr = proc.communicate(timeout=300)
        exited_s = time.monotonic() - stopped_at
        while _processes_naming(work_dir) and time.monotonic() - stopped_at < 20:
            time.sleep(0.1)
        left = _processes_naming(work_dir)
        children_gone_s = time.monotonic() - stopped_at
        lock_free_s = None  # seconds from the signal until the GPU lock was free (None: not within 20 s)
        while lock_free_s is None and time.monotonic() - stopped_at < 20:
            try:
                with gpu_lock(0):
                    lock_free_s = round(time.monotonic() - stopped_at, 1)
            except GpuBusy:
                time.sleep(0.1)
        done = sorted(
            {
                c
                for part in (work_dir / "wd").glob("part*.status")
                for c in parse_status(part.read_text()).done
            }
        )
        with ResultStore(work_dir / "r.sqlite") as store:
            rows, runs = store.frame(), store.runs()
        whole = rows[rows["error"].isna()].groupby("config_id").size()
        stored = sorted(int(c) for c, count in whole.items() if count >= REPS)
        partial = sorted(int(c) for c, count in whole.items() if count < REPS)
    return {
        "backend": backend,
        "signal": signal.Signals(signum).name,
        "nsprof_exit": proc.returncode,
        "nsprof_exited_s": round(exited_s, 1),
        "children_gone_s": round(children_gone_s, 1),
        "processes_left": len(left),
        "lock_free_after_s": lock_free_s,
        "configs_done": done,
        "configs_stored_whole": stored,
        "configs_stored_partly": partial,
        "lost": len(set(done) - set(stored)),
        "run_status": runs["status"].tolist(),
        "last_stderr": (stderr.strip().splitlines() or [""])[-1][:200],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--backend",
        action="append",
        choices=("ncu", "nsys"),
        help="only this profiler (repeatable; default both)",
    )
    args = parser.parse_args()
    document = {
        "benchmark": "bench_faults",
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "reps": REPS,
        "modes": list(MODES),
        "results": [],
        "nsprof_stopped": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def add(key: str, row: dict) -> None:
        # Written after every step, so that a run cut short still keeps what it measured.
        document[key].append(row)
        args.out.write_text(json.dumps(document, indent=1) + "\n")
        print(json.dumps(row), flush=True)

    for backend in args.backend or ("ncu", "nsys"):
        add("results", one(backend, "space", {1, 2, 3}, kill=False))
        add("results", one(backend, "healthy", set(), kill=True))
        for signum in (signal.SIGTERM, signal.SIGKILL):
            add("nsprof_stopped", stopped(backend, signum))
    print(f"{'backend':7} {'space':8} {'faults':>6} {'measured':>14} {'lost':>5} {'wall s':>7}  failed")
    for r in document["results"]:
        print(
            f"{r['backend']:7} {r['space']:8} {r['faults_injected']:6} {str(r['configs_measured']):>14} "
            f"{r['measurements_lost']:5} {r['wall_s']:7}  {json.dumps(r['failed'])[:160]}"
        )
    print(
        f"{'backend':7} {'signal':7} {'exit':>4} {'gone s':>6} {'left':>4} {'lock s':>6} {'done':>9} {'stored':>9} "
        f"{'lost':>4}  run"
    )
    for r in document["nsprof_stopped"]:
        print(
            f"{r['backend']:7} {r['signal']:7} {r['nsprof_exit']:4} {r['children_gone_s']:6} {r['processes_left']:4} "
            f"{'HELD' if r['lock_free_after_s'] is None else r['lock_free_after_s']:>6} {str(r['configs_done']):>9} "
            f"{str(r['configs_stored_whole']):>9} {r['lost']:4}  {r['run_status']}"
        )


if __name__ == "__main__":
    main()
