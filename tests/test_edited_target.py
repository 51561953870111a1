"""A target edited while tune runs: the worker loads the target again, after nsprof read it, so an
edit in between would be measured by the worker and stored under the configs nsprof read. The job
carries what nsprof read (each config's canonical JSON, the shapes', the source's fingerprint) and
the worker refuses a target that differs, before it measures anything.

Each test edits the target at one of the moments where that can happen: the target's own compile (run
by the compile step beside a session, while its worker starts: the worker loads the target before the
edit or after it) or build (run by the worker, deterministically: before a restart, before an adaptive
session) replaces the target file by its edited copy (`<name>.edited`) once. Real tune runs, real worker processes; the stand-in profiler
(tests/standins.py) reports each config's "ns", as a GPU would time the config it ran. A row stored
under a config whose "ns" is not the row's duration is a row stored under the wrong key.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_nsprof

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver, standin_timers  # noqa: E402

from nsprof.drivers import registry  # noqa: E402
from nsprof.errors import TargetError  # noqa: E402
from nsprof.store import ResultStore  # noqa: E402
from nsprof.tune import TuneSettings, tune  # noqa: E402

# {edited}: False in the target nsprof reads, True in its edited copy (which never edits again).
TARGET = textwrap.dedent("""
    import os
    import pathlib
    import nsprof.space

    EDITED = {edited}
    WHEN = {when!r}  # "compile": nsprof's compile step edits; "build": the worker's build of config AT does
    AT = {at!r}
    CRASH = {crash!r}  # after the edit in build, the worker dies (nsprof restarts it at the next config)
    SOURCE = {source!r}  # what differs in the edited copy's code alone


    def edit():
        here = pathlib.Path(__file__)
        if not EDITED:
            try:
                os.replace(here.with_suffix(".edited"), here)
            except FileNotFoundError:
                pass  # another config's compile (a thread of nsprof's compile step) edited it already


    def compile(config):
        if WHEN == "compile":
            edit()


    class Launch:
        def __init__(self, config):
            self.timer_ns = {{"cupti": config["ns"]}}  # what the stand-in fast timer measures

        def __call__(self):
            return None


    def build(config):
        if WHEN == "build" and config["i"] == AT and not EDITED:
            edit()
            if CRASH:
                os._exit(1)
        return Launch(config)


    space = nsprof.space.Space(name="edited", configs={configs!r}, build=build, compile=compile, device="cpu")
""")


def write_target(
    folder: Path,
    configs,
    edited_configs,
    when: str,
    at: int | None = None,
    crash: bool = False,
    source_edit: bool = False,
) -> str:
    """The target (edited.py) and its edited copy (edited.edited); its spec."""
    common = {"when": when, "at": at, "crash": crash}
    (folder / "edited.py").write_text(TARGET.format(edited=False, configs=configs, source="a", **common))
    (folder / "edited.edited").write_text(
        TARGET.format(edited=True, configs=edited_configs, source="b" if source_edit else "a", **common)
    )
    return f"{folder / 'edited.py'}:space"


@pytest.fixture
def standin(tmp_path):
    registry.register("standin", StatusDriver)
    registry.register(
        "none", standin_timers(), ground_truth=False
    )  # the fast timers' bare worker, stood in for
    yield
    registry.register("none", "nsprof.drivers.none:PlainDriver", ground_truth=False)
    registry.unregister("standin")


def settings(tmp_path, **kwargs) -> TuneSettings:
    return TuneSettings(
        **{
            "backend": "standin",
            "mode": "direct",
            "reps": 3,
            "timeout_s": 60,
            "store": tmp_path / "r.sqlite",
            "feed_back": False,
            "tuner_pick": False,
            "work_dir": tmp_path / "work",
            "budget_s": 0,
            **kwargs,
        }
    )


def stored(tmp_path):
    """(measured rows, failure rows) of the results store."""
    with ResultStore(tmp_path / "r.sqlite") as store:
        rows = store.frame()
    return rows[rows["error"].isna()], rows[rows["error"].notna()]


def assert_every_row_under_its_own_config(rows) -> None:
    wrong = [
        (int(c), text, d)
        for c, text, d in zip(rows["config_id"], rows["config_json"], rows["duration_ns"])
        if json.loads(text)["ns"] != d
    ]
    assert not wrong, f"rows stored under another config than the one measured: {wrong}"


def assert_refused(exc, target: str, what: str) -> None:
    message = str(getattr(exc, "value", exc))  # a pytest.ExceptionInfo, or the exception
    assert "\n" not in message
    assert target in message and "changed since nsprof read it" in message, message
    assert what in message, message


CONFIGS = [{"i": 0, "ns": 1000}, {"i": 1, "ns": 2000}, {"i": 2, "ns": 3000}]
REVERSED = [{"i": 0, "ns": 3000}, {"i": 1, "ns": 2000}, {"i": 2, "ns": 1000}]


@pytest.mark.parametrize(
    "more", [{"resume": True}, {"prescreen": "cupti", "prescreen_top": 3}], ids=["resume", "prescreen"]
)
def test_a_target_edited_by_its_compile_is_refused_or_measured_as_read(tmp_path, standin, more):
    # The compile step edits the target while the worker starts: a worker that loads it after the
    # edit refuses it for its configs; one that imported it before the edit but read its source
    # (the fingerprint, taken after the import) after refuses it for its source; one that did both
    # before measures the configs nsprof read.
    target = write_target(tmp_path, CONFIGS, REVERSED, when="compile")
    try:
        tune(target, settings(tmp_path, **more))
    except TargetError as exc:
        configs = 'config 0 is {"i":0,"ns":3000} now, not {"i":0,"ns":1000}'
        source = "its source is not the one nsprof read"
        assert_refused(exc, target, configs if configs in str(exc) else source)
    measured, failed = stored(tmp_path)
    assert_every_row_under_its_own_config(measured)
    assert failed.empty


@pytest.mark.parametrize("source_edit", [False, True], ids=["configs", "source only"])
def test_a_target_edited_before_a_restart_is_refused_and_what_ran_before_is_kept(
    tmp_path, standin, source_edit
):
    # Config 1's build edits the target and crashes the worker; nsprof restarts it at config 2, which
    # the edit changed (config 0, measured before it, is the same in both copies). With source_edit,
    # only the code differs: same configs, another kernel.
    configs = [*CONFIGS, {"i": 3, "ns": 4000}]
    edited = configs if source_edit else [*CONFIGS[:2], {"i": 2, "ns": 7000}, {"i": 3, "ns": 8000}]
    target = write_target(tmp_path, configs, edited, when="build", at=1, crash=True, source_edit=source_edit)
    with pytest.raises(TargetError) as exc:
        tune(target, settings(tmp_path))
    assert_refused(
        exc,
        target,
        "its source is not the one nsprof read"
        if source_edit
        else 'config 2 is {"i":2,"ns":7000} now, not {"i":2,"ns":3000}',
    )
    measured, failed = stored(tmp_path)
    assert_every_row_under_its_own_config(measured)
    assert sorted(set(measured["config_id"])) == [0]  # measured before the edit: kept
    assert set(failed["config_id"]) == {1}  # the crash, of the config nsprof read
    assert len(measured) == 3


@pytest.mark.parametrize("ahead", [False, True], ids=["fresh worker", "worker started ahead"])
def test_a_target_edited_before_an_adaptive_session_is_refused_or_measured_as_read(
    tmp_path, standin, monkeypatch, ahead
):
    # Three configs of one distribution: tied after the first pass, so an adaptive session follows. The
    # first pass's last build edits the target: another tile, the same timing (the first pass's numbers stay
    # true of the configs nsprof read). A fresh worker for the session loads the edit and refuses it; one
    # started ahead (nsprof.session.ahead) refuses it where it imported the edit, and measures the configs
    # nsprof read where it imported them before the edit.
    if not ahead:
        from nsprof.tune import rankings

        monkeypatch.setattr(rankings, "_aheads", lambda *args: None)
    configs = [{"i": i, "ns": 1000.0, "ns_sigma": 0.03, "seed": 7, "tile": 64} for i in range(3)]
    edited = [{**c, "tile": 128} for c in configs]
    target = write_target(tmp_path, configs, edited, when="build", at=2)
    try:
        tune(target, settings(tmp_path, budget_s=600, max_reps=12))
        refused = None
    except TargetError as exc:
        refused = exc
    assert refused is not None or ahead
    with ResultStore(tmp_path / "r.sqlite") as store:
        runs, rows = store.runs(), store.frame()
    first, *adaptive = runs["id"].tolist()
    assert adaptive  # the first pass, then at least one adaptive session
    assert not rows["config_json"].str.contains('"tile":128').any()  # nothing under the edited configs
    if refused is not None:
        assert_refused(refused, target, '"tile":128')
        assert runs["status"].tolist()[-1] == "target changed"  # its worker refused the edited target
        assert set(rows["run_id"]) <= {first, *adaptive[:-1]}  # the refusing session stored nothing


def test_the_command_line_refuses_an_edited_target_in_one_line(tmp_path):
    # config 1's build edits the target and crashes the worker: the restarted worker refuses config 2
    configs = [*CONFIGS, {"i": 3, "ns": 4000}]
    write_target(
        tmp_path, configs, [*CONFIGS[:2], {"i": 2, "ns": 7000}, {"i": 3, "ns": 8000}], "build", 1, True
    )
    done = run_nsprof(
        *(
            "tune",
            "edited.py:space",
            "--backend",
            "ncu",
            "--mode",
            "direct",
            "--store",
            "r.sqlite",
            "--resume",
        ),
        *("--no-feed-back", "--no-tuner-pick", "--timeout", "60"),
        cwd=tmp_path,
        standins=True,
        in_process=True,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "edited.py:space changed since nsprof read it" in last and "config 2 is" in last, done.stderr
    measured, failed = stored(tmp_path)
    assert_every_row_under_its_own_config(measured)
    assert set(measured["config_id"]) == {0} and set(failed["config_id"]) == {1}
