"""`nsprof validate`: fast timers against ground truth, over a config space.

1. fast timers (nsprof's own, and TileLang's / Triton's where installed) measure every
   config in one child process (crash-isolated like the profilers' worker);
2. ncu and nsys measure every config, direct and as graph nodes, twice when asked: the
   second run gives each ground truth's own repeatability (the noise floor);
3. nsprof.agreement compares: bias, Kendall τ, Spearman ρ, same best, regret.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nsprof.settings import ProfileSettings


@dataclass(frozen=True)
class ValidateSettings:
    timers: tuple[str, ...] = ("event", "cupti", "graph")
    external: bool = True
    truths: tuple[str, ...] = ("ncu", "nsys")
    modes: tuple[str, ...] = ("direct", "graph")
    reps: int = 5  # ground-truth reps per config and mode
    timer_reps: int = 100
    repeat_truth: bool = True
    timeout_s: float = 120.0
    work_dir: Path | None = None
    wait: bool = False  # wait for another nsprof measuring on this GPU instead of failing


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
    """Every timer group in its own worker process; rows and failures of all of them."""
    rows: list[dict] = []
    failures: dict = {}
    for index, group in enumerate(timer_groups(names)):
        group_rows, group_failures, _ = _run_timer_group(target, n_configs, group, settings,
                                                         work_dir / f"timers{index}", on_progress)
        rows += group_rows
        failures.update(group_failures)
    return rows, failures


def _run_timer_group(target: str, n_configs: int, names: list[str], settings: ValidateSettings,
                     work_dir: Path, on_progress=None, config_ids: list[int] | None = None,
                     on_interrupt=None) -> tuple[list[dict], dict, dict | None]:
    """(rows, failures, the device the worker measured on). on_interrupt(rows) gets the rows
    written so far when Ctrl-C or SIGTERM stops the group."""
    from nsprof.session import run_session

    work_dir.mkdir(parents=True, exist_ok=True)
    results = work_dir / "timers.jsonl"
    results.write_text("")

    def written() -> list[dict]:
        return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]

    profile_settings = ProfileSettings(backend="none", modes=("direct",), reps=1, warmup=3,
                                       timeout_s=settings.timeout_s, work_dir=work_dir, wait_gpu=settings.wait)
    try:
        session = run_session(target, n_configs, profile_settings, config_ids=config_ids, on_progress=on_progress,
                              job_extra={"task": "timers", "timers": names, "timer_reps": settings.timer_reps,
                                         "results": str(results)})
    except KeyboardInterrupt:
        if on_interrupt is not None:
            on_interrupt(written())
        raise
    failures = {("timers", cfg): reason for cfg, reason in session.failures.items()}
    return written(), failures, session.device


def run_truth(target: str, backend: str, settings: ValidateSettings, work_dir: Path, on_progress=None):
    from nsprof.profile import config_summary, profile

    frame = profile(target, ProfileSettings(backend=backend, modes=settings.modes, reps=settings.reps,
                                            timeout_s=settings.timeout_s, work_dir=work_dir, wait_gpu=settings.wait),
                    on_progress=on_progress)
    summary = config_summary(frame)
    rows = [{"config_id": int(r.config_id), "method": f"{backend}:{r.mode}", "value_ns": r.median_ns}
            for r in summary.itertuples() if isinstance(r.mode, str)]
    failures = {(backend, int(c)): reason for c, reason in frame.attrs["failures"].items()}
    return rows, failures


def validate(target: str, settings: ValidateSettings | None = None,
             on_stage: Callable[[str, int], Callable[[str, int, str], None]] | None = None) -> ValidateResult:
    """Run every step; `on_stage(name, n_configs)` returns a progress callback for that stage."""
    import pandas as pd

    from nsprof import agreement as agree
    from nsprof.profile import precompile
    from nsprof.space import load_target
    from nsprof.timers.specs import available_external, expand

    settings = settings or ValidateSettings()
    space = load_target(target)
    n = len(space.configs)
    precompile(space)
    work_dir = Path(settings.work_dir or tempfile.mkdtemp(prefix="nsprof-validate-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    names = expand(list(settings.timers)) + (available_external() if settings.external else [])
    stage = on_stage or (lambda name, count: None)
    timer_rows, failures = run_timers(target, n, names, settings, work_dir,
                                      stage("timers", n * len(timer_groups(names))))
    rows = [{"config_id": r["config_id"], "method": r["method"], "value_ns": r.get("median_ns", float("nan"))}
            for r in timer_rows]
    for r in timer_rows:
        if "error" in r:
            failures[(r["method"], r["config_id"])] = r["error"]
    truths, repeat_rows = [], []
    for backend in settings.truths:
        truth_rows, truth_failures = run_truth(target, backend, settings, work_dir / f"{backend}_a",
                                               stage(backend, n))
        rows += truth_rows
        failures.update(truth_failures)
        truths += [f"{backend}:{mode}" for mode in settings.modes]
        if settings.repeat_truth:
            again, _ = run_truth(target, backend, settings, work_dir / f"{backend}_b", stage(f"{backend} again", n))
            repeat_rows += again
    per_config = pd.DataFrame(rows, columns=["config_id", "method", "value_ns"])
    timers = [m for m in names if m in set(per_config["method"])]
    table = agree.agreement(per_config, timers, truths)
    floors = agree.mode_floor(per_config, truths)  # direct vs graph of one tool, when not repeated
    if repeat_rows:
        first = per_config[per_config["method"].isin(truths)]
        floors = agree.noise_floor(first, pd.DataFrame(repeat_rows, columns=["config_id", "method", "value_ns"]))
    verdict = agree.verdict(table, floors)
    return ValidateResult(per_config=per_config, agreement=table, floors=floors, verdict=verdict, timers=timers,
                          truths=truths, configs=space.configs, failures=failures)
