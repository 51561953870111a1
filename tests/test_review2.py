"""Review 2 of the shapes and cost merges: defects found, as failing tests."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

from nsprof.drivers import registry  # noqa: E402

STANDINS = Path(__file__).parent / "standins.py"

TEMPLATE = """
import nsprof.space
SHAPES = {shapes}
def build(config, shape):
    return lambda: None
configs = [{{"i": c, "ns_shapes": {ns}[c]}} for c in range(2)]
space = nsprof.space.Space(configs=configs, shapes=SHAPES, build=build, device="cpu")
"""


@pytest.fixture
def seam(tmp_path, monkeypatch):
    registry.register("seam", StatusDriver)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    yield
    registry.unregister("seam")


def _target(tmp_path, shapes, ns, name="t.py"):
    path = tmp_path / name
    path.write_text(TEMPLATE.format(shapes=shapes, ns=ns))
    return str(path) + ":space"


def _settings(tmp_path, **kwargs):
    from nsprof.tune import TuneSettings

    return TuneSettings(**{"backend": "seam", "mode": "direct", "reps": 3, "timeout_s": 30,
                           "store": tmp_path / "results.sqlite", "work_dir": tmp_path / "work",
                           "tuner_pick": False, "feed_back": False, **kwargs})


def test_two_shapes_with_the_same_json_keep_their_own_numbers(seam, tmp_path):
    # [1, 2] and (1, 2) (or two equal shapes) have one shape_json: the store mixes their rows
    target = _target(tmp_path, "[[1, 2], (1, 2)]", "[[1000.0, 3000.0], [2000.0, 500.0]]")
    from nsprof.tune import tune

    result = tune(target, _settings(tmp_path))
    got = {r.shape: dict(zip(r.table["config_id"], r.table["value_ns"])) for r in result.shapes}
    assert got == {0: {0: 1000.0, 1: 2000.0}, 1: {0: 3000.0, 1: 500.0}}


EXITS = """
import sys
import nsprof.space
space = nsprof.space.Space(configs=[{"i": 0}], build=lambda c: (lambda: None), device="cpu")
if "nsprof.worker.program" in sys.modules:
    print("the license server refused this host", file=sys.stderr)
    sys.exit(3)
"""


def test_a_worker_that_cannot_start_is_not_explained_by_nsprofs_own_phases_line(seam, tmp_path):
    # _Timing.add writes '==NSPROF== phases: ...' into the part's log before _start_failure reads
    # the log's last line as the reason
    from nsprof.errors import NsprofError
    from nsprof.session import run_session
    from nsprof.settings import ProfileSettings

    (tmp_path / "exits.py").write_text(EXITS)
    settings = ProfileSettings(backend="seam", modes=("direct",), reps=1, warmup=0, timeout_s=30,
                               work_dir=tmp_path / "w")
    with pytest.raises(NsprofError) as caught:
        run_session(str(tmp_path / "exits.py") + ":space", 1, settings)
    assert "worker exited with status 3" in str(caught.value)
    assert "phases:" not in str(caught.value)


def test_store_export_of_a_target_without_shapes_keeps_its_column_positions(tmp_path):
    # the tidy table puts `shape` last "so that old column positions stay"; the store's export
    # inserts shape_json and shape between tool_version and kernel
    from nsprof.store import MeasurementKey, ResultStore

    key = MeasurementKey(fingerprint="f", config_id=0, config_json="{}", gpu="g", backend="nsys", mode="direct",
                         clock_control="none", cache_control="none", tool_version="1")
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add(store.start_run(target="t"), key, [{"kernel": "k", "rep": 0, "duration_ns": 5.0}])
        store.export(tmp_path / "rows.csv")
    header = (tmp_path / "rows.csv").read_text().splitlines()[0].split(",")
    before = ["run_id", "fingerprint", "config_id", "config_json", "gpu", "backend", "mode", "clock_control",
              "cache_control", "tool_version", "kernel", "rep", "duration_ns", "cycles", "clock_hz", "graph_node",
              "error"]
    assert header[:len(before)] == before
