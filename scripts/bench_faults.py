"""Fault-injection figures on a GPU: faults injected, configs measured, measurements lost.

    source .device/setup.sh && python3 scripts/bench_faults.py --out benchmarks/results/bench_faults.json

For ncu and nsys each:
  - tests/targets/faulty_gpu.py:space: [ok, illegal address, hang, out of memory, ok];
  - tests/targets/faulty_gpu.py:healthy (4 healthy configs) with the profiler process
    SIGKILLed while the worker runs config 2.
A measurement is one (config, mode, rep) of a config that did not itself fault; lost =
expected measurements of those configs minus the ones in nsprof's table (must be 0). When
the profiler is killed, the config it was running (if any) is the fault's victim, not a loss.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from targets.faulty_gpu import kill_profiler_at  # noqa: E402

from nsprof.drivers.base import ProfileSettings  # noqa: E402
from nsprof.profile import profile  # noqa: E402

TARGETS = ROOT / "tests" / "targets" / "faulty_gpu.py"
REPS = 3
MODES = ("direct", "graph")


def one(backend: str, space: str, faulty: set[int], kill: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="nsprof-bench-faults-") as work:
        work_dir = Path(work)
        killed: list[int] = []
        thread = None
        if kill:
            thread = threading.Thread(target=kill_profiler_at, args=(work_dir, backend, 2, killed), daemon=True)
            thread.start()
        start = time.perf_counter()
        frame = profile(f"{TARGETS}:{space}", ProfileSettings(backend=backend, modes=MODES, reps=REPS, warmup=1,
                                                              timeout_s=20, work_dir=work_dir))
        wall = time.perf_counter() - start
        if thread is not None:
            thread.join(timeout=5)
    n = len(frame.attrs["configs"])
    failures = frame.attrs["failures"]
    rows = frame[frame["error"].isna()]
    got = {(int(c), m, int(r)) for c, m, r in zip(rows["config_id"], rows["mode"], rows["rep"])}
    # The config the profiler was killed on (if the kill caught it running) is the fault's own victim.
    victims = set(failures) & {2} if kill else set()
    healthy = [c for c in range(n) if c not in faulty | victims]
    expected = {(c, m, r) for c in healthy for m in MODES for r in range(REPS)}
    return {
        "backend": backend, "space": space, "profiler_killed": bool(killed) if kill else None,
        "faults_injected": len(faulty) + (1 if kill else 0), "configs": n,
        "configs_measured": sorted({c for c, _, _ in got}), "failed": {str(k): v for k, v in sorted(failures.items())},
        "measurements_expected": len(expected), "measurements_lost": len(expected - got), "wall_s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = []
    for backend in ("ncu", "nsys"):
        results.append(one(backend, "space", {1, 2, 3}, kill=False))
        results.append(one(backend, "healthy", set(), kill=True))
    document = {"benchmark": "bench_faults", "date": datetime.date.today().isoformat(), "host": platform.node(),
                "python": platform.python_version(), "reps": REPS, "modes": list(MODES), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{'backend':7} {'space':8} {'faults':>6} {'measured':>14} {'lost':>5} {'wall s':>7}  failed")
    for r in results:
        print(f"{r['backend']:7} {r['space']:8} {r['faults_injected']:6} {str(r['configs_measured']):>14} "
              f"{r['measurements_lost']:5} {r['wall_s']:7}  {json.dumps(r['failed'])[:160]}")


if __name__ == "__main__":
    main()
