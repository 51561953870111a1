"""A status file of several worker runs: ncu's application replay (the L2 check's sessions) runs the worker
once per pass, each run appending to one status file. A config counts as measured only when every run
finished it; a crash, hang or failure in a later run is that config's, and the configs that run did not
reach are measured again. Real worker processes under the stand-in profiler (tests/standins.py), which
runs the worker L2_CHECK_PASSES times when the session collects the L2 hit rate, as ncu does."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from nsprof.session import run_session
from nsprof.settings import ProfileSettings

# Config 1 misbehaves only in the worker's second run (a file in the test's folder counts the runs).
TARGET = """
import os, time
import nsprof.space

with open({runs!r}, "a") as handle:
    handle.write("x")
RUN = len(open({runs!r}).read())


class Launch:
    def __init__(self, config):
        if config["i"] == 1 and RUN == 2:
            if {how!r} == "crash":
                os.abort()
            if {how!r} == "raise":
                raise RuntimeError("no such tile size in this run")
            time.sleep(3600)
        if {how!r} == "hang_twice" and config["i"] == 2 and RUN == 3:
            time.sleep(3600)  # the run the profiler starts after config 1's was killed hangs elsewhere

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{{"i": c}} for c in range(4)], build=Launch, device="cpu")
"""


def _session(tmp_path, monkeypatch, how: str, every_pass: bool = False):
    monkeypatch.syspath_prepend(str(FIXTURES.parent))
    import nsprof.session.supervise

    # the profiler's time to end after its worker was killed: short, for a run that hangs again in it
    monkeypatch.setattr(nsprof.session.supervise, "GRACE_S", 4.0)
    from standins import StatusDriver

    driver = StatusDriver.for_session(profiler_flags=["--every-pass"] if every_pass else None)
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    (tmp_path / "t.py").write_text(TARGET.format(runs=str(tmp_path / "runs"), how=how))
    settings = ProfileSettings(
        backend="ncu", modes=("direct",), reps=2, warmup=0, cache_control="none", l2_hit_rate=True,
        flushes=(True, False), timeout_s=3, work_dir=tmp_path / "w",
    )  # fmt: skip
    return run_session(f"{tmp_path / 't.py'}:space", 4, settings)


@pytest.mark.parametrize(
    "how, reason, kind",
    [
        ("crash", "worker", "crash"),
        ("raise", "no such tile size", "crash"),
        ("hang", "timeout", "timeout"),
    ],
)
@pytest.mark.parametrize("every_pass", [False, True], ids=["profiler-stops", "profiler-goes-on"])
def test_a_config_that_fails_in_a_later_run_is_failed_and_the_others_are_measured_whole(
    tmp_path, monkeypatch, how, reason, kind, every_pass
):
    # profiler-goes-on: the profiler runs its next pass after the failed one (the next run is sound)
    result = _session(tmp_path, monkeypatch, how, every_pass)
    assert set(result.failures) == {1}, result.failures
    assert reason in str(result.failures[1])
    rows = result.frame
    assert rows[rows["config_id"] == 1]["duration_ns"].isna().all()  # its error row, no measured one
    assert rows[rows["config_id"] == 1]["failure_kind"].tolist() == [kind]
    measured = rows[rows["error"].isna()].groupby("config_id").size().to_dict()
    assert measured == {0: 4, 2: 4, 3: 4}  # 2 reps x 2 kernels, each config once


def test_a_run_after_a_timeout_kill_that_hangs_on_another_config_charges_the_timeout_to_its_own_config(
    tmp_path, monkeypatch
):
    # config 1 times out in the worker's second run and is killed; the profiler runs the worker again
    # (its next pass), which hangs on config 2 until the profiler is killed too: config 1 is the
    # timeout's, and config 2, never finished, is measured in the next part
    result = _session(tmp_path, monkeypatch, "hang_twice", every_pass=True)
    assert set(result.failures) == {1}, result.failures
    assert "timeout" in str(result.failures[1])
    rows = result.frame
    measured = rows[rows["error"].isna()].groupby("config_id").size().to_dict()
    assert measured == {0: 4, 2: 4, 3: 4}
