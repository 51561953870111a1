"""Settings: frozen, validated on construction, and passed whole.

ProfileSettings is one measuring session's; TuneSettings and ValidateSettings hold the
commands' own choices and build the ProfileSettings they measure with once (`.profile`).
Backend names are the driver registry's (nsprof.drivers.registry, above this module), which
tells this module its names through backend_names_from when it is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from nsprof.errors import NsprofError

NO_PROFILER = "none"  # the backend that runs the worker bare (the fast timers' sessions)
CLOCK_CONTROLS = ("base", "none")
CACHE_CONTROLS = ("all", "none")
GRAPH_PROFILING = ("node", "graph")
MIN_PHASE_S = 60.0
MODES = ("direct", "graph")
STATS = ("median", "min")
# tune's --backend names of the fast timers -> nsprof timer method names (nsprof.timers.specs)
TIMER_BACKENDS = {"graph": "graph_warm", "graph_cold": "graph_cold", "cupti": "cupti", "cupti_cold": "cupti_cold",
                  "event": "event", "event_cold": "event_cold"}

_registry: dict[str, Callable[[], tuple[str, ...]]] = {}


def backend_names_from(names: Callable[[], tuple[str, ...]], truths: Callable[[], tuple[str, ...]]) -> None:
    """The driver registry installs its lists here: every backend name, and the ground truths
    (the backends that write a report)."""
    _registry["names"], _registry["truths"] = names, truths


def backends() -> tuple[str, ...]:
    """Every registered backend name."""
    return _registry["names"]() if "names" in _registry else ()


def ground_truths() -> tuple[str, ...]:
    """The registered backends that measure under a profiler (ncu, nsys, ...)."""
    return _registry["truths"]() if "truths" in _registry else ()


@dataclass(frozen=True)
class ProfileSettings:
    """Everything one profiling session needs, passed whole."""

    backend: str = "ncu"
    modes: tuple[str, ...] = ("direct", "graph")
    reps: int = 5
    warmup: int = 3
    timeout_s: float = 120.0  # per config, from its first warm-up launch to its last rep
    # Outside a config's window (the worker starting: profiler start-up, target import, CUDA
    # init; between configs; exiting: atexit handlers, driver teardown), the longest a worker
    # may go without a status line. None: phase_bound_s's default.
    phase_timeout_s: float | None = None
    clock_control: str = "base"  # ncu only
    cache_control: str = "all"  # ncu only
    graph_profiling: str = "node"  # ncu only
    python: str = field(default=sys.executable)
    work_dir: Path | None = None  # reports and logs; a temporary folder when None
    max_restarts: int = 50
    wait_gpu: bool = False  # wait for another nsprof profiling this GPU instead of failing at once

    def __post_init__(self) -> None:
        checks = [
            (self.backend in backends(), f"backend must be one of {backends()}"),
            (bool(self.modes) and all(m in ("direct", "graph") for m in self.modes),
             "modes must be direct and/or graph"),
            (self.reps >= 1, "reps must be at least 1"),
            (self.warmup >= 0, "warmup must be 0 or more"),
            (self.timeout_s > 0, "timeout must be positive"),
            (self.phase_timeout_s is None or self.phase_timeout_s > 0, "phase timeout must be positive"),
            (self.clock_control in CLOCK_CONTROLS, f"clock control must be one of {CLOCK_CONTROLS}"),
            (self.cache_control in CACHE_CONTROLS, f"cache control must be one of {CACHE_CONTROLS}"),
            (self.graph_profiling in GRAPH_PROFILING, f"graph profiling must be one of {GRAPH_PROFILING}"),
        ]
        for ok, message in checks:
            if not ok:
                raise NsprofError(message)

    @property
    def phase_bound_s(self) -> float:
        """The bound on each phase outside a config's window: phase_timeout_s when set, else
        timeout_s but at least MIN_PHASE_S, since a healthy start (torch, a compiler's import,
        CUDA init, the profiler's own start-up) takes 10-15 s, longer than a small --timeout."""
        return self.phase_timeout_s if self.phase_timeout_s is not None else max(self.timeout_s, MIN_PHASE_S)


def _check(checks: list[tuple[bool, str]]) -> None:
    for ok, message in checks:
        if not ok:
            raise NsprofError(message)


@dataclass(frozen=True)
class TuneSettings:
    """`nsprof tune`'s choices. backend: a ground truth (ncu, nsys) or a fast timer (TIMER_BACKENDS)."""

    backend: str = "ncu"
    mode: str = "graph"  # direct | graph (ground truths only; fast timers have their own launch path)
    stat: str = "median"  # median | min
    reps: int = 5
    timer_reps: int = 100
    prescreen: str | None = None  # a fast timer backend name
    prescreen_top: int = 4
    timeout_s: float = 120.0
    work_dir: Path | None = None
    store: Path | None = None  # results store; None: .nsprof/results.sqlite
    use_store: bool = True
    resume: bool = False  # measure only configs the store has no result for under the same key
    # resume: measure failed configs again too (by default only failures that say nothing about the
    # config are: see nsprof.tune.retryable)
    retry_failed: bool = False
    wait: bool = False  # wait for another nsprof profiling this GPU instead of failing
    feed_back: bool = True  # hand the ranking to the target's tuner when its Space can take it
    tuner_pick: bool = True  # say what the target's own tuner picks with its own timer, when it can say
    # Adaptive reps (nsprof.adaptive): the configs still tied with the best after the first pass are
    # measured again, interleaved, up to max_reps reps each (None: 4 x reps), while the adaptive
    # sessions' wall time stays within budget_s (0: no adaptive reps).
    max_reps: int | None = None
    budget_s: float = 30.0

    def __post_init__(self) -> None:
        truths = ground_truths()
        _check([
            (self.backend in truths or self.backend in TIMER_BACKENDS,
             f"unknown backend {self.backend!r}: choose from {', '.join(truths + tuple(TIMER_BACKENDS))}"),
            (self.mode in MODES, "mode must be direct or graph"),
            (self.stat in STATS, "stat must be median or min"),
            (self.prescreen is None or self.prescreen in TIMER_BACKENDS,
             f"--prescreen takes a fast timer: {', '.join(TIMER_BACKENDS)}"),
            (self.prescreen_top >= 1, "--top must be at least 1"),
            (self.max_reps is None or self.max_reps >= self.reps,
             f"--max-reps ({self.max_reps}) must be at least --reps ({self.reps})"),
            (self.budget_s >= 0, "--budget-s must be 0 (no adaptive reps) or more"),
        ])
        self.profile  # noqa: B018 - built once, so that its own checks run now

    @property
    def ground_truth(self) -> bool:
        return self.backend in ground_truths()

    @property
    def adaptive_max_reps(self) -> int:
        """The most reps a contender gets, adaptive reps included."""
        return 4 * self.reps if self.max_reps is None else self.max_reps

    @cached_property
    def profile(self) -> ProfileSettings:
        """The session settings every measurement of this tune runs with (a fast timer's
        session runs bare: nsprof.measure.FastTimers)."""
        return ProfileSettings(backend=self.backend if self.ground_truth else NO_PROFILER, modes=(self.mode,),
                               reps=self.reps, timeout_s=self.timeout_s, work_dir=self.work_dir, wait_gpu=self.wait)


@dataclass(frozen=True)
class ValidateSettings:
    """`nsprof validate`'s choices: which fast timers against which ground truths."""

    timers: tuple[str, ...] = ("event", "cupti", "graph")
    external: bool = True
    truths: tuple[str, ...] = ("ncu", "nsys")
    modes: tuple[str, ...] = MODES
    reps: int = 5  # ground-truth reps per config and mode
    timer_reps: int = 100
    repeat_truth: bool = True
    timeout_s: float = 120.0
    work_dir: Path | None = None
    wait: bool = False  # wait for another nsprof measuring on this GPU instead of failing

    def __post_init__(self) -> None:
        truths = ground_truths()
        _check([(all(t in truths for t in self.truths), f"truths must be some of {', '.join(truths)}"),
                (self.timer_reps >= 1, "timer reps must be at least 1")])
        self.profile  # noqa: B018 - built once, so that its own checks run now

    @cached_property
    def profile(self) -> ProfileSettings:
        """The ground truths' session settings (the backend and work_dir are set per run)."""
        return ProfileSettings(backend=NO_PROFILER, modes=tuple(self.modes), reps=self.reps,
                               timeout_s=self.timeout_s, work_dir=self.work_dir, wait_gpu=self.wait)
