"""`nsprof validate`: fast timers against ground truth, over a config space.

Orchestration over nsprof.measure's Backends:
1. fast timers (nsprof's own, and TileLang's / Triton's where installed) measure every
   config in one child process (crash-isolated like the profilers' worker);
2. the ground truths (ncu and nsys by default) measure every config, direct and as graph
   nodes, twice when asked: the second run gives each ground truth's own repeatability
   (the noise floor);
3. nsprof.analysis.agreement compares: bias, Kendall τ, Spearman ρ, same best, regret.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from nsprof.cluster import sharded
from nsprof.measure import FastTimers, GroundTruth
from nsprof.settings import ValidateSettings

__all__ = ["ValidateResult", "ValidateSettings", "run_timers", "run_truth", "timer_groups", "validate"]


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


def timer_groups(names: list[str]) -> list[list[str]]:
    """Timers that must not share a process: CUPTI clients (ours, torch.profiler behind
    TileLang's cupti backend) stay attached and slow every later launch (seen on the H200:
    event timings doubled and CUPTI kernel durations doubled after torch.profiler ran)."""
    from nsprof.timers.specs import EXTERNAL

    plain = [n for n in names if n not in EXTERNAL and not n.startswith("cupti")]
    own_cupti = [n for n in names if n.startswith("cupti")]
    external = [n for n in names if n in EXTERNAL]
    return [group for group in (plain, own_cupti, external) if group]


def run_timers(target: str, n_configs: int, names: list[str], settings: ValidateSettings, work_dir: Path,
               on_progress=None) -> tuple[list[dict], dict]:
    """Every timer group in its own worker process (a FastTimers backend each): per-config rows
    {config_id, method, value_ns} and failures {(method or "timers", config_id): reason}."""
    rows: list[dict] = []
    failures: dict = {}
    for index, group in enumerate(timer_groups(names)):
        timers = FastTimers(group, settings.profile, work_dir / f"timers{index}", timer_reps=settings.timer_reps)
        backend = sharded(timers, settings.cluster)
        measured = backend.run(target, None, n_configs=n_configs, on_progress=on_progress)
        failures.update({("timers", cfg): reason for cfg, reason in measured.failures.items()})
        for r in measured.frame.itertuples():
            if r.source == timers.failure_source:
                continue  # the worker died on this config: in failures above
            rows.append({"config_id": int(r.config_id), "method": r.source, "value_ns": r.duration_ns})
            if isinstance(r.error, str):
                failures[(r.source, int(r.config_id))] = r.error
    return rows, failures


def run_truth(target: str, backend: str, settings: ValidateSettings, work_dir: Path, on_progress=None, space=None):
    """One ground truth over every config: per-config rows {config_id, method, value_ns}
    (method: backend:mode) and failures {(backend, config_id): reason}."""
    from nsprof.profile import config_summary, profile_result

    profile_settings = replace(settings.profile, backend=backend, work_dir=work_dir)
    result = profile_result(target, profile_settings, on_progress=on_progress, space=space,
                            backend=sharded(GroundTruth(profile_settings), settings.cluster) if settings.cluster else None)
    summary = config_summary(result.frame)
    rows = [{"config_id": int(r.config_id), "method": f"{backend}:{r.mode}", "value_ns": r.median_ns}
            for r in summary.itertuples() if isinstance(r.mode, str)]
    failures = {(backend, int(c)): reason for c, reason in result.failures.items()}
    return rows, failures


def validate(target: str, settings: ValidateSettings | None = None,
             on_stage: Callable[[str, int], Callable[[str, int, str], None]] | None = None) -> ValidateResult:
    """Run every step; `on_stage(name, n_configs)` returns a progress callback for that stage."""
    import pandas as pd

    from nsprof.analysis import agreement as agree
    from nsprof.profile import precompile
    from nsprof.render.tables import format_verdict
    from nsprof.space import load_target
    from nsprof.timers.specs import available_external, expand

    settings = settings or ValidateSettings()
    space = load_target(target)
    n = len(space.configs)
    if settings.cluster is None:  # a cluster compiles each batch where it runs
        precompile(space)
    work_dir = Path(settings.work_dir or tempfile.mkdtemp(prefix="nsprof-validate-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    names = expand(list(settings.timers)) + (available_external() if settings.external else [])
    stage = on_stage or (lambda name, count: None)
    rows, failures = run_timers(target, n, names, settings, work_dir, stage("timers", n * len(timer_groups(names))))
    truths, repeat_rows = [], []
    for backend in settings.truths:
        truth_rows, truth_failures = run_truth(target, backend, settings, work_dir / f"{backend}_a",
                                               stage(backend, n), space)
        rows += truth_rows
        failures.update(truth_failures)
        truths += [f"{backend}:{mode}" for mode in settings.modes]
        if settings.repeat_truth:
            again, _ = run_truth(target, backend, settings, work_dir / f"{backend}_b", stage(f"{backend} again", n),
                                 space)
            repeat_rows += again
    per_config = pd.DataFrame(rows, columns=["config_id", "method", "value_ns"])
    timers = [m for m in names if m in set(per_config["method"])]
    table = agree.agreement(per_config, timers, truths)
    floors = agree.mode_floor(per_config, truths)  # direct vs graph of one tool, when not repeated
    if repeat_rows:
        first = per_config[per_config["method"].isin(truths)]
        floors = agree.noise_floor(first, pd.DataFrame(repeat_rows, columns=["config_id", "method", "value_ns"]))
    verdict = format_verdict(table, floors)
    return ValidateResult(per_config=per_config, agreement=table, floors=floors, verdict=verdict, timers=timers,
                          truths=truths, configs=space.configs, failures=failures)
