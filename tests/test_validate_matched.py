"""`nsprof validate --matched` end to end on CPU: stand-in drivers registered through
nsprof.drivers.registry, real worker processes.

The truth "cond" is a stand-in profiler that honours clock_control and cache_control: each
config's duration depends on the condition it was run under (`NS` below, keyed by
"clock_control-cache_control"). The fast timers' bare worker is a stand-in too
(tests/targets/standin_timers.py, registered as the "none" backend): cupti (warm L2) gives each
config its clocks-free warm-L2 value and cupti_cold its clocks-free cold-L2 value, scaled. So
matched to its own condition each timer ranks like the truth exactly, and against the truth at
base clocks with flushed caches it does not. The τ values expected are counted here by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver, standin_timers  # noqa: E402

from nsprof.drivers import registry  # noqa: E402

# per config: the truth's duration under each (clock_control, cache_control)
NS = [
    {"base-all": 1000, "none-all": 900, "none-none": 700},
    {"base-all": 1100, "none-all": 800, "none-none": 750},
    {"base-all": 1200, "none-all": 1000, "none-none": 600},
    {"base-all": 1300, "none-all": 1100, "none-none": 650},
]
TARGET = f"""
import nsprof.space

NS = {NS!r}


class Launch:
    def __init__(self, config):
        self.timer_ns = {{"cupti": 0.8 * config["by_condition"]["none-none"], "cupti_cold": 0.9 * config["by_condition"]["none-all"]}}

    def __call__(self):
        return None


space = nsprof.space.Space(configs=[{{"by_condition": ns}} for ns in NS], build=Launch, device="cpu")
"""


class ConditionDriver(StatusDriver):
    """A profiler stand-in that controls clocks and caches, as ncu does."""

    name = "cond"
    controls_conditions = True
    sessions: list[tuple[str, str]] = []  # (clock_control, cache_control) of every session built

    @classmethod
    def labels(cls, settings):
        return {"clock_control": settings.clock_control, "cache_control": settings.cache_control}

    def build_command(self, settings, job_file, report_base):
        ConditionDriver.sessions.append((settings.clock_control, settings.cache_control))
        return super().build_command(settings, job_file, report_base)

    def read(self, report, settings):
        frame = super().read(report, settings)
        key = f"{settings.clock_control}-{settings.cache_control}"
        frame["duration_ns"] = [float(NS[int(c)][key]) for c in frame["config_id"]]
        return frame


@pytest.fixture
def target(tmp_path):
    ConditionDriver.sessions = []
    registry.register("cond", ConditionDriver)
    registry.register("none", standin_timers(), ground_truth=False)
    (tmp_path / "cond_target.py").write_text(TARGET)
    yield str(tmp_path / "cond_target.py") + ":space"
    registry.register("none", "nsprof.drivers.none:PlainDriver", ground_truth=False)
    registry.unregister("cond")


def tau(a, b):
    pairs = [(a[i] - a[j], b[i] - b[j]) for i in range(len(a)) for j in range(i + 1, len(a))]
    return sum(1 if x * y > 0 else -1 for x, y in pairs) / len(pairs)  # no ties in these values


def test_validate_matched_measures_ncu_like_truths_under_each_timers_conditions(target, tmp_path):
    from nsprof.cli import cli

    saved = tmp_path / "validate.json"
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            target,
            "--timers",
            "cupti",
            "--no-external",
            "--truth",
            "cond",
            "--matched",
            "--mode",
            "direct",
            "--reps",
            "2",
            "--timer-reps",
            "3",
            "--timeout",
            "30",
            "--work-dir",
            str(tmp_path / "work"),
            "--save",
            str(saved),
        ],
    )
    assert result.exit_code == 0, result.output
    # the unmatched truth and both matched conditions, each run twice (its floor)
    assert sorted(ConditionDriver.sessions) == sorted(
        [("base", "all")] * 2 + [("none", "all")] * 2 + [("none", "none")] * 2
    )
    for folder in (
        "cond_a",
        "cond_b",
        "cond-free-cold_a",
        "cond-free-cold_b",
        "cond-free-warm_a",
        "cond-free-warm_b",
    ):
        assert (tmp_path / "work" / folder).is_dir()

    warm = [ns["none-none"] for ns in NS]
    cold = [ns["none-all"] for ns in NS]
    base = [ns["base-all"] for ns in NS]
    assert tau(warm, base) < tau(cold, base) < 1.0  # matched is better than unmatched, for both timers

    document = json.loads(saved.read_text())
    matched = {(r["timer"], r["matched_truth"]): r for r in document["matched"]}
    assert set(matched) == {("cupti", "cond@free-warm:direct"), ("cupti_cold", "cond@free-cold:direct")}
    for timer, values in (("cupti", warm), ("cupti_cold", cold)):
        row = next(r for r in document["matched"] if r["timer"] == timer)
        assert row["matched_tau"] == pytest.approx(1.0) and row["matched_floor"] == pytest.approx(1.0)
        assert row["matched_at_floor"] is True
        assert row["unmatched_truth"] == "cond:direct"
        assert row["unmatched_tau"] == pytest.approx(tau(values, base))
        assert row["unmatched_at_floor"] is False
    assert "--clock-control none --cache-control none" in document["conditions"]["cond@free-warm:direct"]
    assert "--clock-control base --cache-control all" in document["conditions"]["cond:direct"]
    assert (
        "L2 warm" in document["conditions"]["cupti"] and "L2 flushed" in document["conditions"]["cupti_cold"]
    )
    stability = {r["truth"]: r["winners"] for r in document["noise_floor"]}
    assert stability == {
        "cond:direct": "same",
        "cond@free-cold:direct": "same",
        "cond@free-warm:direct": "same",
    }

    # the table: each timer's matched τ beside that truth's floor, and the unmatched one beside its own
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("matched conditions:"))
    header = lines[start + 1].split()
    assert header[:4] == ["timer", "L2", "mode", "matched"]
    cells = {line.split()[0]: line.split() for line in lines[start + 3 : start + 5]}
    assert cells["cupti"][1:7] == ["warm", "direct", "cond@free-warm:direct", "1.000", "1.000", "yes"]
    assert cells["cupti"][7:] == ["cond:direct", f"{tau(warm, base):.3f}", "1.000", "no"]
    assert cells["cupti_cold"][1:7] == ["cold", "direct", "cond@free-cold:direct", "1.000", "1.000", "yes"]
    assert cells["cupti_cold"][7:] == ["cond:direct", f"{tau(cold, base):.3f}", "1.000", "no"]
    assert "vs cond@free-warm:direct: best cupti τ 1.00, reaches that truth's floor τ 1.00" in result.output
    assert "how each was taken:" in result.output and "same winner: config 2" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--truth", "nsys@free-warm"], "nsys cannot set clocks or caches, so it takes no condition"),
        (["--truth", "ncu,nsys@base-cold"], "'nsys@base-cold': nsys cannot set clocks or caches"),
        (["--truth", "none@base-cold"], "'none@base-cold': none cannot set clocks or caches"),
        (["--truth", "nsys", "--matched"], "--matched needs a truth that controls clocks and caches"),
        (["--truth", "ncu@fast-cold"], "CLOCK-L2"),
        (["--truth", "perf@free-warm"], "choose from"),
    ],
)
def test_a_condition_a_truth_cannot_take_is_one_line(args, message, tmp_path):
    from nsprof.cli import cli

    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "never_read.py") + ":space", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error")]) == 1
