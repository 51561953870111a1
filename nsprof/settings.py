"""Settings: frozen, validated on construction, and passed whole.

ProfileSettings is one measuring session's; TuneSettings and ValidateSettings hold the
commands' own choices and build the ProfileSettings they measure with once (`.profile`).
The backend names and truths they check are nsprof.truth's.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from nsprof.errors import NsprofError, OptionError
from nsprof.truth import (  # noqa: F401 - the truth names callers take from the settings too
    NO_PROFILER,
    TIMER_BACKENDS,
    TRUTH_VARIANTS,
    Truth,
    backends,
    ground_truths,
)

CLOCK_CONTROLS = ("base", "none")
CACHE_CONTROLS = ("all", "none")
GRAPH_PROFILING = ("node", "graph")
MIN_PHASE_S = 60.0
MODES = ("direct", "graph")
STATS = ("median", "min")


PRESCREEN_TOP = 4  # how many configs a prescreen hands to the ground truth, unless --top says


def phase_bound(timeout_s: float) -> float:
    """The bound on a phase outside a config's window (a start, the target's import) under --timeout."""
    return max(timeout_s, MIN_PHASE_S)


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
    # ncu only: collect the kernel's duration and its L2 hit rate (lts__t_sector_hit_rate.pct), nothing
    # else, the program run again for each pass, so that every pass meets L2 as the worker left it.
    l2_hit_rate: bool = False
    # Rep r is preceded by the cold timers' L2 flush (outside every range) when flushes[r % len]; ():
    # never. With cache_control "none" the flushed reps show what "cold" means to those timers.
    flushes: tuple[bool, ...] = ()
    python: str = field(default=sys.executable)
    work_dir: Path | None = None  # reports and logs; a temporary folder when None
    max_restarts: int = 50
    wait_gpu: bool = False  # wait for another nsprof profiling this GPU instead of failing at once
    # The longest one config's compile may take, beside the session or in a served worker (then that
    # config fails: "compile timed out"); once a wait for the step beside ran out without any
    # compile finishing meanwhile, the step is stalled and configs not compiled yet fail at once.
    compile_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        checks = [
            (self.backend in backends(), f"backend must be one of {backends()}"),
            (
                bool(self.modes) and all(m in ("direct", "graph") for m in self.modes),
                "modes must be direct and/or graph",
            ),
            (self.reps >= 1, "reps must be at least 1"),
            (self.warmup >= 0, "warmup must be 0 or more"),
            (self.timeout_s > 0, "timeout must be positive"),
            (self.phase_timeout_s is None or self.phase_timeout_s > 0, "phase timeout must be positive"),
            (self.compile_timeout_s > 0, "compile timeout must be positive"),
            (self.clock_control in CLOCK_CONTROLS, f"clock control must be one of {CLOCK_CONTROLS}"),
            (self.cache_control in CACHE_CONTROLS, f"cache control must be one of {CACHE_CONTROLS}"),
            (self.graph_profiling in GRAPH_PROFILING, f"graph profiling must be one of {GRAPH_PROFILING}"),
        ]
        _check(checks)

    @property
    def phase_bound_s(self) -> float:
        """The bound on each phase outside a config's window: phase_timeout_s when set, else
        timeout_s but at least MIN_PHASE_S, since a healthy start (torch, a compiler's import,
        CUDA init, the profiler's own start-up) takes 10-15 s, longer than a small --timeout."""
        return self.phase_timeout_s if self.phase_timeout_s is not None else phase_bound(self.timeout_s)


@dataclass(frozen=True)
class ClusterSettings:
    """Where a run's configs go when they are spread over several GPUs (nsprof.cluster, Dask).

    devices: the GPUs of this host (nvidia-smi indices) for a local Dask cluster, one worker
    each; scheduler: the address of an existing Dask scheduler (tcp://host:port) whose workers
    were started with `dask worker --resources GPU=1`. Exactly one of the two.
    """

    devices: tuple[int, ...] = ()
    scheduler: str | None = None
    batch_size: int | None = None  # configs per batch (one profiled session each); None: one batch per worker
    verbose: bool = False  # each worker's state on stderr as it changes
    calibrate: bool = True  # every worker also measures the first config, to compare the GPUs

    def __post_init__(self) -> None:
        _check(
            [
                (
                    bool(self.devices) != (self.scheduler is not None),
                    "give either --devices or --scheduler, not both",
                ),
                (
                    all(isinstance(d, int) and d >= 0 for d in self.devices),
                    "--devices takes GPU indices 0, 1, ...",
                ),
                (len(set(self.devices)) == len(self.devices), "--devices names a GPU twice"),
                (
                    self.scheduler is None or "://" in self.scheduler,
                    f"--scheduler takes an address such as tcp://host:8786, not {self.scheduler!r}",
                ),
                (self.batch_size is None or self.batch_size >= 1, "batch size must be at least 1"),
            ]
        )


def _check(checks: list[tuple[bool, str]], error: type[NsprofError] = NsprofError) -> None:
    for ok, message in checks:
        if not ok:
            raise error(message)


@dataclass(frozen=True)
class TuneSettings:
    """`nsprof tune`'s choices. backend: a ground truth (ncu, nsys) or a fast timer (TIMER_BACKENDS)."""

    backend: str = "ncu"
    mode: str = "graph"  # direct | graph (ground truths only; fast timers have their own launch path)
    stat: str = "median"  # median | min
    reps: int = 5
    timer_reps: int = 100
    prescreen: str | None = None  # a fast timer backend name
    prescreen_top: int | None = None  # given, it needs prescreen; None: PRESCREEN_TOP
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
    # Cross-truth tuning: rank under each of these truths (ground truths, with their conditions:
    # Truth, or their names, parsed here). Empty: the one `backend`. Given, they decide, and `backend`
    # becomes the deploy truth's backend.
    truths: tuple[Truth, ...] = ()
    # The truth whose winner is fed back (one of `truths`; default the first). None: `backend`.
    deploy: Truth | None = None
    # When truths disagree, measure the contenders again under the first truth with each differing
    # condition changed, to say which one explains it.
    explain: bool = True
    cluster: ClusterSettings | None = None  # spread the configs over several GPUs (nsprof.cluster)
    # Adaptive reps (nsprof.adaptive): the configs still tied with the best after the first pass are
    # measured again, interleaved, up to max_reps reps each (None: 4 x reps), while the adaptive
    # sessions' wall time stays within budget_s (0: no adaptive reps).
    max_reps: int | None = None
    budget_s: float = 30.0
    # A tie whose members all lie within ±equivalence_pct % of the best is practically equivalent:
    # no adaptive reps are spent separating it (0: off).
    equivalence_pct: float = 1.0
    # Which call of nsprof.tune.tune stored a run (set there, one per call; not recorded with the settings):
    # a re-read tells a tune's runs from a later tune's that stored no first pass before its adaptive reps.
    tune_id: str = field(default="", compare=False)
    # Whether what is measured with these settings is the tune's own ranking (False: an explaining probe's, of
    # the contenders alone): its stored runs then record the points the tune ranks (not with the settings).
    ranks: bool = field(default=True, compare=False)

    def __post_init__(self) -> None:
        _check(
            [
                (self.use_store or not self.resume, "--resume needs the results store (drop --no-store)"),
                (
                    self.use_store or self.store is None,
                    "--store names a results store and --no-store keeps none: give one",
                ),
                (self.resume or not self.retry_failed, "--retry-failed goes with --resume"),
                (
                    self.max_reps is None or self.max_reps >= self.reps,
                    f"--max-reps ({self.max_reps}) must be at least --reps ({self.reps})",
                ),
            ],
            OptionError,
        )
        truths = ground_truths()
        self._parse_truths(truths)
        _check(
            [
                (
                    self.backend in truths or self.backend in TIMER_BACKENDS,
                    f"unknown backend {self.backend!r}: choose from {', '.join(truths + tuple(TIMER_BACKENDS))}",
                ),
                (self.mode in MODES, "mode must be direct or graph"),
                (self.stat in STATS, "stat must be median or min"),
                (
                    self.prescreen is None or self.prescreen in TIMER_BACKENDS,
                    f"--prescreen takes a fast timer: {', '.join(TIMER_BACKENDS)}",
                ),
                (self.prescreen_top is None or self.prescreen_top >= 1, "--top must be at least 1"),
                (
                    self.prescreen is not None or self.prescreen_top is None,
                    "--top N goes with --prescreen (the fast timer that picks the N for the ground truth)",
                ),
                (self.budget_s >= 0, "--budget-s must be 0 (no adaptive reps) or more"),
                (
                    0 <= self.equivalence_pct < 100,
                    "--equivalence must be a percentage from 0 (off) below 100",
                ),
            ]
        )
        self.profile  # noqa: B018 - built once, so that its own checks run now

    def _parse_truths(self, truths: tuple[str, ...]) -> None:
        """--truth and --deploy as Truths, checked: the deploy truth one of them, its backend the tune's."""
        deploy = Truth.parse(self.deploy) if self.deploy else None
        if self.truths or deploy:
            given = tuple(Truth.parse(t) for t in self.truths) or (
                (Truth(self.backend),) if self.backend in truths else ()
            )
            if not given:
                raise NsprofError(
                    f"--deploy {deploy.name} needs ground truths (--truth), not the fast timer {self.backend}"
                )
            for truth in given:
                truth.check_ground_truth()
            names = [t.name for t in given]
            if len(set(names)) != len(names):
                raise NsprofError(f"--truth names a truth twice: {','.join(names)}")
            deploy = deploy or given[0]
            if deploy not in given:
                deploy.check_ground_truth()
                raise NsprofError(
                    f"--deploy {deploy.name} is not one of the truths ranked ({','.join(names)}): add it to --truth"
                )
            object.__setattr__(self, "truths", given)
            object.__setattr__(self, "deploy", deploy)
            object.__setattr__(self, "backend", deploy.backend)

    @property
    def ground_truth(self) -> bool:
        return self.backend in ground_truths()

    @property
    def ranked_truths(self) -> tuple[Truth, ...]:
        """The truths (or the one fast timer) this tune ranks under, in order."""
        return tuple(self.truths) or (Truth(self.backend),)

    @property
    def deploy_truth(self) -> Truth:
        """The truth whose winner is fed back."""
        return self.deploy or Truth(self.backend)

    @property
    def prescreen_truth(self) -> Truth | None:
        return None if self.prescreen is None else Truth(self.prescreen)

    def truth_profile(self, truth: Truth) -> ProfileSettings:
        """The session settings of ground truth `truth` (under its condition, such as ncu@base-warm)."""
        base = self.profile
        if base.backend == truth.backend and not truth.overrides:
            return base
        return replace(base, backend=truth.backend, **truth.overrides)

    def record(self) -> dict:
        """These settings as the results store records a run's: plain values, each truth by its name."""
        from dataclasses import asdict

        record = asdict(self)
        del record["tune_id"], record["ranks"]
        record["truths"] = [t.name for t in self.truths]
        record["deploy"] = self.deploy.name if self.deploy else ""
        return record

    @property
    def adaptive_max_reps(self) -> int:
        """The most reps a contender gets, adaptive reps included."""
        return 4 * self.reps if self.max_reps is None else self.max_reps

    @cached_property
    def profile(self) -> ProfileSettings:
        """The session settings every measurement of this tune runs with (a fast timer's
        session runs bare: nsprof.measure.FastTimers)."""
        return ProfileSettings(
            backend=self.backend if self.ground_truth else NO_PROFILER,
            modes=(self.mode,),
            reps=self.reps,
            timeout_s=self.timeout_s,
            work_dir=self.work_dir,
            wait_gpu=self.wait,
        )


@dataclass(frozen=True)
class ValidateSettings:
    """`nsprof validate`'s choices: which fast timers against which ground truths.

    truths are Truths (given as their names: `ncu`, `nsys`, `ncu@free-warm`); `matched` adds, for every truth
    whose driver controls clocks and caches, its clocks-free cold-L2 and warm-L2 conditions
    (nsprof.validate.resolve_truths), so that each timer meets ncu under its own conditions."""

    timers: tuple[str, ...] = ("event", "cupti", "graph")
    external: bool = True
    truths: tuple[Truth, ...] = ("ncu", "nsys")
    matched: bool = False
    modes: tuple[str, ...] = MODES
    reps: int = 5  # ground-truth reps per config and mode
    timer_reps: int = 100
    repeat_truth: bool = True
    timeout_s: float = 120.0
    work_dir: Path | None = None
    wait: bool = False  # wait for another nsprof measuring on this GPU instead of failing
    cluster: ClusterSettings | None = None  # spread the configs over several GPUs (nsprof.cluster)
    l2_check: bool = False  # measure the finalists' L2 hit rate under ncu (nsprof.l2check)

    def __post_init__(self) -> None:
        truths = ground_truths()
        try:
            parsed = tuple(Truth.parse(t) for t in self.truths)  # a bad condition: one line
        except NsprofError as exc:
            raise OptionError(str(exc), option="--truth") from None
        if not parsed or any(t.backend not in truths for t in parsed):
            raise OptionError(f"choose from {', '.join(truths)}", option="--truth")
        if not self.modes or any(m not in MODES for m in self.modes):
            raise OptionError(f"choose from {', '.join(MODES)}", option="--mode")
        _check([(self.timer_reps >= 1, "timer reps must be at least 1")])
        object.__setattr__(self, "truths", parsed)
        self.profile  # noqa: B018 - built once, so that its own checks run now

    @cached_property
    def profile(self) -> ProfileSettings:
        """The ground truths' session settings (the backend and work_dir are set per run)."""
        return ProfileSettings(
            backend=NO_PROFILER,
            modes=tuple(self.modes),
            reps=self.reps,
            timeout_s=self.timeout_s,
            work_dir=self.work_dir,
            wait_gpu=self.wait,
        )
