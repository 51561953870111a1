"""A served job sees the library state a standalone worker sees, not what an earlier job's target set
(numpy.seterr, torch's flags, a module-level flag of an installed package): the serving worker runs a
job of another target than its last one in a fresh process image (nsprof.worker.serving). Real
processes: the stand-in server and its serving worker (tests/test_serve.py's fixture), real clients."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from test_serve import _client, _ended, _measured, _rows, _status, server  # noqa: F401  (server: the fixture)

from nsprof.serve_files import serve_paths

# The first target changes process-wide state at import; the second (and any) reports what it sees,
# per config build, into observed.jsonl beside it, with the process and image it ran in.
OBSERVER = """
import builtins, json, os, pathlib, uuid
import numpy
import shared_flags
import nsprof.space

if {changes!r}:
    numpy.seterr(all="raise")
    shared_flags.FAST_PATH = True

builtins.__dict__.setdefault("observer_image", uuid.uuid4().hex)  # one per process image


def build(config):
    seen = {{"target": pathlib.Path(__file__).name, "pid": os.getpid(), "image": builtins.observer_image,
             "seterr": numpy.geterr()["divide"], "fast_path": shared_flags.FAST_PATH}}
    with open(pathlib.Path(__file__).parent.parent / "observed.jsonl", "a") as out:
        out.write(json.dumps(seen) + "\\n")
    return lambda: None

space = nsprof.space.Space(name="observer", configs=[{{"i": 0}}, {{"i": 1}}], build=build, device="cpu")
"""


def _observed(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "observed.jsonl").read_text().splitlines()]


def test_a_served_job_does_not_inherit_the_library_state_an_earlier_jobs_target_set(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    site = tmp_path / "site-packages"  # an installed package both targets import: never dropped between jobs
    site.mkdir()
    (site / "shared_flags.py").write_text("FAST_PATH = False\n")
    for name, changes in (("a", True), ("b", False)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.py").write_text(OBSERVER.format(changes=changes))
    env = {"PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}"}
    proc, state = server("--idle-exit", "120", env=env)
    for run, project in (("first", "a"), ("second", "b"), ("third", "b")):
        done = _client(
            tmp_path, run, target=str(tmp_path / project / "t.py") + ":space", configs="0,1", env=env
        )
        assert done.returncode == 0, done.stderr
        assert _measured(_rows(done)) == {0: 2, 1: 2}
        status = _status(tmp_path, run)
        assert status.served is not None and status.served["server"] == state["pid"], "served, not standalone"
        assert status.ended
    first, second, third = _observed(tmp_path)[::2]
    assert first["target"] == "t.py" and (first["seterr"], first["fast_path"]) == ("raise", True)
    # What a fresh worker sees: numpy's default error handling, the installed module's own flag.
    assert (second["seterr"], second["fast_path"]) == ("warn", False)
    assert (third["seterr"], third["fast_path"]) == ("warn", False)
    # Another target ran in a fresh image of the serving worker; the same target again in the warm one.
    assert second["image"] != first["image"] and third["image"] == second["image"]
    worker_status = (Path(state["log"]).parent / "worker.status").read_text()
    assert worker_status.count("\nready ") == 2
    assert "fresh" in worker_status
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0
    assert not serve_paths()[0].exists()
