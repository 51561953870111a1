"""Regressions found in review of shapes and phases: each failed before its fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_nsprof

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

from nsprof.drivers import registry  # noqa: E402

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

    return TuneSettings(
        **{
            "backend": "seam",
            "mode": "direct",
            "reps": 3,
            "timeout_s": 30,
            "store": tmp_path / "results.sqlite",
            "work_dir": tmp_path / "work",
            "tuner_pick": False,
            "feed_back": False,
            **kwargs,
        }
    )


def test_two_shapes_with_the_same_json_are_refused_in_one_line(seam, tmp_path):
    # [1, 2] and (1, 2) (or two equal shapes) have one shape_json, the store's key of a shape: their
    # rows would be mixed, so such a shape list is refused before anything is measured
    target = _target(tmp_path, "[[1, 2], (1, 2)]", "[[1000.0, 3000.0], [2000.0, 500.0]]")
    done = run_nsprof(
        "tune", target, "--backend", "nsys", "--no-store", cwd=tmp_path, standins=True, in_process=True
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "shapes 0 and 1 are the same shape ([1,2])" in line


EXITS = """
import sys
import nsprof.space
space = nsprof.space.Space(configs=[{"i": 0}], build=lambda c: (lambda: None), device="cpu")
if "nsprof.worker.program" in sys.modules:
    print("the license server refused this host", file=sys.stderr)
    sys.exit(3)
"""


def test_a_worker_that_cannot_start_is_not_explained_by_nsprofs_own_phases_line(seam, tmp_path):
    # nsprof.session.timing.Timing.add writes '==NSPROF== phases: ...' into the part's log before the
    # session reads the log's last line as the reason the worker did not start
    from nsprof.errors import NsprofError
    from nsprof.session import run_session
    from nsprof.settings import ProfileSettings

    (tmp_path / "exits.py").write_text(EXITS)
    settings = ProfileSettings(
        backend="seam", modes=("direct",), reps=1, warmup=0, timeout_s=30, work_dir=tmp_path / "w"
    )
    with pytest.raises(NsprofError) as caught:
        run_session(str(tmp_path / "exits.py") + ":space", 1, settings)
    assert "worker exited with status 3" in str(caught.value)
    assert "phases:" not in str(caught.value)


def test_store_export_of_a_target_without_shapes_keeps_its_column_positions(tmp_path):
    # the tidy table puts `shape` last "so that old column positions stay"; the store's export
    # inserts shape_json and shape between tool_version and kernel
    from nsprof.store import MeasurementKey, ResultStore

    key = MeasurementKey(
        fingerprint="f",
        config_id=0,
        config_json="{}",
        gpu="g",
        backend="nsys",
        mode="direct",
        clock_control="none",
        cache_control="none",
        tool_version="1",
    )
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add(store.start_run(target="t"), key, [{"kernel": "k", "rep": 0, "duration_ns": 5.0}])
        store.export(tmp_path / "rows.csv")
    header = (tmp_path / "rows.csv").read_text().splitlines()[0].split(",")
    before = [
        "run_id",
        "fingerprint",
        "config_id",
        "config_json",
        "gpu",
        "backend",
        "mode",
        "clock_control",
        "cache_control",
        "tool_version",
        "kernel",
        "rep",
        "duration_ns",
        "cycles",
        "clock_hz",
        "graph_node",
        "error",
    ]
    assert header[: len(before)] == before


ONE_SHAPE_HOOK = """
import nsprof.space
from nsprof.tuner import TunerHook

class Hook(TunerHook):  # an older hook: one ranking, no feed_back_shapes
    name = "the one-shape tuner"

    def feed_back(self, latencies_ms):
        return "stored"

def build(config, shape):
    return lambda: None
configs = [{"i": c, "ns_shapes": [[1000.0, 3000.0], [2000.0, 500.0]][c]} for c in range(2)]
space = nsprof.space.Space(configs=configs, shapes=[[1], [2]], build=build, device="cpu", tuner=Hook())
"""


def test_a_hook_without_feed_back_shapes_is_a_note_not_a_failure_and_the_phases_are_given(seam, tmp_path):
    import json

    (tmp_path / "hook.py").write_text(ONE_SHAPE_HOOK)
    done = run_nsprof(
        *(
            "tune",
            str(tmp_path / "hook.py") + ":space",
            "--backend",
            "nsys",
            "--mode",
            "direct",
            "--reps",
            "2",
        ),
        *("--no-store", "--no-tuner-pick", "--json"),
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    notes = [note for shape in document["shapes"] for note in shape["notes"]] + document["notes"]
    assert any("takes the ranking of one shape only" in note for note in notes), notes
    assert document["errors"] == []
    # where the session's time went, for a target with shapes too
    assert document["first_pass_phases"] and document["shapes"][1]["truths"][0]["first_pass_phases"]
