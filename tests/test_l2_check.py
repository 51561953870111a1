"""`nsprof validate --l2-check`: whether the timers claiming a cold L2 measure the finalists cold.

Real nsprof runs with the stand-in profiler and fast timers (tests/standins.py): each config says
what ncu would count as its L2 hit rate after ncu's own flush, after the worker's flush and with
none ("l2_hit"), and the expected table comes from those numbers and from which configs are the
finalists by the target's own durations, never from nsprof's output. The worker's side (the flush
comes before the ranges, on the reps asked for) is checked apart with a device that records."""

from __future__ import annotations

import json

from conftest import run_nsprof

# ns by the truth (config 3 fastest, then 1, 2) and by the timer (its pick: config 0, the slowest)
TRUTH_NS = [4000.0, 2000.0, 3000.0, 1000.0]
TIMER_NS = [500.0, 900.0, 800.0, 700.0]
COLD = {"ncu": 12.0, "flush": 13.5, "none": 81.0}
TARGET = """
import nsprof.space

TIMER_NS = {timer!r}


class Launch:
    def __init__(self, config):
        self.timer_ns = dict.fromkeys(("cupti", "cupti_cold"), TIMER_NS[config["i"]])

    def __call__(self):
        return None


configs = {configs!r}
space = nsprof.space.Space(configs=configs, build=Launch, device="cpu")
"""
VALIDATE = ["validate", "t.py:space", "--timers", "cupti", "--no-external", "--truth", "ncu",
            "--mode", "direct", "--reps", "3", "--timer-reps", "3", "--no-repeat", "--l2-check"]  # fmt: skip


def _run(tmp_path, l2_hits: dict, *more: str):
    configs = [{"i": c, "ns": TRUTH_NS[c], "l2_hit": l2_hits.get(c, COLD)} for c in range(4)]
    (tmp_path / "t.py").write_text(TARGET.format(timer=TIMER_NS, configs=configs))
    env = {"NSPROF_STANDIN_TIMERS": "1"}
    return run_nsprof(*VALIDATE, *more, cwd=tmp_path, standins=True, env=env, in_process=True)


def test_the_finalists_hit_rates_are_shown_and_a_flush_that_left_l2_warm_is_named(tmp_path):
    warm_after_flush = {"ncu": 12.0, "flush": 64.0, "none": 81.0}
    ran = _run(tmp_path, {1: warm_after_flush}, "--save", "v.json", "--html", "v.html")
    assert ran.returncode == 0, ran.stderr
    page = (tmp_path / "v.html").read_text()  # the page says it too, not only the terminal
    assert 'id="l2-check"' in page and "did NOT measure cold: on config(s) {1}" in page
    saved = json.loads((tmp_path / "v.json").read_text())
    rows = {r["config_id"]: r for r in saved["l2_check"]}
    # the truth's three fastest (3, 1, 2) and the cold timer's pick (0): every config here
    assert set(rows) == {0, 1, 2, 3}
    for c, row in rows.items():
        hits = warm_after_flush if c == 1 else COLD
        assert row["mode"] == "direct"
        assert (row["ncu's flush"], row["timers' flush"], row["no flush"]) == (
            hits["ncu"],
            hits["flush"],
            hits["none"],
        )
        assert row["cold"] == ("NOT cold" if c == 1 else "cold")
    assert "the cold timers (cupti_cold) did NOT measure cold: on config(s) {1}" in ran.stdout
    shown = run_nsprof("results", "v.json", cwd=tmp_path, in_process=True)
    assert shown.returncode == 0, shown.stderr
    assert "did NOT measure cold: on config(s) {1}" in shown.stdout


def test_a_kernel_that_hits_l2_as_often_unflushed_cannot_tell(tmp_path):
    streaming = {"ncu": 3.0, "flush": 3.5, "none": 4.0}
    ran = _run(tmp_path, dict.fromkeys(range(4), streaming), "--save", "v.json")
    assert ran.returncode == 0, ran.stderr
    assert "cannot tell whether cupti_cold measured cold" in ran.stdout
    assert "did NOT" not in ran.stdout and "measured cold: their flush" not in ran.stdout
    saved = json.loads((tmp_path / "v.json").read_text())
    assert {r["cold"] for r in saved["l2_check"]} == {"cannot tell"}
    shown = run_nsprof("results", "v.json", cwd=tmp_path, in_process=True)  # read back, it says the same
    assert (
        "cannot tell whether cupti_cold measured cold" in shown.stdout
        and "measured cold: their" not in shown.stdout
    )


def test_cold_everywhere_is_said_once(tmp_path):
    ran = _run(tmp_path, {})
    assert ran.returncode == 0, ran.stderr
    assert (
        "the cold timers (cupti_cold) measured cold: their flush left the hit rate within 5 points of ncu's own flush on config(s) {0, 1, 2, 3}"
        in ran.stdout
    )


class _Recorder:
    """A device that records what the worker asks of it, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def flush_l2(self) -> None:
        self.calls.append("flush")

    def push(self, name: str) -> None:
        self.calls.append(f"push {name}")

    def pop(self) -> None:
        self.calls.append("pop")

    def sync(self) -> None:
        self.calls.append("sync")


def test_the_worker_flushes_before_the_ranges_of_the_reps_asked_for():
    from nsprof.worker.launch import measure_rep
    from nsprof.worker.protocol import Job

    job = Job(target="t.py:space", config_ids=[0], status="", reps=4, flushes=[True, False])
    device = _Recorder()
    for rep in job.rep_numbers(0):
        measure_rep(device, job, 0, "direct", rep, lambda: device.calls.append("launch"))
    opened = [i for i, call in enumerate(device.calls) if call.startswith("push nsprof")]
    flushed = [i for i, call in enumerate(device.calls) if call == "flush"]
    # reps 0 and 2 flush, each just before its outer range opens; reps 1 and 3 do not
    assert flushed == [opened[0] - 1, opened[2] - 1]
    assert device.calls.count("launch") == 4


def test_the_ncu_command_of_a_check_collects_the_hit_rate_alone_running_the_program_once_per_pass():
    from pathlib import Path

    from nsprof.drivers.ncu import NcuDriver
    from nsprof.settings import ProfileSettings

    driver = NcuDriver(Path("ncu"))
    checked = ProfileSettings(backend="ncu", l2_hit_rate=True, cache_control="none", flushes=(True, False))
    command = driver.build_command(checked, Path("job.json"), Path("report"))
    assert command[command.index("--metrics") + 1] == "gpu__time_duration.sum,lts__t_sector_hit_rate.pct"
    assert command[command.index("--cache-control") + 1] == "none"
    # kernel replay would save every reachable buffer through L2 between the worker's flush and the kernel
    assert command[command.index("--replay-mode") + 1] == "application"
    plain = driver.build_command(ProfileSettings(backend="ncu"), Path("job.json"), Path("report"))
    assert "lts__t_sector_hit_rate.pct" not in plain[plain.index("--metrics") + 1]
    assert "--replay-mode" not in plain  # ncu's default, kernel replay: one run of the program


NSYS_ONLY = """
import json
import sys

sys.path.insert(0, {tests!r})
from standins import StatusDriver, standin_timers

from nsprof.drivers import registry
from nsprof.settings import ValidateSettings
from nsprof.validate import validate

registry.register("nsys", type("StandinNsys", (StatusDriver,), {{"labels_like": registry.driver_class("nsys")}}))
registry.register("none", standin_timers(), ground_truth=False)
settings = ValidateSettings(
    timers=("cupti",), external=False, truths=("nsys",), modes=("direct",), reps=3, timer_reps=3,
    repeat_truth=False, l2_check=True,
)
(result,) = validate("t.py:space", settings)
print(json.dumps({{
    "measured": sorted({{(r.method, int(r.config_id)) for r in result.per_config.itertuples()}}),
    "failures": sorted(f"{{m}} {{c}}: {{why}}" for (m, c), why in result.failures.items()),
    "l2_rows": len(result.l2_check),
}}))
"""


def test_an_l2_check_whose_sessions_fail_keeps_what_validate_measured(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    configs = [{"i": c, "ns": TRUTH_NS[c]} for c in range(4)]
    (tmp_path / "t.py").write_text(TARGET.format(timer=TIMER_NS, configs=configs))
    program = tmp_path / "nsys_only.py"
    program.write_text(NSYS_ONLY.format(tests=str(Path(__file__).parent)))
    env = {**__import__("os").environ, "NSPROF_NCU": str(tmp_path / "no-ncu")}
    ran = subprocess.run(
        [sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert [("nsys:direct", c) for c in range(4)] == [
        tuple(m) for m in out["measured"] if m[0] == "nsys:direct"
    ]
    assert out["l2_rows"] == 0
    # each finalist, in each of the two sessions: the truth's three fastest (3, 1, 2) and the cold timer's pick (0)
    for session in ("ncu", "flushed"):
        failed = [f for f in out["failures"] if f.startswith(f"L2 check ({session}) ")]
        assert sorted(int(f.split()[3].rstrip(":")) for f in failed) == [0, 1, 2, 3], out["failures"]
        assert all("NSPROF_NCU=" in f and "no-ncu" in f for f in failed), failed


def test_without_ncu_the_check_is_refused_before_anything_is_measured(tmp_path):
    ran = run_nsprof(*VALIDATE, cwd=tmp_path, in_process=True, env={"NSPROF_NCU": str(tmp_path / "no-ncu")})
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "--l2-check" in lines[0] and "no-ncu" in lines[0], ran.stderr


SHAPED = """
import nsprof.space

SHAPES = [{{"M": 1}}, {{"M": 16}}]


class Launch:
    def __init__(self, config, shape):
        self.timer_ns = dict.fromkeys(("cupti", "cupti_cold"), 100.0 + config["i"])

    def __call__(self):
        return None


configs = {configs!r}
space = nsprof.space.Space(configs=configs, shapes=SHAPES, build=Launch, device="cpu")
"""


def test_each_shape_gets_its_own_finalists_rates(tmp_path):
    # the stand-in adds the shape's index to each rate, so a rate attached to the wrong shape shows
    hits = {0: COLD, 1: {"ncu": 20.0, "flush": 50.0, "none": 90.0}, 2: COLD}
    configs = [{"i": c, "ns_shapes": [1000.0 + c, 3000.0 - c], "l2_hit": hits[c]} for c in range(3)]
    (tmp_path / "t.py").write_text(SHAPED.format(configs=configs))
    ran = run_nsprof(
        *VALIDATE,
        "--save",
        "v.json",
        cwd=tmp_path,
        standins=True,
        env={"NSPROF_STANDIN_TIMERS": "1"},
        in_process=True,
    )
    assert ran.returncode == 0, ran.stderr
    for shape in json.loads((tmp_path / "v.json").read_text())["shapes"]:
        at = shape["shape"]
        got = {
            r["config_id"]: (r["ncu's flush"], r["timers' flush"], r["no flush"]) for r in shape["l2_check"]
        }
        assert got == {c: (h["ncu"] + at, h["flush"] + at, h["none"] + at) for c, h in hits.items()}
    assert ran.stdout.count("did NOT measure cold: on config(s) {1}") == 2


def test_a_rate_no_session_measured_is_said_so_not_read_as_the_kernels():
    from nsprof.analysis.l2 import check_table
    from nsprof.render.validate_tables import format_l2_check

    # the flushed session measured nothing: only ncu's flush has rates
    rows = [
        {"config_id": c, "shape": None, "mode": "graph", "condition": "ncu's flush", "l2_hit_pct": 12.0}
        for c in (0, 1)
    ]
    table = check_table(rows)
    assert list(table["cold"]) == ["not measured", "not measured"]
    said = format_l2_check(table, ["cupti_cold"])
    assert "not measured under every condition: config(s) {0, 1}" in said
    assert "cannot tell" not in said and "measured cold:" not in said


def test_each_config_is_told_done_once_when_ncu_runs_the_worker_once_per_pass(tmp_path, monkeypatch):
    """The check's sessions replay whole runs (ncu --replay-mode application): the worker runs once per
    pass, each run appending to the one status file; each finalist is told done once, and its rows are
    those of one run (ncu merges a kernel's passes into one result)."""
    from conftest import FIXTURES

    from nsprof.session import run_session
    from nsprof.settings import ProfileSettings

    monkeypatch.syspath_prepend(str(FIXTURES.parent))
    from standins import L2_CHECK_PASSES, StatusDriver

    driver = StatusDriver.for_session()
    monkeypatch.setattr("nsprof.drivers.registry.get_driver", lambda name: driver)
    configs = [{"i": c, "ns": TRUTH_NS[c], "l2_hit": COLD} for c in range(4)]
    (tmp_path / "t.py").write_text(TARGET.format(timer=TIMER_NS, configs=configs))
    settings = ProfileSettings(
        backend="ncu", modes=("direct",), reps=2, warmup=0, cache_control="none", l2_hit_rate=True,
        flushes=(True, False), work_dir=tmp_path / "w",
    )  # fmt: skip
    events = []
    result = run_session(
        f"{tmp_path / 't.py'}:space", 4, settings, on_progress=lambda e, c, d: events.append((e, c))
    )
    (status,) = (tmp_path / "w").glob("part*.status")
    assert status.read_text().count("\npid ") + status.read_text().startswith("pid ") == L2_CHECK_PASSES
    assert sorted(c for e, c in events if e == "done") == [0, 1, 2, 3]
    assert not result.failures
    assert sorted(result.frame.groupby("config_id").size().tolist()) == [2 * 2] * 4  # reps x kernels, once
