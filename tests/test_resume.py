"""`tune --resume` and the results store: a stored number is only ever reused for the same config,
built by the same source; failures that say nothing about the config are measured again; a tune
that measured nothing says so and is not stored as a success.

Measurements come from a stand-in for the profiler (tune.measure_rows replaced) that answers from
`TRUTH`, a table the test edits between runs, as a GPU would answer after the user edits a kernel.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import uuid

import pytest

from nsprof import tune as tune_module
from nsprof.errors import NsprofError
from nsprof.schema import Failure, make_frame
from nsprof.store import ResultStore
from nsprof.tune import TuneSettings

TRUTH: dict[str, float] = {}  # config's canonical JSON -> the duration the stand-in measures
FAILURES: dict[
    str, str
] = {}  # config's canonical JSON -> the failure the stand-in reports (a Failure: its kind)


@pytest.fixture
def measured(monkeypatch):
    """Replace the measurement with the stand-in; returns the list of config-id lists measured."""
    from nsprof.space import load_target
    from nsprof.store import config_json

    calls: list[list[int]] = []
    TRUTH.clear()
    FAILURES.clear()

    def stand_in(target, n, truth, settings, config_ids, on_progress, **unused):
        backend = truth.name
        calls.append(list(config_ids))
        configs = load_target(target).configs
        rows = []
        for config_id in config_ids:
            key = config_json(configs[config_id])
            if key in FAILURES:
                rows.append(
                    {"source": backend, "config_id": config_id, **Failure.of(FAILURES[key]).columns()}
                )
                continue
            for rep in range(3):
                rows.append(
                    {
                        "source": backend,
                        "config_id": config_id,
                        "mode": settings.mode,
                        "rep": rep,
                        "kernel": "k",
                        "duration_ns": TRUTH[key],
                    }
                )
        return make_frame(rows)

    monkeypatch.setattr("nsprof.tune.measure.measure_rows", stand_in)
    monkeypatch.setattr("nsprof.host.tools.find_ncu", lambda required=True: type("T", (), {"path": "ncu"})())
    monkeypatch.setattr("nsprof.host.tools.tool_version", lambda path: "Version 2025.3.1.0")
    return calls


def _truth(configs):
    from nsprof.store import config_json

    TRUTH.update({config_json(c): float(c["ns"]) for c in configs})


def _write_split_target(folder, configs):
    """A target that imports its configs and kernel from a helper module beside it (as
    examples/seed_gemm.py does), under a module name unique to this test."""
    helper = f"kernels_{uuid.uuid4().hex[:8]}"
    (folder / f"{helper}.py").write_text(
        f"CONFIGS = {configs!r}\n\ndef build(config):\n    return lambda: None\n"
    )
    (folder / "target.py").write_text(
        textwrap.dedent(f"""
        from {helper} import CONFIGS, build
        from nsprof.space import Space
        space = Space(name="split", configs=CONFIGS, build=build, device="cpu")
    """)
    )
    return helper


def test_editing_an_imported_module_invalidates_what_it_built(tmp_path, measured):
    configs = [{"ns": 1000}, {"ns": 2000}, {"ns": 3000}, {"ns": 4000}]
    helper = _write_split_target(tmp_path, configs)
    target = f"{tmp_path / 'target.py'}:space"
    _truth(configs)
    store = tmp_path / "results.sqlite"
    first = tune_module.tune(target, TuneSettings(backend="ncu", store=store))
    assert first.ranking.best_config_id == 0
    # The user makes config 0 a slow one, in the helper module only; a new process imports it afresh.
    edited = [{"ns": 9000}, *configs[1:]]
    module = tmp_path / f"{helper}.py"
    module.write_text(f"CONFIGS = {edited!r}\n\ndef build(config):\n    return lambda: None\n")
    # an edit seconds later, as a user's: one within the second its bytecode was written, of the same
    # size, would be read from that bytecode by Python itself
    os.utime(module, (module.stat().st_atime, module.stat().st_mtime + 2))
    sys.modules.pop(helper, None)
    _truth(edited)
    resumed = tune_module.tune(target, TuneSettings(backend="ncu", store=store, resume=True))
    assert measured[-1] == [0, 1, 2, 3]  # the kernel source changed: nothing stored is reused
    assert "resumed: 0 of 4 configs came from the results store" in resumed.ranking.notes
    assert resumed.ranking.best_config_id == 1
    values = resumed.ranking.table.set_index("config_id")["value_ns"].to_dict()
    assert values == {0: 9000.0, 1: 2000.0, 2: 3000.0, 3: 4000.0}


def _write_json_target(folder, configs):
    """A target whose configs come from a data file: its source does not change when they do."""
    (folder / "configs.json").write_text(json.dumps(configs))
    (folder / "target.py").write_text(
        textwrap.dedent("""
        import json, pathlib
        from nsprof.space import Space
        CONFIGS = json.loads((pathlib.Path(__file__).parent / "configs.json").read_text())
        space = Space(name="data", configs=CONFIGS, build=lambda c: (lambda: None), device="cpu")
    """)
    )
    return f"{folder / 'target.py'}:space"


def test_a_stored_result_is_never_attached_to_another_config(tmp_path, measured):
    configs = [{"ns": 3000, "i": 0}, {"ns": 2000, "i": 1}, {"ns": 4000, "i": 2}, {"ns": 5000, "i": 3}]
    target = _write_json_target(tmp_path, configs)
    _truth(configs)
    store = tmp_path / "results.sqlite"
    tune_module.tune(target, TuneSettings(backend="ncu", store=store))
    # Config 2 becomes another config under the same id and the same source.
    edited = [*configs[:2], {"ns": 7000, "i": 22}, configs[3]]
    (tmp_path / "configs.json").write_text(json.dumps(edited))
    _truth(edited)
    resumed = tune_module.tune(target, TuneSettings(backend="ncu", store=store, resume=True))
    assert measured[-1] == [2]
    assert "resumed: 3 of 4 configs came from the results store" in resumed.ranking.notes
    row = resumed.ranking.table.set_index("config_id").loc[2]
    assert row["value_ns"] == 7000.0 and row["config"] == "ns=7000,i=22"
    # What the store hands back for config 2 is the new config's, never the old one's.
    with ResultStore(store) as results:
        rows = results.frame(config_id=2)
    assert set(rows["config_json"]) == {'{"i":2,"ns":4000}', '{"i":22,"ns":7000}'}


def test_resumed_rows_are_checked_against_the_current_configs(tmp_path, measured):
    # Even a store that answers "nothing missing" for config 1 (rows written under another config
    # by an older nsprof, say) must not lend them to today's config 1.
    configs = [{"ns": 3000}, {"ns": 2000}]
    target = _write_json_target(tmp_path, configs)
    _truth(configs)
    store = tmp_path / "results.sqlite"
    tune_module.tune(target, TuneSettings(backend="ncu", store=store))
    with ResultStore(store) as results:
        results._db.execute("UPDATE measurements SET config_json = '{\"ns\":1}' WHERE config_id = 1")
    resumed = tune_module.tune(target, TuneSettings(backend="ncu", store=store, resume=True))
    assert measured[-1] == [1]
    assert resumed.ranking.table.set_index("config_id").loc[1, "value_ns"] == 2000.0


@pytest.mark.parametrize(
    "reason, retried",
    [
        (
            Failure(
                "not run: the worker was restarted 50 times (raise ProfileSettings.max_restarts)", "not_run"
            ),
            True,
        ),
        (Failure("not run: the worker failed to start: importing target.py failed", "not_run"), True),
        (Failure("measured 3 times, but ncu's report lost it each time", "lost"), True),
        (Failure("timeout: still running after 2 s", "timeout", 2.0), True),  # resumed with --timeout 5
        (Failure("timeout: still running after 5 s", "timeout", 5.0), False),
        (Failure("worker killed by signal SIGKILL", "lost"), True),
        (Failure("profiling counters are not permitted for this user", "tool"), True),
        (Failure("build failed: ValueError: no such tile size", "crash"), False),
        (Failure("CUDA error: an illegal memory access was encountered", "crash"), False),
        (Failure("compile failed: RuntimeError: too much shared memory", "compile"), False),
        # the kind decides, whatever the words
        (Failure("timeout: still running after 2 s", "crash"), False),
        (Failure("CUDA error: an illegal memory access was encountered", "lost"), True),
    ],
)
def test_resume_retries_failures_that_say_nothing_about_the_config(tmp_path, measured, reason, retried):
    configs = [{"ns": 1000}, {"ns": 2000}]
    target = _write_json_target(tmp_path, configs)
    _truth(configs)
    FAILURES['{"ns":2000}'] = reason
    store = tmp_path / "results.sqlite"
    tune_module.tune(target, TuneSettings(backend="ncu", store=store, timeout_s=2))
    FAILURES.clear()
    resumed = tune_module.tune(target, TuneSettings(backend="ncu", store=store, resume=True, timeout_s=5))
    if retried:
        assert measured[1:] == [[1]]
        assert resumed.ranking.table.set_index("config_id").loc[1, "value_ns"] == 2000.0
    else:
        assert measured[1:] == []  # nothing was measured again
        assert resumed.ranking.table.set_index("config_id").loc[1, "error"] == reason


def test_retry_failed_measures_every_failure_again(tmp_path, measured):
    configs = [{"ns": 1000}, {"ns": 2000}, {"ns": 3000}]
    target = _write_json_target(tmp_path, configs)
    _truth(configs)
    FAILURES['{"ns":2000}'] = "build failed: ValueError: no such tile size"
    store = tmp_path / "results.sqlite"
    tune_module.tune(target, TuneSettings(backend="ncu", store=store))
    FAILURES.clear()
    resumed = tune_module.tune(
        target, TuneSettings(backend="ncu", store=store, resume=True, retry_failed=True)
    )
    assert measured[-1] == [1]
    assert resumed.ranking.table.set_index("config_id").loc[1, "value_ns"] == 2000.0


def test_a_tune_that_measured_nothing_is_an_error_and_not_stored_as_ok(tmp_path, measured):
    configs = [{"ns": 1000}, {"ns": 2000}]
    target = _write_json_target(tmp_path, configs)
    FAILURES.update(
        {
            '{"ns":1000}': "compile failed: RuntimeError: boom",
            '{"ns":2000}': "compile failed: RuntimeError: bang",
        }
    )
    store = tmp_path / "results.sqlite"
    with pytest.raises(NsprofError) as info:
        tune_module.tune(target, TuneSettings(backend="ncu", store=store))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("no config was measured: all 2 failed")
    assert "compile failed: RuntimeError: boom" in message
    with ResultStore(store) as results:
        assert results.runs()["status"].tolist() == ["nothing measured"]


def test_a_failure_in_an_adaptive_session_does_not_make_its_measured_config_missing(tmp_path):
    """An adaptive session adds reps to a first pass: a config it lost (its worker killed) or that crashed
    there keeps its first pass, and a resume measures it again neither plainly nor with --retry-failed
    (a run of it would hide the session's reps, and its first pass's)."""
    from dataclasses import replace

    import nsprof.space
    from nsprof.tune.stored import ADAPTIVE_RUN, Stored, _to_measure

    space = nsprof.space.Space(configs=[{"i": 0}, {"i": 1}], build=lambda c: lambda: None, device="cpu")
    group = {"fingerprint": "f", "gpu": "g", "backend": "ncu", "mode": "direct", "clock_control": "base"}
    group |= {"cache_control": "all", "tool_version": "1"}
    settings = TuneSettings(backend="ncu", resume=True, store=tmp_path / "s.sqlite")
    context = Stored(settings, space, dict(group), {None: [0, 1]}, "uuid")
    with ResultStore(tmp_path / "s.sqlite") as store:
        first = store.start_run(settings={}, **group)
        for config_id in (0, 1):
            store.add(first, context.key(config_id, None), [{"kernel": "k", "rep": 0, "duration_ns": 1.0}])
        store.finish_run(first)
        session = store.start_run(settings={ADAPTIVE_RUN: 1}, **group)
        store.add(
            session, context.key(0, None), [{"error": "worker killed by SIGKILL", "failure_kind": "lost"}]
        )
        store.add(session, context.key(1, None), [{"error": "boom", "failure_kind": "crash"}])
        store.finish_run(session, "failed")
        for asked in (settings, replace(settings, retry_failed=True)):
            assert _to_measure(store, context, asked, context.wanted, [0, 1], []) == []
