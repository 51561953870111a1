"""Regression, found in review: --budget-s inf passes click's FloatRange(min=0) and TuneSettings, then crashes the
adaptive planner (math.floor(inf)) after the first pass has been measured."""

from __future__ import annotations

import math

from nsprof.analysis.adaptive import Cost, plan_session
from nsprof.errors import NsprofError
from nsprof.settings import TuneSettings


def test_planner_takes_an_unbounded_budget():
    plan = plan_session([0, 1], {0: 5, 1: 5}, {0: 5, 1: 5}, 20, math.inf, Cost(10.0, 0.25))
    assert plan is not None and plan.rounds >= 1


def test_settings_refuse_a_budget_the_planner_cannot_take():
    # either the planner takes inf (above) or the settings refuse it in one line
    try:
        TuneSettings(backend="ncu", budget_s=math.inf)
    except NsprofError:
        return
    test_planner_takes_an_unbounded_budget()
