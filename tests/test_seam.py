"""The measuring seam: a new backend is one driver class and one registry line.

A stand-in driver (tests/standins.py: its "report" is the worker's status file, each finished
config measuring its "ns") is registered once, under a name of its own, and then profile, tune
and validate run through it end to end on a CPU target, in real worker processes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

from nsprof.drivers import registry  # noqa: E402

TARGET = """
import nsprof.space
space = nsprof.space.Space(configs=[{"ns": 3000.0}, {"ns": 1000.0}, {"ns": 2000.0}], build=lambda c: (lambda: None),
                           device="cpu")
"""


@pytest.fixture
def seam(tmp_path):
    registry.register("seam", StatusDriver)  # the one line a new backend needs
    (tmp_path / "seam_target.py").write_text(TARGET)
    yield str(tmp_path / "seam_target.py") + ":space"
    registry.unregister("seam")


def test_profile_tune_and_validate_run_through_a_registered_driver(seam, tmp_path):
    from nsprof.profile import config_summary, profile_result
    from nsprof.settings import ProfileSettings, TuneSettings, ValidateSettings
    from nsprof.tune import tune
    from nsprof.validate import validate

    settings = ProfileSettings(
        backend="seam", modes=("direct",), reps=2, warmup=0, timeout_s=30, work_dir=tmp_path / "profile"
    )
    result = profile_result(seam, settings)
    assert result.backend == "seam" and result.failures == {}
    summary = config_summary(result.frame, result.configs)
    assert summary.set_index("config_id")["median_ns"].to_dict() == {0: 3000.0, 1: 1000.0, 2: 2000.0}
    assert set(result.frame["source"]) == {"seam"}

    ranked = tune(
        seam,
        TuneSettings(
            backend="seam",
            mode="direct",
            reps=2,
            timeout_s=30,
            use_store=False,
            work_dir=tmp_path / "tune",
            feed_back=False,
            tuner_pick=False,
        ),
    )
    assert ranked.ranking.best_config_id == 1
    assert list(ranked.ranking.table["config_id"]) == [1, 2, 0]

    # The fast timers run in their own bare worker (FastTimers); without a GPU they fail, each
    # failure recorded against its timer and config.
    [checked] = validate(
        seam,
        ValidateSettings(
            timers=("event",),
            external=False,
            truths=("seam",),
            modes=("direct",),
            reps=2,
            timer_reps=3,
            timeout_s=30,
            work_dir=tmp_path / "validate",
        ),
    )
    assert checked.truths == ["seam:direct"]
    per_config = checked.per_config
    truth = per_config[per_config["method"] == "seam:direct"]
    assert truth.set_index("config_id")["value_ns"].to_dict() == {0: 3000.0, 1: 1000.0, 2: 2000.0}
    assert not any(method == "seam" for method, _ in checked.failures)
    timed = per_config[per_config["method"].isin(["event", "event_cold"])]
    assert len(timed) == 6  # each timer, each config: a value, or a failure saying why
    for row in timed.itertuples():
        assert row.value_ns == row.value_ns or (row.method, row.config_id) in checked.failures
    assert (tmp_path / "validate" / "seam_a").is_dir() and (tmp_path / "validate" / "seam_b").is_dir()


def test_an_unregistered_backend_is_one_line():
    from nsprof.errors import NsprofError
    from nsprof.settings import ProfileSettings

    with pytest.raises(NsprofError, match="backend must be one of"):
        ProfileSettings(backend="seam")
