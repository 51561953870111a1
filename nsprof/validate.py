"""`nsprof validate`: fast timers against ground truth, over a config space.

Orchestration over nsprof.measure's Backends:
1. fast timers (nsprof's own, and TileLang's / Triton's where installed) measure every
   config in one child process (crash-isolated like the profilers' worker);
2. the ground truths (ncu and nsys by default) measure every config, direct and as graph
   nodes, twice when asked: the second run gives each ground truth's own repeatability
   (the noise floor);
3. nsprof.analysis.agreement compares: bias, Kendall τ, Spearman ρ, same best, regret; beside
   each truth's floor, whether its two runs' winners were the same config, or each inside the
   other's tie set (nsprof.analysis.confidence);
4. with matched conditions (`ncu@free-cold`, `ncu@free-warm`, or settings.matched), each timer
   against the truth taken under its own conditions: the card's clocks, its own L2 state;
5. with settings.l2_check, whether the timers that claim a cold L2 measure the finalists cold
   (nsprof.l2check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from nsprof.analysis import l2
from nsprof.cluster import sharded
from nsprof.errors import NsprofError
from nsprof.measure import FastTimers, GroundTruth, Request
from nsprof.session import work_folder
from nsprof.settings import Truth, ValidateSettings

__all__ = [
    "ValidateResult",
    "ValidateSettings",
    "matched_pairs",
    "resolve_truths",
    "run_timers",
    "run_truth",
    "timer_groups",
    "truth_rows",
    "validate",
]
# --matched: the conditions each timer is matched with (clocks free: the timers run at the card's own)
MATCHED_CLOCK = "free"


@dataclass
class ValidateResult:
    per_config: object  # long DataFrame: config_id, method, value_ns
    agreement: object
    floors: object
    verdict: str
    timers: list[str]
    truths: list[str]
    configs: list
    failures: dict = field(default_factory=dict)  # (method, config_id) -> reason
    matched: object = None  # analysis.agreement.matched_agreement's table (None: no matched truth measured)
    conditions: dict = field(default_factory=dict)  # method -> how it was taken, in words
    repeat: object = None  # the repeated truth runs' per-config table (None: not repeated)
    # A target with shapes is validated at each shape on its own: the shape's index and value
    shape: int | None = None
    shape_value: object = None
    l2_check: object = None  # nsprof.l2check.check_table's (None: not checked)


def timer_groups(names: list[str]) -> list[list[str]]:
    """Timers that must not share a process: CUPTI clients (ours, torch.profiler behind
    TileLang's cupti backend) stay attached and slow every later launch (seen on the H200:
    event timings doubled and CUPTI kernel durations doubled after torch.profiler ran).
    Interleaved timers run apart from plain ones: their worker holds every config at once."""
    from nsprof.timers.specs import EXTERNAL, INTERLEAVED

    def kind(name: str) -> tuple[bool, bool]:
        return name in INTERLEAVED, name.startswith("cupti")

    own = [n for n in names if n not in EXTERNAL]
    groups = [
        [n for n in own if kind(n) == k] for k in ((False, False), (False, True), (True, False), (True, True))
    ]
    external = [n for n in names if n in EXTERNAL]
    profiled = [n for n in external if n == "tilelang_cupti"]  # torch.profiler: a CUPTI client
    return [group for group in (*groups, [n for n in external if n not in profiled], profiled) if group]


def run_timers(
    target: str,
    space,
    names: list[str],
    settings: ValidateSettings,
    work_dir: Path,
    on_progress=None,
) -> tuple[list[dict], dict, list[str]]:
    """Every timer group in its own worker process (a FastTimers backend each), over every point of
    `space` (each config at each shape; the worker checks the target against it), with the target's
    compile step beside it where it has one: per-config rows {config_id, shape, method, value_ns, clock_hz}
    (an interleaved timer's: the median of its rounds), failures {(method or "timers", config_id,
    shape): reason} and the runs' notes (an interleaved timer's throttle check)."""
    import pandas as pd

    from nsprof.profile import measured_as_read

    points = space.points
    rows: list[dict] = []
    failures: dict = {}
    notes: list[str] = []
    for index, methods in enumerate(timer_groups(names)):
        timers = FastTimers(
            methods, settings.profile, work_dir / f"timers{index}", timer_reps=settings.timer_reps
        )
        backend = sharded(timers, settings.cluster)
        request = Request(
            target,
            points.all(),
            points.n_configs,
            points.n_shapes,
            expect=measured_as_read(space),
            compiles=space.compiles,
        )
        measured = backend.measure(request, on_progress=on_progress)
        notes += measured.notes
        frame = measured.frame[measured.frame["source"] != timers.failure_source]  # died: in failures
        keys = ["config_id", "shape", "source"]
        for (config_id, shape, method), group in frame.groupby(keys, sort=False, dropna=False):
            where = {"config_id": int(config_id), "shape": None if pd.isna(shape) else int(shape)}
            errors = group["error"].dropna()
            if len(errors):
                failures[(method, *where.values())] = str(errors.iloc[0])
            rows.append(
                {
                    **where,
                    "method": method,
                    "value_ns": float(group["duration_ns"].median()),
                    "clock_hz": float(group["clock_hz"].median()),
                }
            )
        for point, reason in measured.failures.items():  # the configs the worker failed or died on
            where = points.split(point)
            if not all((method, *where) in failures for method in methods):  # not each method's own line
                failures[("timers", *where)] = reason
    return rows, failures, notes


def resolve_truths(settings: ValidateSettings) -> list[Truth]:
    """settings.truths as Truths, checked against their drivers (a condition only where the
    driver controls clocks and caches), plus with settings.matched every such truth's
    clocks-free cold-L2 and warm-L2 conditions; duplicates dropped, order kept."""
    from nsprof.truth import conditioned

    truths = list(settings.truths)  # a condition only where the driver takes one (Truth.parse)
    if settings.matched:
        bases = [t for t in truths if t.backend in conditioned()]
        if not bases:
            raise NsprofError(
                f"--matched needs a truth that controls clocks and caches "
                f"({', '.join(conditioned()) or 'ncu'}) among --truth"
            )
        truths += [Truth(t.backend, MATCHED_CLOCK, l2) for t in bases for l2 in ("cold", "warm")]
    return list(dict.fromkeys(truths))


def truth_profile(truth: Truth, settings: ValidateSettings, work_dir: Path):
    """The session settings of one truth's run: the backend, its condition, the run's folder."""
    return replace(
        settings.profile,
        backend=truth.backend,
        clock_control=truth.clock_control,
        cache_control=truth.cache_control,
        work_dir=work_dir,
    )


def run_truth(target: str, truth: Truth, settings: ValidateSettings, work_dir: Path, on_progress, space):
    """One ground truth (under its condition) over every config of `space` at each of its shapes:
    per-config rows {config_id, shape, method, value_ns, ci_low_ns, ci_high_ns, clock_hz} (method:
    Truth.method(mode), value: the median of the reps, with the median's interval) and failures
    {(truth name, config_id, shape): reason}."""
    from nsprof.profile import profile_result

    profile_settings = truth_profile(truth, settings, work_dir)
    result = profile_result(
        target,
        profile_settings,
        on_progress=on_progress,
        space=space,
        backend=sharded(GroundTruth(profile_settings), settings.cluster) if settings.cluster else None,
    )
    points = space.points
    failures = {(truth.name, *points.split(int(p))): reason for p, reason in result.failures.items()}
    return truth_rows(result.frame, truth), failures


def truth_rows(frame, truth: Truth) -> list[dict]:
    """A truth run's tidy rows as validate's per-config rows: per config and mode the median of
    the reps (value_ns), the median's interval (ci_low_ns, ci_high_ns) and the median clock."""
    from nsprof.profile import config_summary

    summary = config_summary(frame)
    return [
        {
            "config_id": int(r.config_id),
            "shape": int(r.shape) if "shape" in summary and r.shape == r.shape else None,
            "method": truth.method(r.mode),
            "value_ns": r.median_ns,
            "ci_low_ns": r.ci_low_ns,
            "ci_high_ns": r.ci_high_ns,
            "clock_hz": r.median_clock_hz,
        }
        for r in summary.itertuples()
        if isinstance(r.mode, str)
    ]


def matched_pairs(timers: list[str], truths: list[Truth], modes) -> list[dict]:
    """For each timer of known L2 state, each measured mode and each tool measured under a
    matched condition: the truth under the timer's own conditions (clocks free, its L2 state)
    and the unmatched one (the tool's defaults: base clocks, L2 flushed; None if not measured)."""
    from nsprof.timers.specs import l2_state

    names = {t.name for t in truths}
    pairs = []
    for timer in timers:
        l2 = l2_state(timer)
        if l2 is None:
            continue
        for backend in dict.fromkeys(t.backend for t in truths):
            matched = Truth(backend, MATCHED_CLOCK, l2)
            if matched.name not in names:
                continue
            for mode in modes:
                pairs.append(
                    {
                        "timer": timer,
                        "l2": l2,
                        "mode": mode,
                        "matched_truth": matched.method(mode),
                        "unmatched_truth": Truth(backend).method(mode) if backend in names else None,
                    }
                )
    return pairs


def describe_truth(truth: Truth, settings: ValidateSettings, rows: list[dict]) -> str:
    """How one truth's numbers were taken, in words: the tool, its condition, the clock it measured."""
    import math
    import statistics

    from nsprof.drivers.registry import driver_class

    driver = driver_class(truth.backend)
    profile = truth_profile(truth, settings, Path("."))
    words = driver.conditions(profile) or "the tool's own conditions"
    if driver.controls_conditions:
        words = (
            f"{truth.backend} --clock-control {profile.clock_control} --cache-control {profile.cache_control} "
            f"({words})"
        )
    clocks = [r["clock_hz"] for r in rows if r.get("clock_hz") is not None and not math.isnan(r["clock_hz"])]
    if clocks:
        words += f", measured median clock {statistics.median(clocks) / 1e9:.2f} GHz"
    return words


def _clock_words(rows: list[dict], method: str) -> str:
    """ ", SM clock median X GHz (NVML)" over a timer's per-config rows; "" where none was read."""
    import math
    import statistics

    clocks = [
        r["clock_hz"] for r in rows if r["method"] == method and not math.isnan(r.get("clock_hz", math.nan))
    ]
    return f", SM clock median {statistics.median(clocks) / 1e9:.2f} GHz (NVML)" if clocks else ""


def _measure(
    target: str,
    space,
    names: list[str],
    conditioned: list[Truth],
    settings: ValidateSettings,
    work_dir: Path,
    stage,
):
    """Every timer, then every truth (twice with repeat_truth), their runs in `work_dir`: per-config
    rows, failures, the truths' methods, the repeated truths' rows and how each method was taken."""
    from nsprof.timers.specs import conditions as conditions_of

    n = len(space.configs) * max(1, space.n_shapes)
    rows, failures, notes = run_timers(
        target, space, names, settings, work_dir, stage("timers", n * len(timer_groups(names)))
    )
    conditions = {name: conditions_of(name) + _clock_words(rows, name) for name in names}
    for note in notes:  # "<method>: what its throttle check did"
        method, _, words = note.partition(": ")
        if method in conditions:
            conditions[method] += f"; {words}"
    truths, repeat_rows = [], []
    for truth in conditioned:
        folder = truth.name.replace("@", "-")
        truth_rows, truth_failures = run_truth(
            target, truth, settings, work_dir / f"{folder}_a", stage(truth.name, n), space
        )
        rows += truth_rows
        failures.update(truth_failures)
        truths += [truth.method(mode) for mode in settings.modes]
        lost = ""
        if settings.repeat_truth:
            again, again_failed = run_truth(
                target, truth, settings, work_dir / f"{folder}_b", stage(f"{truth.name} again", n), space
            )
            repeat_rows += again
            lost = _lost_in_repeat(again_failed, truth_failures)
        for mode in settings.modes:
            conditions[truth.method(mode)] = (
                describe_truth(truth, settings, [r for r in truth_rows if r["method"] == truth.method(mode)])
                + (", kernel node of a replayed graph" if mode == "graph" else ", direct launch")
                + lost
            )
    return rows, failures, truths, repeat_rows, conditions


def _lost_in_repeat(again_failed: dict, failed: dict) -> str:
    """Words for the configs a truth's repeat failed on that its first run measured (left out of its floor,
    which compares only configs both runs measured); "" where none."""
    from nsprof.reports.checks import one_line

    lost = {key: why for key, why in again_failed.items() if key not in failed}
    if not lost:
        return ""
    (_, config_id, _), why = next(iter(lost.items()))
    return (
        f"; its repeat failed on {len(lost)} config(s) the first run measured, left out of its floor "
        f"(config {config_id}: {one_line(getattr(why, 'reason', why), 120)})"
    )


def validate(
    target: str,
    settings: ValidateSettings | None = None,
    on_stage: Callable[[str, int], Callable[[str, int, str], None]] | None = None,
    space=None,
) -> list[ValidateResult]:
    """Run every step: one ValidateResult per shape of the target (one for a target without shapes),
    every shape's points measured in each of the timers' and truths' sessions; `on_stage(name,
    n_points)` returns a progress callback for that stage. `space`: the target's Space where the
    caller has loaded it already."""
    from nsprof.space import load_target
    from nsprof.timers.specs import available_external, expand

    settings = settings or ValidateSettings()
    conditioned = resolve_truths(settings)  # a truth that takes no condition: one line, before any work
    space = space or load_target(target)
    names = expand(list(settings.timers)) + (available_external() if settings.external else [])
    stage = on_stage or (lambda name, count: None)
    with work_folder(settings.work_dir, "nsprof-validate-") as work_dir:  # a temporary one is removed
        rows, failures, truths, repeat_rows, conditions = _measure(
            target, space, names, conditioned, settings, work_dir, stage
        )
        measured = {r["method"] for r in rows}
        timers = [m for m in names if m in measured]
        checked = _l2_check(target, space, rows, timers, truths, settings, work_dir, stage, failures)
    conditions = {m: conditions[m] for m in [*timers, *truths] if m in conditions}
    pairs = matched_pairs(timers, conditioned, settings.modes)
    return [
        ValidateResult(
            **_compared(
                [r for r in rows if r["shape"] == shape],
                [r for r in repeat_rows if r["shape"] == shape],
                timers,
                truths,
                pairs,
            ),
            timers=timers,
            truths=truths,
            configs=space.configs,
            failures={(m, c): why for (m, c, at), why in failures.items() if at == shape},
            conditions=conditions,
            shape=shape,
            shape_value=None if shape is None else space.shapes[shape],
            l2_check=None if checked is None else l2.check_table([r for r in checked if r["shape"] == shape]),
        )
        for shape in ([None] if space.shapes is None else range(space.n_shapes))
    ]


def _l2_check(target, space, rows, timers, truths, settings: ValidateSettings, work_dir, stage, failures):
    """settings.l2_check's rows (nsprof.l2check.run_check) over every shape's finalists, by the first
    truth, its failures added to `failures`; None when not asked for, [] when none of the timers
    measured claims a cold L2."""
    if not settings.l2_check:
        return None
    cold = l2.cold_timers(timers)
    if not cold or not truths:  # asked for, nothing to check: said so (an empty table)
        return []
    layout = space.points
    shapes = [None] if space.shapes is None else range(space.n_shapes)
    points = [layout.id(c, s) for s in shapes for c in l2.finalists(rows, truths[0], cold, s)]
    profile = replace(settings.profile, work_dir=work_dir)
    from nsprof.l2check import run_check

    checked, failed = run_check(target, space, points, profile, stage, settings.cluster)
    failures.update(failed)
    return checked


def _compared(rows: list[dict], repeat_rows: list[dict], timers, truths, pairs) -> dict:
    """One shape's tables (ValidateResult's fields) from its rows: each timer against each truth, the
    truths' floors, the matched conditions, the verdict."""
    import pandas as pd

    from nsprof.analysis import agreement as agree
    from nsprof.render.validate_tables import format_verdict

    columns = ["config_id", "method", "value_ns", "ci_low_ns", "ci_high_ns", "clock_hz"]
    per_config = pd.DataFrame(rows, columns=columns)
    table = agree.agreement(per_config, timers, truths)
    first = per_config[per_config["method"].isin(truths)]
    repeat = pd.DataFrame(repeat_rows, columns=columns) if repeat_rows else None
    # the floor: each truth's repeated run, or without one its sibling mode (direct vs graph)
    floors = agree.noise_floor(first, repeat) if repeat is not None else agree.mode_floor(per_config, truths)
    floors = agree.winner_stability(floors, first, repeat)
    return {
        "per_config": per_config,
        "agreement": table,
        "floors": floors,
        "verdict": format_verdict(table, floors),
        "matched": agree.matched_agreement(table, floors, pairs) if pairs else None,
        "repeat": repeat,
    }
