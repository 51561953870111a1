"""Fault injection on a real GPU (marker `gpu`): every other config measured, nothing lost."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from nsprof.profile import config_summary, profile_result
from nsprof.settings import ProfileSettings

pytestmark = pytest.mark.gpu
TARGET = str(FIXTURES.parent / "targets" / "faulty_gpu.py") + ":space"


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_faults_are_recorded_and_the_rest_measured(backend, tmp_path):
    pytest.importorskip("triton")
    result = profile_result(
        TARGET, ProfileSettings(backend=backend, reps=3, warmup=1, timeout_s=20, work_dir=tmp_path)
    )
    frame, failures = result.frame, result.failures
    assert set(failures) == {1, 2, 3}, failures
    assert "illegal" in failures[1].lower() or "cuda" in failures[1].lower(), failures[1]
    assert failures[2].startswith("timeout"), failures[2]
    assert "memory" in failures[3].lower(), failures[3]
    summary = config_summary(frame)
    measured = summary[summary["error"].isna()]
    assert sorted(set(measured["config_id"])) == [0, 4]
    assert (measured["reps"] == 3).all()
    print(
        f"FAULTS {backend}: injected 3, configs measured {sorted(set(measured['config_id']))}, "
        f"reasons {failures}"
    )


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_faults_leave_the_store_consistent_and_resume_measures_nothing_twice(backend, tmp_path):
    pytest.importorskip("triton")
    from nsprof.store import ResultStore
    from nsprof.tune import TuneSettings, tune

    store = tmp_path / "results.sqlite"
    settings = TuneSettings(
        backend=backend, mode="direct", reps=3, timeout_s=20, store=store, work_dir=tmp_path
    )
    first = tune(TARGET, settings)
    assert first.ranking.best_config_id in (0, 4)
    with ResultStore(store) as results:
        runs_before = list(results.runs()["id"])  # the first pass, and its adaptive session if one ran
    again = tune(
        TARGET,
        TuneSettings(
            backend=backend, mode="direct", reps=3, timeout_s=20, store=store, work_dir=tmp_path, resume=True
        ),
    )
    assert "resumed: 5 of 5 configs came from the results store" in again.ranking.notes
    with ResultStore(store) as results:
        runs = results.runs()
        rows = results.frame()
    # The resume had nothing left to measure: no run of its own, not even an adaptive session (on the
    # H200 the first tune's cost model once counted the faults' time as a config's work, so its
    # session never started, and the resume, pricing a round by the defaults, ran it instead).
    assert list(runs["id"]) == runs_before, (
        first.ranking.adaptive.as_json(),
        again.ranking.adaptive.as_json(),
    )
    assert set(runs["status"]) == {"ok"}
    assert first.ranking.best_config_id == again.ranking.best_config_id
    assert sorted(rows[rows["error"].notna()]["config_id"].unique()) == [1, 2, 3]
    assert sorted(rows[rows["error"].isna()]["config_id"].unique()) == [0, 4]


@pytest.mark.parametrize("backend", ["ncu", "nsys"])
def test_a_profiler_killed_mid_way_costs_one_config(backend, tmp_path, monkeypatch):
    """SIGKILL the ncu/nsys process while config 2 of [ok, ok, held, ok] runs: nothing else lost."""
    import threading

    from targets.faulty_gpu import RELEASE_ENV, kill_profiler_at

    target = str(FIXTURES.parent / "targets" / "faulty_gpu.py") + ":held"
    release = tmp_path / "released"  # config 2's build waits for it: the kill lands in config 2's window
    monkeypatch.setenv(RELEASE_ENV, str(release))
    killed = []
    args = (tmp_path, backend, 2, killed, release)
    thread = threading.Thread(target=kill_profiler_at, args=args, daemon=True)
    thread.start()
    result = profile_result(
        target, ProfileSettings(backend=backend, reps=20, warmup=1, timeout_s=60, work_dir=tmp_path)
    )
    thread.join(timeout=5)
    assert killed, "the profiler was never seen"
    frame, failures = result.frame, result.failures
    assert set(failures) <= {2}, failures
    summary = config_summary(frame)
    measured_rows = summary[summary["error"].isna()]
    measured = set(measured_rows["config_id"])
    assert measured | set(failures) == {0, 1, 2, 3}
    assert (measured_rows["reps"] == 20).all()  # no config kept partly (ncu's report streams to disk)
    print(f"PROFILER KILLED {backend}: configs measured {sorted(measured)}, failed {failures}")
