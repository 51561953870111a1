"""`tune --resume` of a finished tune measures nothing (issue 24: on the H200,
test_gpu_faults.py's resume under ncu started a run of its own).

Under ncu the space's two healthy configs measure alike (clocks locked, caches flushed): a tie, so
tune plans adaptive reps from the first pass's cost. That pass waited out a hang between them, so
one round of the two costs more than the budget, and the first tune starts no session. A resume
measures nothing in its first pass (every config is stored): without a cost of its own it planned
with the defaults (10 s start-up, 0.25 s a visit), which the same budget can pay, and measured the
tied configs again. It must plan with the cost its stored first pass measured.

The numbers: timeout 8 s, reps 2, warm-up 3. Config 4 finishes at least 8 s after config 0 (the hang
between them runs out its timeout), so a visit costs at least 8 * (3 + 1) / (3 + 2) = 6.4 s and a
round of the two contenders at least 12.8 s, more than --budget-s 12, whatever this machine's
speed; the defaults' round is 0.5 s after a 10 s start-up, which 12 s pays (with 1.5 s to spare).

Real worker processes under the stand-in profiler (tests/standins.py) registered as ncu.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

from nsprof.drivers import registry  # noqa: E402
from nsprof.drivers.ncu import NcuDriver  # noqa: E402

TARGET = str(Path(__file__).parent / "targets" / "faulty_cpu.py") + ":like_faulty_gpu"


class NcuLike(StatusDriver):
    labels_like = NcuDriver


@pytest.fixture
def standin_ncu():
    registry.register("ncu", NcuLike)
    yield
    registry.register("ncu", "nsprof.drivers.ncu:NcuDriver")


def _settings(tmp_path, **extra):
    from nsprof.tune import TuneSettings

    return TuneSettings(
        **{
            "backend": "ncu",
            "mode": "direct",
            "reps": 2,
            "timeout_s": 8,
            "budget_s": 12,
            "store": tmp_path / "r.sqlite",
            "work_dir": tmp_path / "work",
            "feed_back": False,
            "tuner_pick": False,
            **extra,
        }
    )


def test_a_resume_plans_adaptive_reps_with_the_stored_first_pass_cost(standin_ncu, tmp_path):
    from nsprof.analysis import adaptive as rules
    from nsprof.store import ResultStore
    from nsprof.tune import tune

    first = tune(TARGET, _settings(tmp_path))
    # the premise: a tie that the first pass's own cost cannot pay a session for
    assert first.decision.kind == "tie" and sorted(first.decision.members) == [0, 4]
    assert first.adaptive.stopped == rules.BUDGET and first.adaptive.sessions == 0
    again = tune(TARGET, _settings(tmp_path, resume=True))
    assert "resumed: 5 of 5 configs came from the results store" in again.notes
    assert again.adaptive.stopped == rules.BUDGET and again.adaptive.sessions == 0
    # the same plan refused for the same cost (the budget left, after it, is a matter of the clock)
    assert again.adaptive.note.split(", and ")[0] == first.adaptive.note.split(", and ")[0]
    assert "assumed" not in again.adaptive.note
    with ResultStore(tmp_path / "r.sqlite") as results:
        runs = results.runs()
        rows = results.frame()
    assert list(runs["status"]) == ["ok"]  # the resume had nothing left to measure
    assert sorted(rows[rows["error"].notna()]["config_id"].unique()) == [1, 2, 3]
    assert sorted(rows[rows["error"].isna()]["config_id"].unique()) == [0, 4]
    assert again.best_config_id == first.best_config_id == 0


def test_a_resume_with_a_larger_budget_still_adds_reps(standin_ncu, tmp_path):
    """The stored cost decides as the first tune did; a budget that pays a session gets one."""
    from nsprof.store import ResultStore
    from nsprof.tune import tune

    tune(TARGET, _settings(tmp_path))
    again = tune(TARGET, _settings(tmp_path, resume=True, budget_s=600, max_reps=3))
    assert again.adaptive.sessions == 1 and again.adaptive.reps_per_config == {0: 3, 4: 3}
    with ResultStore(tmp_path / "r.sqlite") as results:
        assert list(results.runs()["status"]) == ["ok", "ok"]
