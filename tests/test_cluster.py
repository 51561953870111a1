"""nsprof.cluster on a real Dask LocalCluster (worker processes, spawned), with the stand-in profiler
of tests/standins.py: its worker is a real child process of each Dask worker, holding that worker's
GPU lock. CPU only: the two "GPUs" are the workers' CUDA_VISIBLE_DEVICES 0 and 1.

One cluster serves the module (a start costs a few seconds); the test that kills a Dask worker
runs last, and the cluster's Nanny starts a new one in its place.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.xdist_group(
    "cluster"
)  # one worker: the module's LocalCluster (`client`) started once

sys.path.insert(0, str(Path(__file__).parent))  # the workers import standins (spawn passes sys.path on)

from standins import NamedGpus, StatusDriver  # noqa: E402

from nsprof.drivers import registry  # noqa: E402
from nsprof.errors import NsprofError  # noqa: E402
from nsprof.measure import GroundTruth, Request  # noqa: E402
from nsprof.settings import ClusterSettings, ProfileSettings, TuneSettings  # noqa: E402

BACKEND = "dask_standin"
DEVICES = ClusterSettings(devices=(0, 1))

# Config 0 (the calibration config) is 10% slower on "GPU" 1: the stand-in reads the worker's
# CUDA_VISIBLE_DEVICES when it reads its report there (the config's "ns_on": the config itself is the
# same on every worker, as the worker checks). Each launch leaves a mark
# naming its config, its GPU and its Dask worker's pid (the worker's parent), and sleeps a little
# so that batches overlap and a worker can be killed in the middle of one.
TARGET = """
import os, pathlib, time
import nsprof.space

MARKS = pathlib.Path(__file__).with_name("marks")
GPU = os.environ.get("CUDA_VISIBLE_DEVICES", "0")
SLEEP = float(os.environ.get("STANDIN_SLEEP_S", "0.05"))
configs = [{"ns": 1000.0, "ns_on": {"1": 1100.0}}] + [{"ns": 2000.0 + 100 * i} for i in range(1, N)]

def build(config):
    index = configs.index(config)
    def launch():
        MARKS.mkdir(exist_ok=True)
        (MARKS / f"{index}.{GPU}.{os.getppid()}.{time.monotonic_ns()}").write_text("")
        time.sleep(SLEEP)
    return launch

space = nsprof.space.Space(configs=configs, build=build, device="cpu")
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from nsprof import cluster

    locks = tmp_path_factory.mktemp("gpu-locks")
    saved = os.environ.get("NSPROF_LOCK_DIR")
    os.environ["NSPROF_LOCK_DIR"] = str(locks)  # the workers' GPU locks: never the machine's
    try:
        yield cluster.connect(DEVICES)
    finally:
        cluster.close()
        if saved is None:
            os.environ.pop("NSPROF_LOCK_DIR", None)
        else:
            os.environ["NSPROF_LOCK_DIR"] = saved


@pytest.fixture
def target(tmp_path, client, monkeypatch):
    registry.register(BACKEND, StatusDriver)
    path = tmp_path / "space_target.py"
    path.write_text(TARGET.replace("range(1, N)", "range(1, 10)"))
    yield str(path) + ":space"
    registry.unregister(BACKEND)


def _settings(tmp_path, **kwargs) -> ProfileSettings:
    return ProfileSettings(
        backend=BACKEND,
        modes=("direct",),
        reps=2,
        warmup=0,
        timeout_s=60,
        work_dir=tmp_path / "work",
        **kwargs,
    )


def _marks(tmp_path) -> list[tuple[int, str, int]]:
    """(config, gpu, Dask worker pid) of every launch so far."""
    out = []
    for mark in (tmp_path / "marks").glob("*"):
        config, gpu, pid, _ = mark.name.split(".")
        out.append((int(config), gpu, int(pid)))
    return out


def test_batches_over_two_workers_merge_into_each_config_once(target, tmp_path, capsys):
    from nsprof.cluster import Sharded
    from nsprof.profile import config_summary

    handed, progress = [], []
    backend = Sharded(GroundTruth(_settings(tmp_path)), ClusterSettings(devices=(0, 1), batch_size=3))
    measured = backend.measure(
        Request(target, range(10), 10),
        on_rows=handed.append,
        on_progress=lambda event, config_id, detail: progress.append((event, config_id)),
    )
    assert measured.failures == {}
    # every config exactly once, with its own rows: 2 reps, its own duration
    summary = config_summary(measured.frame).set_index("config_id")
    assert sorted(summary.index) == list(range(10))
    assert (summary["reps"] == 2).all()
    for config_id in range(1, 10):
        assert summary.loc[config_id, "median_ns"] == 2000.0 + 100 * config_id
    handed_ids = [int(c) for frame in handed for c in frame["config_id"].unique()]
    assert sorted(handed_ids) == list(range(10))  # on_rows: each config once, as its batch came back
    assert sorted(c for event, c in progress if event == "done") == list(range(10))  # one bar, counted once
    # Both GPUs measured; each batch stayed on one worker; the calibration config ran on both.
    marks = _marks(tmp_path)
    assert {gpu for _, gpu, _ in marks} == {"0", "1"}
    assert {gpu for config, gpu, _ in marks if config == 0} == {"0", "1"}
    assert len(measured.notes) == 1 and "calibration: config 0" in measured.notes[0]
    assert "differ by 10.0%" in measured.notes[0]
    assert "differ by 10.0%" in capsys.readouterr().err
    # Each batch had its own session folder.
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["batch0", "batch1", "batch2", "batch3"]


def test_the_store_is_written_by_the_client_alone(target, tmp_path, client):
    from nsprof.store import ResultStore
    from nsprof.tune import tune

    def guard():  # in each worker: opening a results store is recorded, and fails
        import nsprof.store

        def refuse(self, *args, **kwargs):
            nsprof.store.OPENED_ON_A_WORKER = True
            raise RuntimeError("a Dask worker opened the results store")

        nsprof.store.OPENED_ON_A_WORKER = False
        nsprof.store.ResultStore.__init__ = refuse

    def opened():
        import nsprof.store

        return getattr(nsprof.store, "OPENED_ON_A_WORKER", None)

    client.run(guard)
    store = tmp_path / "results.sqlite"
    ranked = tune(
        target,
        TuneSettings(
            backend=BACKEND,
            mode="direct",
            reps=2,
            timeout_s=60,
            store=store,
            work_dir=tmp_path / "tune",
            feed_back=False,
            tuner_pick=False,
            cluster=DEVICES,
        ),
    )
    assert set(client.run(opened).values()) == {False}
    assert ranked.ranking.best_config_id == 0
    assert list(ranked.ranking.table["config_id"])[1:] == list(range(1, 10))
    with ResultStore(store) as results:
        runs, rows = results.runs(), results.frame()
    assert len(runs) == 1 and runs.iloc[0]["status"] == "ok"
    assert sorted(rows["config_id"].unique()) == list(range(10))
    assert len(rows) == 10 * 2  # each config's reps once: the calibration copies were not stored
    # --resume finds everything in the store: nothing goes to the cluster
    before = len(_marks(tmp_path))
    again = tune(
        target,
        TuneSettings(
            backend=BACKEND,
            mode="direct",
            reps=2,
            timeout_s=60,
            store=store,
            resume=True,
            feed_back=False,
            tuner_pick=False,
            cluster=DEVICES,
        ),
    )
    assert again.ranking.best_config_id == 0 and len(_marks(tmp_path)) == before


SHAPED = """
import os, pathlib
import nsprof.space

MARKS = pathlib.Path(__file__).with_name("marks")
GPU = os.environ.get("CUDA_VISIBLE_DEVICES", "0")
NS = {ns!r}
configs = [{{"i": c, "ns_shapes": [NS[s][c] for s in range(3)]}} for c in range(3)]

def build(config, shape):
    def launch():
        MARKS.mkdir(exist_ok=True)
        (MARKS / f"{{config['i']}}.{{GPU}}.{{shape}}.{{os.getpid()}}").write_text("")
    return launch

space = nsprof.space.Space(configs=configs, shapes=[0, 1, 2], build=build, device="cpu")
"""


def test_a_target_with_shapes_is_spread_over_the_workers_point_by_point(tmp_path, client):
    import sqlite3

    from nsprof.tune import tune

    ns = {0: [3000.0, 1000.0, 2000.0], 1: [900.0, 4000.0, 500.0], 2: [700.0, 800.0, 7000.0]}
    registry.register(BACKEND, StatusDriver)
    try:
        (tmp_path / "shaped.py").write_text(SHAPED.format(ns=ns))
        result = tune(
            f"{tmp_path / 'shaped.py'}:space",
            TuneSettings(
                backend=BACKEND,
                mode="direct",
                reps=2,
                timeout_s=60,
                store=tmp_path / "results.sqlite",
                work_dir=tmp_path / "tune",
                feed_back=False,
                tuner_pick=False,
                cluster=ClusterSettings(devices=(0, 1), batch_size=4),
            ),
        )
    finally:
        registry.unregister(BACKEND)
    for ranked in result.shapes:
        order = sorted(range(3), key=lambda c: ns[ranked.shape][c])
        assert list(ranked.ranking.table["config_id"]) == order
        assert list(ranked.ranking.table["value_ns"]) == [ns[ranked.shape][c] for c in order]
    marks = [name.split(".") for name in os.listdir(tmp_path / "marks")]
    assert {gpu for _, gpu, _, _ in marks} == {"0", "1"}  # both workers measured
    assert {(int(s), int(c)) for c, _, s, _ in marks} == {(s, c) for s in range(3) for c in range(3)}
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        rows = db.execute(
            "SELECT shape, config_id, COUNT(*), MIN(duration_ns) FROM measurements GROUP BY shape, config_id"
        ).fetchall()
    # each point once, its 2 reps, under its own shape (the calibration copy was not stored)
    assert sorted(rows) == [(s, c, 2, ns[s][c]) for s in range(3) for c in range(3)]


def test_the_calibration_note_names_the_config_and_shape_of_its_point():
    """A resume of a target with shapes may calibrate on a point of another shape than the first: the note
    names its config and shape, never the point id as a config id."""
    from nsprof.cluster_batch import calibration_note
    from nsprof.schema import Points

    medians = {"gpu-a": 1000.0, "gpu-b": 1100.0}
    note = calibration_note(3, Points(n_configs=3, n_shapes=2), medians, "H200")
    assert note.startswith("calibration: config 0 at shape 1 measured on each of 2 GPUs (H200)"), note
    assert "differ by 10.0%" in note
    assert calibration_note(3, Points(n_configs=5), medians, "").startswith("calibration: config 3 measured")


def test_gpus_of_two_models_are_never_ranked_together(target, tmp_path, client):
    from nsprof.cluster import Sharded, cluster_gpu

    handed = []
    backend = Sharded(
        NamedGpus(GroundTruth(_settings(tmp_path))), ClusterSettings(devices=(0, 1), batch_size=5)
    )
    with pytest.raises(NsprofError, match="different GPU models .*never ranks") as raised:
        backend.measure(Request(target, range(10), 10), on_rows=handed.append)
    assert "\n" not in str(raised.value)
    assert "NVIDIA H200" in str(raised.value) and "A100" in str(raised.value)
    assert len(handed) <= 1  # at most the first model's batch was handed on, never both models'

    # Workers whose GPUs nvidia-smi names differently are refused before anything runs.
    def two_models():
        import os

        import nsprof.host.gpu as gpu

        gpu.which_gpu_saved = gpu.which_gpu
        name = {"0": "NVIDIA H200", "1": "NVIDIA L40S"}[os.environ["CUDA_VISIBLE_DEVICES"]]
        gpu.which_gpu = lambda device=0, environ=None: gpu.Gpu(0, f"GPU-{name[-4:]}", name)

    def restore():
        import nsprof.host.gpu as gpu

        gpu.which_gpu = gpu.which_gpu_saved

    client.run(two_models)
    try:
        with pytest.raises(NsprofError, match="L40S"):
            cluster_gpu(DEVICES)
    finally:
        client.run(restore)
    assert cluster_gpu(DEVICES).name == ""  # the stand-in workers again: no nvidia-smi here


def test_a_batch_whose_session_fails_leaves_the_other_batches_measured(tmp_path, client):
    """ "GPU" 1 is broken: the session's worker dies there before its first config (the batch's
    session raises). The batches measured on GPU 0 are kept, and the broken batches' configs are
    failures of kind not_run (a resume measures them), not an error that throws every batch away."""
    from nsprof.cluster import Sharded

    registry.register(BACKEND, StatusDriver)
    path = tmp_path / "broken_target.py"
    # the session's worker (python -m nsprof.worker), never the Dask worker itself
    broken = (
        "import sys\nif GPU == '1' and getattr(sys.modules['__main__'].__spec__, 'name', '') == "
        "'nsprof.worker.__main__':\n    os._exit(7)\n"
    )
    path.write_text(TARGET.replace("range(1, N)", "range(1, 10)") + broken)
    try:
        backend = Sharded(
            GroundTruth(_settings(tmp_path)), ClusterSettings(devices=(0, 1), batch_size=3, calibrate=False)
        )
        measured = backend.measure(Request(f"{path}:space", range(10), 10), on_rows=lambda f: None)
    finally:
        registry.unregister(BACKEND)
    on_gpu0 = {config for config, gpu, _ in _marks(tmp_path) if gpu == "0"}
    assert on_gpu0 and measured.failures, "batches ran on both GPUs"
    frame = measured.frame[measured.frame["error"].isna()]
    assert frame.groupby("config_id").size().to_dict() == {c: 2 for c in sorted(on_gpu0)}
    assert set(measured.failures) == set(range(10)) - on_gpu0
    for why in measured.failures.values():
        assert why.kind == "not_run" and "status 7" in str(why), why


def test_a_dask_worker_killed_mid_batch_loses_nothing(target, tmp_path, client, monkeypatch):
    """SIGKILL the Dask worker process running a batch while its session measures: Dask runs the
    batch again (on another worker, or on the Nanny's new one); every config is measured once."""
    from nsprof.cluster import Sharded, worker_gpus

    client.run(os.environ.__setitem__, "STANDIN_SLEEP_S", "0.3")  # each launch 0.3 s: time to kill one
    worker_pids = {info["pid"] for info in worker_gpus(client).values()}
    backend = Sharded(GroundTruth(_settings(tmp_path)), ClusterSettings(devices=(0, 1), batch_size=5))
    out: dict = {}

    def measure():
        try:
            out["measured"] = backend.measure(Request(target, range(10), 10), on_rows=lambda f: None)
        except BaseException as exc:  # noqa: BLE001 - the test thread reports it
            out["error"] = exc

    thread = threading.Thread(target=measure)
    thread.start()
    deadline = time.monotonic() + 120
    while not _marks(tmp_path):
        assert time.monotonic() < deadline, "no batch started"
        time.sleep(0.02)
    _, _, victim = _marks(tmp_path)[0]
    assert victim in worker_pids  # the launch's grandparent is a Dask worker process
    os.kill(victim, signal.SIGKILL)
    thread.join(180)
    client.run(os.environ.__setitem__, "STANDIN_SLEEP_S", "0.05")
    assert not thread.is_alive()
    assert "error" not in out, out.get("error")
    measured = out["measured"]
    assert measured.failures == {}
    frame = measured.frame
    counts = frame.groupby("config_id").size().to_dict()
    assert counts == {c: 2 for c in range(10)}  # each config's two reps, once
    for config_id in range(1, 10):
        assert set(frame[frame["config_id"] == config_id]["duration_ns"]) == {2000.0 + 100 * config_id}
    # The killed worker's batch ran again in another process
    killed_configs = {config for config, _, pid in _marks(tmp_path) if pid == victim}
    assert killed_configs
    assert all(
        any(config == c and pid != victim for c, _, pid in _marks(tmp_path)) for config in killed_configs
    )


ROOT = Path(__file__).resolve().parents[1]
CLI = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import standins; standins.install(); "
    "from nsprof.cli import main; sys.argv[0] = 'nsprof'; main()"
)


def _nsprof(*args, cwd, env=None):
    import subprocess

    return subprocess.run(
        [sys.executable, "-c", CLI, str(Path(__file__).parent), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--devices", "0,x"], "--devices takes GPU indices"),
        (["--devices", "0", "--scheduler", "tcp://127.0.0.1:1"], "either --devices or --scheduler, not both"),
        (["--scheduler", "localhost"], "--scheduler takes an address"),
        (["--verbose"], "--verbose shows the Dask workers' state"),
        (["--devices", "0,0"], "names a GPU twice"),
    ],
)
def test_bad_cluster_options_are_one_line(tmp_path, args, message):
    from click.testing import CliRunner

    from nsprof.cli import cli

    (tmp_path / "t.py").write_text(TARGET.replace("range(1, N)", "range(1, 3)"))
    result = CliRunner().invoke(
        cli, ["tune", str(tmp_path / "t.py:space"), "--backend", "graph", "--no-store", *args]
    )
    assert result.exit_code == 2 and message in result.output, result.output


def test_tune_devices_through_the_cli(tmp_path):
    """`nsprof tune --devices 0,1 --verbose` end to end (its own LocalCluster, in a child nsprof):
    one ranking, per-worker state, the calibration line, a store written."""
    (tmp_path / "t.py").write_text(TARGET.replace("range(1, N)", "range(1, 6)"))
    done = _nsprof(
        "tune",
        "t.py:space",
        "--backend",
        "nsys",
        "--mode",
        "direct",
        "--reps",
        "2",
        "--devices",
        "0,1",
        "--verbose",
        "--json",
        "--no-feed-back",
        cwd=tmp_path,
        env={"NSPROF_LOCK_DIR": str(tmp_path / "locks")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    document = json.loads(done.stdout)
    assert document["best_config_id"] == 0
    assert [row["config_id"] for row in document["ranked"]] == list(range(6))
    assert "worker gpu0" in done.stderr and "worker gpu1" in done.stderr
    assert "calibration: config 0" in done.stderr and "differ by 10.0%" in done.stderr
    assert (tmp_path / ".nsprof" / "results.sqlite").exists()
    assert {gpu for _, gpu, _ in _marks(tmp_path)} == {"0", "1"}
