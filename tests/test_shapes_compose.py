"""Every tune feature with shapes: adaptive reps, the probes that explain a disagreement (in
tests/test_shapes.py), the tuner's own pick and --prescreen each work per shape, on the one path a
target without shapes takes too.

Real worker processes under the stand-in profiler (tests/standins.py: a (shape, config) point
measures its "ns_shapes"[shape], drawn around it with "ns_sigma"), registered as a driver of its
own; the fast timers through the real bare worker with the stand-in timers
(tests/targets/standin_timers.py)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver, standin_timers  # noqa: E402

from nsprof.analysis import adaptive as rules  # noqa: E402
from nsprof.drivers import registry  # noqa: E402

TARGET = """
import json, os
import nsprof.space
from nsprof.tuner import TunerHook

SHAPES = [{{"M": 1}}, {{"M": 16}}, {{"M": 128}}]
LOG = {log!r}


class Launch:
    def __init__(self, config, shape):
        self.config, self.shape = config, SHAPES.index(shape)
        # what the stand-in fast timer measures: a prescreen that orders each shape as TIMER_NS says
        self.timer_ns = {{"cupti": config["timer_ns"][self.shape]}} if "timer_ns" in config else {{}}

    def __call__(self):
        with open(LOG, "a") as log:
            log.write(f"{{os.getpid()}} {{self.config['i']}} {{self.shape}}\\n")


class Hook(TunerHook):
    name = "the stand-in tuner"
    can_pick = True

    def feed_back(self, latencies_ms):
        raise AssertionError("not fed back in these tests")

    def pick_shapes(self, shapes):
        # what the tuner's own timer would pick at each shape: config <shape index> there
        with open(os.environ["PICKED"], "w") as handle:
            json.dump({{"shapes": shapes, "pid": os.getpid()}}, handle)
        return {{
            shape: {{"tuner": "the stand-in tuner", "timer": "its own timer", "config_id": shape,
                     "config": {{"i": shape}}, "timings_ms": {{}}}}
            for shape in shapes
        }}


class OneShapeHook(Hook):
    pick_shapes = TunerHook.pick_shapes  # a hook that picks at one shape only


space = nsprof.space.Space(configs={configs!r}, shapes=SHAPES, build=Launch, device="cpu", tuner=Hook())
one_shape = nsprof.space.Space(configs={configs!r}, shapes=SHAPES, build=Launch, device="cpu", tuner=OneShapeHook())
"""

# Shape 0: configs 0 and 1 are 4% apart with 3% noise, so 5 reps cannot tell them apart and more
# can; shape 1: config 2 wins clearly; shape 2: three configs of one distribution, tied however
# many reps.
NS = {0: [1000.0, 1040.0, 3000.0], 1: [3000.0, 2000.0, 500.0], 2: [1000.0, 1000.0, 1000.0]}
NOISY = [{"i": c, "ns_shapes": [NS[s][c] for s in range(3)], "ns_sigma": 0.03} for c in range(3)]


def _draws(c: int, shape: int, reps) -> list[float]:
    """The stand-in's reps of config c at `shape` (its seeded draws, as tests/standins.py makes them)."""
    return [NS[shape][c] * (1 + 0.03 * random.Random(f"0:{c}:{shape}:{r}").gauss(0.0, 1.0)) for r in reps]


@pytest.fixture
def make_target(tmp_path, monkeypatch):
    registry.register("noisy", StatusDriver)
    registry.register("none", standin_timers(), ground_truth=False)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("PICKED", str(tmp_path / "picked.json"))
    log = tmp_path / "launches.log"

    def make(configs, name="space"):
        log.write_text("")
        (tmp_path / "target.py").write_text(TARGET.format(log=str(log), configs=configs))
        return f"{tmp_path / 'target.py'}:{name}", log

    yield make
    registry.register("none", "nsprof.drivers.none:PlainDriver", ground_truth=False)
    registry.unregister("noisy")


def _settings(tmp_path, **kwargs):
    from nsprof.tune import TuneSettings

    return TuneSettings(
        **{
            "backend": "noisy",
            "mode": "direct",
            "reps": 5,
            "timeout_s": 30,
            "store": tmp_path / "results.sqlite",
            "work_dir": tmp_path / "work",
            "feed_back": False,
            "tuner_pick": False,
            "max_reps": 20,
            **kwargs,
        }
    )


def _sessions(log: Path) -> list[set[tuple[int, int]]]:
    """The (shape, config) points each worker process launched, one set per process, in order."""
    by_pid: dict[str, set] = {}
    for line in log.read_text().splitlines():
        pid, config, shape = line.split()
        by_pid.setdefault(pid, set()).add((int(shape), int(config)))
    return list(by_pid.values())


def test_adaptive_reps_run_per_shape_and_one_session_measures_every_shapes_contenders(make_target, tmp_path):
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    a, b = _draws(0, 0, range(5)), _draws(1, 0, range(5))
    assert min(b) <= max(a) and min(a) <= max(b)  # the premise: shape 0's first pass cannot separate 0 and 1
    target, log = make_target(NOISY)
    result = tune(target, _settings(tmp_path, max_reps=40))
    shapes = {r.shape: r for r in result.shapes}

    assert shapes[0].ranking.decision.kind == "winner" and shapes[0].ranking.best_config_id == 0
    assert shapes[0].ranking.adaptive.stopped == rules.SEPARATED and shapes[0].ranking.adaptive.sessions >= 1
    assert all(h["configs"] == [0, 1] for h in shapes[0].ranking.adaptive.history)  # shape 0's tie set only
    assert shapes[1].ranking.decision.kind == "winner" and shapes[1].ranking.best_config_id == 2
    assert shapes[1].ranking.adaptive.stopped == rules.SEPARATED and shapes[1].ranking.adaptive.sessions == 0
    assert shapes[2].ranking.decision.kind == "tie" and shapes[2].ranking.adaptive.stopped == rules.MAX_REPS
    table = shapes[2].ranking.table.set_index("config_id")
    assert all(table.loc[c, "reps"] == 40 for c in shapes[2].ranking.decision.members)

    first, *adaptive = _sessions(log)
    assert first == {(s, c) for s in range(3) for c in range(3)}
    assert len(adaptive) == max(r.ranking.adaptive.sessions for r in result.shapes)
    assert adaptive[0] == {(0, 0), (0, 1)} | {
        (2, c) for c in shapes[2].ranking.adaptive.history[0]["configs"]
    }
    assert all(s != 1 for session in adaptive for s, _ in session)  # shape 1 was never measured again

    # every adaptive rep is stored under its own shape, the reps of a point numbered on without a gap
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        reps = db.execute(
            "SELECT shape, config_id, COUNT(DISTINCT rep), MAX(rep) FROM measurements "
            "GROUP BY shape, config_id ORDER BY shape, config_id"
        ).fetchall()
    for shape, config_id, count, highest in reps:
        assert count == highest + 1 == table_reps(shapes[shape], config_id)
    text = format_tune(result)
    assert "shape 0: adaptive reps:" in text and "stopped: the best is separated" in text
    assert "shape 2: adaptive reps:" in text and "every contender reached --max-reps 40" in text


def table_reps(result, config_id: int) -> int:
    return int(result.ranking.table.set_index("config_id").loc[config_id, "reps"])


def test_a_resumed_tune_with_shapes_measures_no_adaptive_rep_again(make_target, tmp_path):
    from nsprof.tune import tune

    target, log = make_target(NOISY)
    first = tune(target, _settings(tmp_path))
    log.write_text("")
    again = tune(target, _settings(tmp_path, resume=True))
    assert _sessions(log) == []  # every point and every adaptive rep came from the store
    for a, b in zip(first.shapes, again.shapes):
        assert list(a.ranking.table["config_id"]) == list(b.ranking.table["config_id"])
        assert list(a.ranking.table["reps"]) == list(b.ranking.table["reps"])
        assert b.ranking.adaptive.sessions == 0


def test_prescreen_sends_each_shapes_own_best_to_the_ground_truth(make_target, tmp_path):
    from nsprof.tune import tune

    # the fast timer orders each shape differently: its top 2 are {0, 1}, {1, 2} and {2, 0}
    timer = {0: [1.0, 2.0, 9.0], 1: [9.0, 2.0, 1.0], 2: [1.0, 9.0, 2.0]}
    configs = [
        {"i": c, "ns_shapes": [NS[1][c], NS[1][c], NS[1][c]], "timer_ns": [timer[s][c] for s in range(3)]}
        for c in range(3)
    ]
    target, log = make_target(configs)
    result = tune(target, _settings(tmp_path, prescreen="cupti", prescreen_top=2))
    sent = {0: [0, 1], 1: [2, 1], 2: [0, 2]}  # each shape's top 2, in the timer's order
    first, *rest = _sessions(log)  # the prescreen's bare worker, then the ground truth's session
    assert first == {(s, c) for s in range(3) for c in range(3)}
    assert rest == [{(s, c) for s, configs in sent.items() for c in configs}]
    for ranked in result.shapes:
        assert list(ranked.prescreen["config_id"]) == sorted(range(3), key=lambda c: timer[ranked.shape][c])
        measured = ranked.ranking.table[ranked.ranking.table["error"].isna()]
        assert sorted(measured["config_id"]) == sorted(sent[ranked.shape])
        best = min(sent[ranked.shape], key=lambda c: NS[1][c])
        assert ranked.ranking.best_config_id == best
        position = sent[ranked.shape].index(best) + 1
        assert f"the ground-truth winner was #{position} of the prescreen's top 2" in ranked.ranking.notes


def test_the_tuners_own_pick_is_asked_per_shape_in_a_child_process(make_target, tmp_path):
    from nsprof.tune import tune

    configs = [{"i": c, "ns_shapes": [NS[1][c]] * 3} for c in range(3)]
    target, _ = make_target(configs)
    result = tune(target, _settings(tmp_path, tuner_pick=True))
    picked = json.loads((tmp_path / "picked.json").read_text())
    assert picked["shapes"] == [0, 1, 2] and picked["pid"] != os.getpid()
    words = {0: "ground truth ranks it #3", 1: "ground truth ranks it #2", 2: "the ground truth's best too"}
    for ranked in result.shapes:
        shape = ranked.shape
        assert ranked.tuner_pick["config_id"] == shape
        line = f"the stand-in tuner (its own timer) picks config {shape} (i={shape}): {words[shape]}"
        assert any(note.startswith(line) for note in ranked.ranking.notes), ranked.ranking.notes

    (tmp_path / "picked.json").unlink()
    one = tune(target.replace(":space", ":one_shape"), _settings(tmp_path, tuner_pick=True))
    assert not (tmp_path / "picked.json").exists()
    assert all(r.tuner_pick is None for r in one.shapes)
    assert (
        "the stand-in tuner's own pick is not asked: its hook picks at one shape only"
        in one.shapes[0].ranking.notes
    )


def test_a_prescreened_tune_ranks_at_each_shape_only_the_configs_sent_there_whatever_the_store_holds(
    make_target, tmp_path
):
    """The store holds every (shape, config) from an earlier full tune; a prescreened tune sends each
    shape its own top config, and ranks each shape on those alone (a stored row of a config sent to
    another shape only is not this run's); and so does its re-read (which ranked at every shape each config
    sent to any shape, and named other winners)."""
    from nsprof.store import ResultStore
    from nsprof.tune import tune
    from nsprof.tune.saved import reread

    timer = {0: [1.0, 2.0, 9.0], 1: [9.0, 2.0, 1.0], 2: [1.0, 9.0, 2.0]}
    configs = [
        {"i": c, "ns_shapes": [NS[1][c]] * 3, "timer_ns": [timer[s][c] for s in range(3)]} for c in range(3)
    ]
    target, _ = make_target(configs)
    tune(target, _settings(tmp_path, budget_s=0))
    result = tune(target, _settings(tmp_path, budget_s=0, prescreen="cupti", prescreen_top=1))
    sent = {0: [0], 1: [2], 2: [0]}  # each shape's timer's best
    for ranked in result.shapes:
        measured = ranked.ranking.table[ranked.ranking.table["error"].isna()]
        assert sorted(measured["config_id"]) == sent[ranked.shape], ranked.shape
        assert ranked.ranking.best_config_id == sent[ranked.shape][0]
    with ResultStore(tmp_path / "results.sqlite") as store:
        assert _ranked_at(reread(store, target=target)) == _ranked_at(result)


def test_a_work_folder_whose_name_is_the_adaptive_sessions_mark_keeps_every_measurement(
    make_target, tmp_path, monkeypatch
):
    """A stored run is an adaptive session by its settings' mark, not by the text "adaptive_session"
    anywhere in its settings (a work folder or a store of that name)."""
    from nsprof.tune import tune

    target, _ = make_target(NOISY)
    monkeypatch.chdir(tmp_path)
    result = tune(target, _settings(tmp_path, budget_s=0, work_dir=Path("adaptive_session")))
    for ranked in result.shapes:
        measured = ranked.ranking.table[ranked.ranking.table["error"].isna()]
        assert sorted(set(measured["config_id"])) == list(range(len(NOISY))), ranked.shape


def _ranked_at(report) -> dict:
    """{shape: {truth: sorted ids of the configs measured in its ranking}} of a TuneReport."""
    return {
        s.shape: {
            t: sorted(int(c) for c in r.table[r.table["error"].isna()]["config_id"])
            for t, r in s.truths.items()
        }
        for s in report.shapes
    }


def test_a_reread_of_a_resume_that_stored_adaptive_reps_alone_ranks_the_configs_it_asked(
    make_target, tmp_path
):
    """A resume of configs 0 and 1 that found them stored stores its adaptive session alone: the re-read ranks
    the configs that call asked (its session's run records them), not the earlier tune's three."""
    from nsprof.store import ResultStore
    from nsprof.tune import tune
    from nsprof.tune.saved import reread

    target, _ = make_target(NOISY)
    tune(target, _settings(tmp_path, budget_s=0))
    tuned = tune(target, _settings(tmp_path, resume=True), config_ids=[0, 1])
    assert _ranked_at(tuned) == {s: {"noisy": [0, 1]} for s in range(3)}
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (2,)  # the resume's adaptive session
    with ResultStore(tmp_path / "results.sqlite") as store:
        again = reread(store, target=target)
    assert _ranked_at(again) == _ranked_at(tuned)


def test_a_prescreens_measurements_are_stored_and_its_resume_measures_nothing_again(make_target, tmp_path):
    """The prescreen's fast-timer rows go to the results store as they are measured, as the ground truth's
    do: a --resume of a prescreened tune that stored everything launches no config again (it ran the whole
    prescreen again), sends the same configs on, and ranks as the tune did; its re-read ranks the ground truth
    alone, on the configs sent (the prescreen's run ranks nothing)."""
    from nsprof.store import ResultStore
    from nsprof.tune import tune
    from nsprof.tune.saved import reread

    timer = {0: [1.0, 2.0, 9.0], 1: [9.0, 2.0, 1.0], 2: [1.0, 9.0, 2.0]}
    configs = [
        {"i": c, "ns_shapes": [NS[1][c]] * 3, "timer_ns": [timer[s][c] for s in range(3)]} for c in range(3)
    ]
    target, log = make_target(configs)
    settings = _settings(tmp_path, budget_s=0, prescreen="cupti", prescreen_top=2)
    first = tune(target, settings)
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        timed = set(db.execute("SELECT shape_json, config_id FROM measurements WHERE backend LIKE 'cupti%'"))
    assert len(timed) == 9  # every (shape, config) the prescreen measured
    launched = log.read_text()
    again = tune(target, replace(settings, resume=True))
    assert log.read_text() == launched  # nothing launched again
    assert _ranked_at(again) == _ranked_at(first)
    for a, b in zip(first.shapes, again.shapes):
        assert list(a.prescreen["config_id"]) == list(b.prescreen["config_id"])
    with ResultStore(tmp_path / "results.sqlite") as store:
        assert _ranked_at(reread(store, target=target)) == _ranked_at(first)
