"""A fault's time is not a config's work (on the H200, test_gpu_faults.py's resume under ncu
once started a run of its own).

Under ncu the faulty space's two healthy configs measure alike: a tie, so tune plans adaptive reps
from the first pass's cost. The first pass waited out a hang between them, and the cost model took
that wait for a config's work: a round of the two contenders came out dearer than the budget, the
first tune started no session, and the resume, whose first pass measured nothing and so planned
with the defaults, ran it instead. The cost model now counts only the gap between two configs
measured one after the other (nsprof.analysis.adaptive.first_pass_cost).

The numbers: timeout 8 s, reps 2, warm-up 3, --budget-s 12, --max-reps 4. Config 4 finishes at
least 8 s after config 0, so the old model priced a visit at 8 * (3 + 1) / (3 + 2) = 6.4 s or more,
a round over two at 12.8 s or more: no session, whatever this machine's speed. With no two healthy
configs in a row the model says nothing and the defaults (10 s start-up, 0.25 s a visit) plan two
rounds, which 12 s pay. Real worker processes under the stand-in profiler (tests/standins.py)
registered as ncu.
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
            "max_reps": 4,
            "timeout_s": 8,
            "budget_s": 12,
            "equivalence_pct": 0,  # the stand-in's contenders are exactly equal: not a practical tie here
            "store": tmp_path / "r.sqlite",
            "work_dir": tmp_path / "work",
            "feed_back": False,
            "tuner_pick": False,
            **extra,
        }
    )


def test_a_hang_between_the_contenders_does_not_price_out_their_session_and_resume_adds_no_run(
    standin_ncu, tmp_path
):
    from nsprof.analysis import adaptive as rules
    from nsprof.store import ResultStore
    from nsprof.tune import tune

    first = tune(TARGET, _settings(tmp_path))
    assert sorted(first.ranking.decision.members) == [0, 4], first.ranking.decision
    assert first.ranking.adaptive.sessions == 1, first.ranking.adaptive.as_json()
    assert first.ranking.adaptive.stopped == rules.MAX_REPS and first.ranking.adaptive.reps_per_config == {
        0: 4,
        4: 4,
    }
    with ResultStore(tmp_path / "r.sqlite") as results:
        runs_before = list(results.runs()["id"])
    again = tune(TARGET, _settings(tmp_path, resume=True))
    assert "resumed: 5 of 5 configs came from the results store" in again.ranking.notes
    assert again.ranking.adaptive.sessions == 0 and again.ranking.adaptive.stopped == rules.MAX_REPS
    with ResultStore(tmp_path / "r.sqlite") as results:
        assert list(results.runs()["id"]) == runs_before  # the resume had nothing left to measure
        rows = results.frame()
    assert sorted(rows[rows["error"].notna()]["config_id"].unique()) == [1, 2, 3]
    assert again.ranking.best_config_id == first.ranking.best_config_id
