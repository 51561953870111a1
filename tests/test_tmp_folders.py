"""What nsprof leaves in $TMPDIR: the folders it makes for a run's reports and logs
(nsprof-tune-*, nsprof-validate-*, a session's nsprof-*) go when the run ends well; --work-dir's
folder stays, as the user asked; a folder whose logs explain an error stays and the error names it.

Each test points $TMPDIR (and Python's tempfile, which reads it once) at a fresh folder of its own
and runs tune and validate in-process, their workers in real child processes, under stand-ins: a
stand-in profiler (tests/standins.py) as the ground truth "cond" and the stand-in fast timers
(tests/targets/standin_timers.py) as the bare worker."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver, standin_timers  # noqa: E402

from nsprof.drivers import registry  # noqa: E402
from nsprof.errors import NsprofError, ReportError  # noqa: E402

TARGET = """
import nsprof.space


class Launch:
    def __init__(self, config):
        self.timer_ns = {"cupti": config["ns"], "cupti_cold": config["ns"], "event": config["ns"]}

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{"ns": 1000.0 + 100 * i} for i in range(3)], build=Launch, device="cpu")
"""


class Unreadable(StatusDriver):
    """A profiler whose report cannot be read (as a truncated report): the run ends in an error."""

    def read(self, report, settings):
        raise ReportError(f"{Path(report).name}: truncated report (stand-in)")


@pytest.fixture
def fresh_tmp(tmp_path, monkeypatch):
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def target(tmp_path):
    registry.register("cond", StatusDriver)
    registry.register("bad", Unreadable)
    registry.register("none", standin_timers(), ground_truth=False)
    (tmp_path / "t.py").write_text(TARGET)
    yield str(tmp_path / "t.py") + ":space"
    registry.register("none", "nsprof.drivers.none:PlainDriver", ground_truth=False)
    registry.unregister("cond")
    registry.unregister("bad")


def _tune(target, **settings):
    from nsprof.tune import TuneSettings, tune

    return tune(
        target,
        TuneSettings(
            **{
                "mode": "direct",
                "reps": 2,
                "timeout_s": 60,
                "use_store": False,
                "feed_back": False,
                "tuner_pick": False,
                "budget_s": 0,
                **settings,
            }
        ),
    )


def test_tune_with_a_fast_timer_leaves_nothing(target, fresh_tmp):
    result = _tune(target, backend="cupti")
    assert result.ranking.best_config_id == 0
    assert sorted(p.name for p in fresh_tmp.iterdir()) == []


def test_tune_with_a_prescreen_leaves_nothing(target, fresh_tmp):
    result = _tune(target, backend="cond", prescreen="cupti", prescreen_top=2)
    assert result.ranking.best_config_id == 0 and sorted(result.ranking.table["config_id"]) == [0, 1]
    assert sorted(p.name for p in fresh_tmp.iterdir()) == []


def _validate(target, **extra):
    from nsprof.settings import ValidateSettings
    from nsprof.validate import validate

    settings = {
        "timers": ("cupti",),
        "external": False,
        "truths": ("cond",),
        "modes": ("direct",),
        "reps": 2,
        "timer_reps": 3,
        "timeout_s": 60,
        **extra,
    }
    return validate(target, ValidateSettings(**settings))


def test_validate_leaves_nothing(target, fresh_tmp):
    [result] = _validate(target)
    assert set(result.per_config["method"]) == {"cupti", "cupti_cold", "cond:direct"}
    assert sorted(p.name for p in fresh_tmp.iterdir()) == []


def test_the_work_dir_asked_for_is_kept(target, fresh_tmp, tmp_path):
    _tune(target, backend="cupti", work_dir=tmp_path / "tune-work")
    _validate(target, repeat_truth=False, work_dir=tmp_path / "work")
    assert (tmp_path / "tune-work" / "timer-cupti" / "timers.jsonl").is_file()
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["cond_a", "timers0"]
    assert sorted(p.name for p in fresh_tmp.iterdir()) == []


def test_a_work_dir_used_again_keeps_every_file_an_earlier_run_measured_byte_for_byte(
    target, fresh_tmp, tmp_path
):
    def files(folder):  # the session's phases.json is the latest run's by design: not a measurement
        return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != "phases.json"}

    _tune(target, backend="cupti", work_dir=tmp_path / "tune-work")
    _validate(target, repeat_truth=False, work_dir=tmp_path / "work")
    before = {**files(tmp_path / "tune-work"), **files(tmp_path / "work")}
    assert any(p.name == "timers.jsonl" for p in before) and any(p.suffix == ".json" for p in before)
    _tune(target, backend="cupti", work_dir=tmp_path / "tune-work")
    [again] = _validate(target, repeat_truth=False, work_dir=tmp_path / "work")
    after = {**files(tmp_path / "tune-work"), **files(tmp_path / "work")}
    assert {p: after.get(p) for p in before} == before
    assert (tmp_path / "tune-work" / "timer-cupti" / "timers1.jsonl").is_file()  # the second run's own
    assert set(again.per_config["method"]) == {"cupti", "cupti_cold", "cond:direct"}


def test_a_folder_whose_logs_explain_an_error_is_kept_and_named(target, fresh_tmp):
    with pytest.raises(NsprofError, match="truncated report") as caught:
        _validate(target, truths=("bad",))
    left = sorted(fresh_tmp.iterdir())
    assert [p.name.startswith("nsprof-validate-") for p in left] == [True]
    assert str(caught.value).endswith(f"(reports and logs kept in {left[0]})")
    assert any(left[0].rglob("*.log"))  # what it names holds the run's logs


def test_an_error_before_anything_ran_leaves_no_folder_and_keeps_its_own_kind(tmp_path, monkeypatch):
    """A busy GPU ends a tune before its session wrote anything: the empty temporary folder goes and
    the GpuBusy is raised as it was (once it failed to be copied: 'GpuBusy.__init__() missing 3
    required keyword-only arguments', an internal error). A folder with logs in it is named, and the
    error keeps its class and attributes."""
    from nsprof.errors import GpuBusy
    from nsprof.session import work_folder

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    busy = GpuBusy(
        "GPU 0 is being profiled by another nsprof", device=0, path=tmp_path / "x.lock", holder={"pid": 1}
    )
    with pytest.raises(GpuBusy) as raised:
        with work_folder(None, "nsprof-tune-"):
            raise busy
    assert raised.value is busy and list(tmp_path.iterdir()) == []
    with pytest.raises(GpuBusy) as raised:
        with work_folder(None, "nsprof-tune-") as folder:
            (folder / "part0.log").write_text("why it failed")
            raise busy
    assert str(folder) in str(raised.value) and raised.value.holder == {"pid": 1} and raised.value.device == 0
    assert (folder / "part0.log").exists()
