"""The compile step beside the session (nsprof.session.compile_step.CompileAhead,
nsprof.worker.compile): real child processes (nsprof's CLI with the stand-in profiler of tests/standins.py, the real worker and
the real compile step), on a CPU space whose compile can only finish while the session runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES, run_nsprof

from nsprof.worker.compile import END, marker, state, write_marker

TARGET = str(FIXTURES.parent / "targets" / "compile_ahead.py")
ROOT = FIXTURES.parents[1]


def _profile(tmp_path, space: str, *extra: str, env: dict | None = None):
    folder = tmp_path / "ahead"
    folder.mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(
        exist_ok=True
    )  # where the compile step's folder goes (kept when a config failed)
    environment = {
        "PYTHONPATH": str(ROOT),
        "NSPROF_LOCK_DIR": str(tmp_path / "locks"),
        "NSPROF_TEST_AHEAD_DIR": str(folder),
        "TMPDIR": str(tmp_path / "tmp"),
        **(env or {}),
    }
    done = run_nsprof(
        "profile",
        f"{TARGET}:{space}",
        "--backend",
        "nsys",
        "--mode",
        "direct",
        "--reps",
        "2",
        "--work-dir",
        str(tmp_path / "work"),
        "--json",
        *extra,
        env=environment,
        standins=True,
    )
    return done, folder


def _rows(done) -> list[dict]:
    return json.loads(done.stdout)


def test_configs_compile_while_the_session_runs_and_a_compile_failure_is_one_failed_config(tmp_path):
    # configs 1 and 3 compile only after the worker built config 0: compiled before the session,
    # as nsprof did until now, they would wait 60 s and fail
    # the compiles of 1 and 3 also wait for the worker to wait for them: a compile_wait on any machine
    done, folder = _profile(tmp_path, "overlapped", env={"NSPROF_TEST_WAITED_DIR": str(tmp_path / "work")})
    assert done.returncode == 0, done.stderr
    rows = _rows(done)
    measured = sorted({r["config_id"] for r in rows if r["error"] is None})
    assert measured == [0, 1, 3]
    failed = [r for r in rows if r["error"] is not None]
    assert [r["config_id"] for r in failed] == [
        2
    ]  # one row, not one from the compile step and one from the worker
    assert failed[0]["error"].startswith("compile failed: ValueError: no valid tile")
    # each config compiled once, in the compile step (the worker's build does not compile)
    assert sorted((folder / "compiled.log").read_text().split("\n")[:-1]) == [
        f"compiled {i}" for i in (0, 1, 3)
    ]
    record = json.loads((tmp_path / "work" / "phases.json").read_text())
    assert record["compile_ahead_s"] > 0
    assert "compile_wait" in record["phases"]  # configs 1 and 3 waited for their compile


def test_nsprof_never_compiles_before_the_session(tmp_path):
    # NSPROF_COMPILE_AHEAD is no setting: a compile before the session would fail config 1 (which
    # needs config 0 built) after its 1 s bound; beside the session it compiles
    done, _ = _profile(
        tmp_path, "overlapped", env={"NSPROF_COMPILE_AHEAD": "0", "NSPROF_TEST_AFTER0_WAIT_S": "1"}
    )
    assert done.returncode == 0, done.stderr
    rows = _rows(done)
    assert sorted({r["config_id"] for r in rows if r["error"] is not None}) == [2]


def test_a_compile_step_that_dies_leaves_what_it_did_not_compile_to_each_configs_window(tmp_path):
    # config 1's compile kills the step (exit 7): it and whatever the step had not compiled are compiled
    # at their first launch, each in its own window (this target's build needs no compile: all measured)
    done, _ = _profile(tmp_path, "dying")
    assert done.returncode == 0, done.stderr
    rows = _rows(done)
    assert {r["config_id"] for r in rows if r["error"] is None} == {0, 1, 2}, done.stderr
    assert not [r for r in rows if r["error"] is not None]
    log = (tmp_path / "work" / "part0.log").read_text()
    assert "config 1: not compiled: the compile step exited with status 7" in log and "in its window" in log


def test_markers_say_ok_fail_and_lost(tmp_path):
    assert state(tmp_path, 0) is None
    write_marker(marker(tmp_path, 0, True), "")
    write_marker(marker(tmp_path, 1, False), "compile failed: X: y")
    assert state(tmp_path, 0) == ("ok", "")
    assert state(tmp_path, 1) == ("fail", "compile failed: X: y")
    assert state(tmp_path, 2) is None
    write_marker(tmp_path / END, "")
    assert state(tmp_path, 2) == ("lost", "not compiled: the compile step ended without it")
    assert not list(tmp_path.glob(".*.tmp"))  # written whole, then renamed


@pytest.mark.parametrize("space", ["overlapped", "dying"])
def test_the_compile_step_leaves_no_process_and_keeps_its_folder_only_on_failure(tmp_path, space):
    done, _ = _profile(tmp_path, space)
    assert done.returncode == 0, done.stderr
    folders = list((tmp_path / "tmp").glob("nsprof-compile-*"))
    assert len(folders) == 1 and (folders[0] / "compile.log").exists()
    assert f"the compilers' output is kept in {folders[0] / 'compile.log'}" in done.stderr  # said where
    assert (
        (folders[0] / "2.fail").exists()
        if space == "overlapped"
        else "status 7" in (folders[0] / END).read_text()
    )
    alive = subprocess.run(
        ["pgrep", "-f", f"nsprof.worker.compile {folders[0]}"], capture_output=True, text=True
    )
    assert alive.stdout.strip() == ""


def test_a_clean_compile_step_leaves_no_folder(tmp_path):
    done, _ = _profile(tmp_path, "overlapped", "--configs", "0,1,3")
    assert done.returncode == 0, done.stderr
    assert sorted({r["config_id"] for r in _rows(done) if r["error"] is None}) == [0, 1, 3]
    assert not list((tmp_path / "tmp").glob("nsprof-compile-*"))


EDITABLE = """
import nsprof.space
COMPILED = {folder!r}

def compile_config(config):
    open(f"{{COMPILED}}/compiled-{{config['block']}}", "w").close()

space = nsprof.space.Space(configs=[{{"block": b}} for b in {blocks!r}], build=lambda c: (lambda: None),
                           compile=compile_config, device="cpu")
"""


def test_the_compile_step_compiles_nothing_of_a_target_edited_since_nsprof_read_it(tmp_path):
    """The step loads the target itself: edited since nsprof read it, it would compile the edited
    configs, which a build that finds its artefacts by config id would then run under the old keys."""
    from nsprof.space import load_target

    compiled, step = tmp_path / "compiled", tmp_path / "step"
    compiled.mkdir()
    step.mkdir()
    target = tmp_path / "editable.py"
    target.write_text(EDITABLE.format(folder=str(compiled), blocks=[32, 64]))
    expect = load_target(f"{target}:space").as_read()  # what nsprof read
    target.write_text(EDITABLE.format(folder=str(compiled), blocks=[64, 128]))  # then edited
    job = {"target": f"{target}:space", "points": [0, 1], "n_configs": 2, "n_shapes": 0}
    job.update(folder=str(step), jobs=1, expect=expect)
    (step / "job.json").write_text(json.dumps(job))
    done = subprocess.run(
        [sys.executable, "-m", "nsprof.worker.compile", str(step / "job.json")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr  # the worker refuses the target; nothing for nsprof to keep
    assert not list(compiled.iterdir())  # nothing compiled
    for point in (0, 1):
        kind, why = state(step, point)
        assert kind == "lost" and why.startswith("not compiled: the target changed since nsprof read it: ")
