"""Dask's cost on the CPU, with the stand-in profiler: per config on 2 stand-in GPUs, and `--devices 0`'s overhead.

    python3 scripts/bench_dask_standin.py --runs 3                 # writes benchmarks/results/bench_dask_standin.json
    python3 scripts/bench_dask_standin.py --only overhead --label before   # part 2 alone, kept under that label

No GPU, no ncu/nsys: tests/standins.py registers its stand-in as nsys, whose worker is nsprof's
real worker process run bare, and whose report is read back from the worker's status file.

Part 1, per config. A LocalCluster of 2 stand-in GPU workers (nsprof.cluster.connect, devices 0
and 1: the Nanny workers of `--devices 0,1`) measures a 2,000-config space (block M x N x K x
stages x warps, 5 x 5 x 4 x 5 x 4; each launch a no-op) under nsys --mode direct, 3 reps, through
nsprof.tune.stored.measure_stored: the same path as `nsprof tune --devices 0,1` up to the ranking
(store key, resume check, run record, Sharded batches, each batch's rows written as it comes back).
The ranking itself is left out: it is neither the scheduler's nor the store's cost. Two figures:

(a) scheduler: Dask's submission, scheduling, the transfer of each batch's rows and the client's
    merge of them, apart from the workers' measuring. Measured twice, two ways:
    - "no-op": the same Sharded path (submit, run_batch on a worker, profile_result, rows back,
      _Gather) with a Backend whose measure returns at once the rows the stand-in would (2,000 x 3
      rows); its whole Sharded.measure wall / 2,000;
    - "gaps": in the stand-in run, Sharded.measure's wall less the time covered by a worker
      measuring (run_batch's own span on the worker, time.time() on one host) or the client writing
      the store; what is left is time when only Dask and the client's merge were at work.
(b) store: the client's time in Stored.add (grouping the rows per config, one ResultStore.add
    transaction each), summed over the run (the batches' rows as they come and the final pass),
    / 2,000; its sqlite part (ResultStore.add) beside it. Timed by wrapping those methods in this
    process (perf_counter, ~1 µs a call), not by cProfile, which doubles pandas' cost.

Part 2, `--devices 0` overhead: `nsprof tune` of a 16-config stand-in target, whole command in a
fresh process (spawn to exit), with and without `--devices 0`; the difference is the overhead.
Where it goes: the same steps nsprof.cluster_dask takes, timed one by one in a fresh process
(import distributed, scheduler start, Nanny + worker spawn until the client is connected, the
workers' GPU query, the worker's imports of what a batch needs, close).

Each figure is given as best / median / worst of --runs runs. The machine is shared: read its load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # standins; spawned Dask workers get this sys.path too

N_CONFIGS = 2000
REPS = 3
GOAL_MS = 5.0
GOAL_OVERHEAD_S = 1.0
TARGET = """
import itertools
import nsprof.space

BLOCKS = (16, 32, 64, 128, 256)
configs = [
    {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_stages": s, "num_warps": w}
    for m, n, k, s, w in itertools.product(BLOCKS, BLOCKS, (16, 32, 64, 128), (1, 2, 3, 4, 5), (1, 2, 4, 8))
][:LIMIT]

def build(config):
    def launch():  # the stand-in's kernel: nothing to run
        pass
    return launch

space = nsprof.space.Space(configs=configs, build=build, device="cpu")
"""


def _write_target(folder: Path, limit: int) -> str:
    path = folder / f"space{limit}.py"
    path.write_text(TARGET.replace("LIMIT", str(limit)))
    return f"{path}:space"


def _timed_batch(*args, **kwargs):
    """On a worker: run_batch, with its own span (time.time(): one host, one clock)."""
    from nsprof.cluster_batch import run_batch

    started = time.time()
    result = run_batch(*args, **kwargs)
    return {**result, "span": (started, time.time())}


class _Spans:
    """Spans recorded by wrapping methods and functions in this process, undone by restore()."""

    def __init__(self) -> None:
        self.spans: dict[str, list[tuple[float, float]]] = {}
        self.undo: list = []

    def wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)
        spans = self.spans.setdefault(label, [])

        def timed(*args, **kwargs):
            started = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                spans.append((started, time.time()))

        setattr(owner, name, timed)
        self.undo.append((owner, name, original))

    def restore(self) -> None:
        for owner, name, original in reversed(self.undo):
            setattr(owner, name, original)

    def total(self, label: str) -> float:
        return sum(end - start for start, end in self.spans.get(label, []))


def _union(spans, within: tuple[float, float]) -> float:
    """The length of the union of `spans`, clipped to `within`."""
    low, high = within
    clipped = sorted((max(a, low), min(b, high)) for a, b in spans if min(b, high) > max(a, low))
    covered, end = 0.0, low
    for a, b in clipped:
        if b > end:
            covered += b - max(a, end)
            end = b
    return covered


def _batch_spans(spans: _Spans) -> None:
    """Record each batch's worker span as its result reaches the client."""
    import nsprof.cluster as cluster

    original = cluster._batch_result
    batch_spans = spans.spans.setdefault("batch", [])

    def taken(*args, **kwargs):
        result = original(*args, **kwargs)
        if "span" in result:
            batch_spans.append(tuple(result["span"]))
        return result

    cluster._batch_result = taken
    spans.undo.append((cluster, "_batch_result", original))
    spans.undo.append((cluster, "run_batch", cluster.run_batch))
    cluster.run_batch = _timed_batch


def stand_in_run(target: str, space, folder: Path, index: int, cluster_settings) -> dict:
    """One stand-in run of every config through measure_stored; its spans, per config."""
    import nsprof.cluster
    import nsprof.store
    import nsprof.tune.stored as stored
    from nsprof.settings import TuneSettings

    settings = TuneSettings(
        backend="nsys",
        mode="direct",
        reps=REPS,
        timeout_s=600,
        store=folder / f"results{index}.sqlite",
        work_dir=folder / f"work{index}",
        feed_back=False,
        tuner_pick=False,
        cluster=cluster_settings,
    )
    spans = _Spans()
    spans.wrap(stored.Stored, "add", "store")
    spans.wrap(nsprof.store.ResultStore, "add", "sqlite")
    spans.wrap(nsprof.cluster.Sharded, "measure", "cluster")
    _batch_spans(spans)
    started = time.time()
    try:
        rows, _ = stored.measure_stored(
            target, space, settings.ranked_truths[0], settings, list(range(N_CONFIGS)), None, []
        )
    finally:
        spans.restore()
    wall = time.time() - started
    assert rows["config_id"].nunique() == N_CONFIGS and rows["error"].isna().all(), "a config failed"
    (measure_span,) = spans.spans["cluster"]
    covered = _union(spans.spans["batch"] + spans.spans["store"], measure_span)
    busy = _union(spans.spans["batch"], measure_span)
    per = 1e3 / N_CONFIGS
    return {
        "wall_s": wall,
        "cluster_measure_s": measure_span[1] - measure_span[0],
        "workers_busy_s": busy,
        "batches": len(spans.spans["batch"]),
        "scheduler_gaps_ms_per_config": (measure_span[1] - measure_span[0] - covered) * per,
        "store_ms_per_config": spans.total("store") * per,
        "sqlite_ms_per_config": spans.total("sqlite") * per,
    }


def _no_op_backend():
    """The stand-in's GroundTruth, but measure() returns at once the rows the stand-in would give."""
    from nsprof.measure import GroundTruth
    from nsprof.settings import ProfileSettings

    class NoMeasure(GroundTruth):
        def in_subfolder(self, name):
            return self

        def measure(self, request, *, on_progress=None, on_rows=None):
            from nsprof.schema import make_frame
            from nsprof.session import Measured

            labels = self.labels
            frame = make_frame(
                [
                    {"source": self.name, "config_id": c, "mode": "direct", "rep": rep, "kernel": "k0"}
                    | {"duration_ns": 1000.0 + c, **labels}
                    for c in request.ids
                    for rep in range(REPS)
                ]
            )
            return Measured(frame=frame, failures={}, device=None, wall_s=0.0)

    return NoMeasure(ProfileSettings(backend="nsys", modes=("direct",), reps=REPS))


def no_op_run(target: str, cluster_settings) -> dict:
    """The Sharded path with nothing measured: its whole wall is Dask's and the client's merge."""
    from nsprof.cluster import Sharded
    from nsprof.measure import Request

    started = time.perf_counter()
    measured = Sharded(_no_op_backend(), cluster_settings).measure(
        Request(target, list(range(N_CONFIGS)), N_CONFIGS)
    )
    wall = time.perf_counter() - started
    assert measured.frame["config_id"].nunique() == N_CONFIGS
    return {"wall_s": wall, "scheduler_ms_per_config": wall * 1e3 / N_CONFIGS}


def per_config(runs: int, folder: Path) -> dict:
    """Part 1: `runs` stand-in runs and `runs` no-op runs on one 2-worker LocalCluster."""
    import standins

    from nsprof import cluster
    from nsprof.settings import ClusterSettings
    from nsprof.space import load_target

    standins.install()
    target = _write_target(folder, N_CONFIGS)
    space = load_target(target)
    settings = ClusterSettings(devices=(0, 1))
    started = time.perf_counter()
    cluster.connect(settings)
    start_s = time.perf_counter() - started
    try:
        no_op = [no_op_run(target, settings) for _ in range(runs)]
        real = [stand_in_run(target, space, folder, k, settings) for k in range(runs)]
    finally:
        cluster.close()
    return {"cluster_start_s": start_s, "no_op_runs": no_op, "stand_in_runs": real}


def _command(folder: Path, target: str, devices: bool) -> float:
    """One whole `nsprof tune` of the stand-in in a fresh process: spawn to exit, seconds."""
    args = [sys.executable, str(ROOT / "tests" / "standins.py"), "tune", target, "--backend", "nsys"]
    args += ["--mode", "direct", "--reps", str(REPS), "--no-store", "--no-feed-back", "--json"]
    args += ["--devices", "0"] if devices else []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NSPROF_LOCK_DIR": str(folder / "locks")}
    started = time.perf_counter()
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"nsprof tune failed: {done.stderr[-2000:]}")
    return wall


def overhead(runs: int, folder: Path) -> dict:
    """Part 2: whole commands with and without --devices 0 (alternating), and the phases apart."""
    target = _write_target(folder, 16)
    (folder / "locks").mkdir(exist_ok=True)
    plain, dask = [], []
    for _ in range(runs):
        plain.append(_command(folder, target, False))
        dask.append(_command(folder, target, True))
    phases = []
    for _ in range(runs):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, __file__, "--phases"], env=env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise SystemExit(f"phases failed: {done.stderr[-2000:]}")
        phases.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        "no_dask_s": plain,
        "devices_0_s": dask,
        "overhead_s": [d - p for d, p in zip(dask, plain)],
        "phases_s": phases,
    }


def _worker_imports() -> float:
    """On a worker: how long importing what a batch needs still takes there (0 once imported)."""
    started = time.perf_counter()
    import pandas  # noqa: F401

    import nsprof.profile  # noqa: F401
    import nsprof.session.run  # noqa: F401

    return time.perf_counter() - started


def phases() -> dict:
    """In a fresh process: the steps of a one-device LocalCluster (nsprof.cluster_dask), timed."""
    import standins

    from nsprof import cluster_dask

    standins.install()
    marks, last = {}, time.perf_counter()

    def mark(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        marks[name], last = now - last, now

    distributed = cluster_dask.load_dask()
    mark("import distributed (client)")
    client, local = cluster_dask._start_local(distributed, (0,))
    mark("scheduler start, Nanny + worker spawn, client connect")
    cluster_dask.checked_worker_gpus(client)
    mark("the workers' GPU query")
    (left,) = client.run(_worker_imports).values()
    marks["a batch's imports, still to do in the worker"] = left
    mark("a batch's imports in the worker (wall)")
    client.close()
    local.close()
    mark("close")
    return marks


def spread(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"best": ordered[0], "median": statistics.median(ordered), "worst": ordered[-1]}


def summary(document: dict) -> list[str]:
    """The figures, as best / median / worst, and each goal met or missed."""
    lines = []
    part = document.get("per_config")
    if part:
        no_op = spread([r["scheduler_ms_per_config"] for r in part["no_op_runs"]])
        gaps = spread([r["scheduler_gaps_ms_per_config"] for r in part["stand_in_runs"]])
        store = spread([r["store_ms_per_config"] for r in part["stand_in_runs"]])
        sqlite = spread([r["sqlite_ms_per_config"] for r in part["stand_in_runs"]])
        part["figures_ms_per_config"] = {"scheduler_no_op": no_op, "scheduler_gaps": gaps, "store": store}
        part["figures_ms_per_config"]["store_sqlite_part"] = sqlite
        for name, figure in part["figures_ms_per_config"].items():
            lines.append(
                f"{name:<20} ms/config best {figure['best']:.3f} median {figure['median']:.3f} "
                f"worst {figure['worst']:.3f}"
            )
        worst = max(no_op["median"], gaps["median"]) + store["median"]
        verdict = "met" if worst <= GOAL_MS else "MISSED"
        part["goal"] = f"scheduler + store ≤ {GOAL_MS} ms per config: {verdict} ({worst:.2f} ms, medians)"
        lines.append(part["goal"])
    for label, run in (document.get("overhead") or {}).items():
        figure = spread(run["overhead_s"])
        run["figures_s"] = {"no_dask": spread(run["no_dask_s"]), "devices_0": spread(run["devices_0_s"])}
        run["figures_s"]["overhead"] = figure
        verdict = "met" if figure["median"] <= GOAL_OVERHEAD_S else "MISSED"
        run["goal"] = (
            f"--devices 0 overhead ≤ {GOAL_OVERHEAD_S} s: {verdict} ({figure['median']:.2f} s median)"
        )
        lines.append(
            f"overhead [{label}] best {figure['best']:.2f} s median {figure['median']:.2f} s "
            f"worst {figure['worst']:.2f} s: {run['goal']}"
        )
    return lines


def _machine() -> dict:
    import dask
    import distributed

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "python": platform.python_version(),
        "dask": dask.__version__,
        "distributed": distributed.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=("per-config", "overhead"))
    parser.add_argument("--label", default="now", help="part 2's figures are kept under this label")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_dask_standin.json"
    )
    parser.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)  # part 2's child
    args = parser.parse_args()
    if args.phases:
        print(json.dumps(phases()))
        return
    document = json.loads(args.out.read_text()) if args.out.exists() else {}
    document.update(date=datetime.datetime.now().isoformat(timespec="seconds"), runs=args.runs)
    document["machine"] = _machine()
    document["configs"], document["reps"] = N_CONFIGS, REPS
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-dask-standin-") as folder:
        os.environ["NSPROF_LOCK_DIR"] = str(Path(folder) / "locks")  # never the machine's GPU locks
        if args.only != "overhead":
            document["per_config"] = per_config(args.runs, Path(folder))
        if args.only != "per-config":
            document.setdefault("overhead", {})[args.label] = overhead(args.runs, Path(folder))
    document["bench_wall_s"] = time.perf_counter() - started
    lines = summary(document)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out} ({document['bench_wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
