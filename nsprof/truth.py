"""What a ranking's numbers are taken by: the backend names (the built-in ones, and those
nsprof.drivers.registry.register adds through add_backend, kept here so that settings check them
without importing the drivers), the fast timers' names, the conditions a profiler's truth runs
under, and `Truth`, one truth parsed once from its name.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsprof.errors import NsprofError

NO_PROFILER = "none"  # the backend that runs the worker bare (the fast timers' sessions)
# tune's --backend names of the fast timers -> nsprof timer method names (nsprof.timers.specs)
# validate's truth conditions (`ncu@free-warm`): the word -> ProfileSettings' clock_control / cache_control
TRUTH_CLOCKS = {"base": "base", "free": "none"}
TRUTH_L2 = {"cold": "all", "warm": "none"}
TIMER_BACKENDS = {
    "graph": "graph_warm",
    "graph_cold": "graph_cold",
    "cupti": "cupti",
    "cupti_cold": "cupti_cold",
    "event": "event",
    "event_cold": "event_cold",
}

# A truth (tune --backend, --truth, --deploy; validate --truth) is a ground-truth backend, or one
# with the condition it runs under where its driver honours clock and cache control, as
# `TOOL@CLOCK-L2` (Truth below): ncu@base-warm (L2 not flushed), ncu@free-cold (clocks not locked),
# ncu@free-warm (both). No condition (or @base-cold): ProfileSettings' defaults. A fast timer
# (TIMER_BACKENDS) is a truth too, of a ranking that no profiler takes.
DEFAULT_CONDITION = "base-cold"
TRUTH_VARIANTS = {
    f"{clock}-{l2}": {"clock_control": TRUTH_CLOCKS[clock], "cache_control": TRUTH_L2[l2]}
    for clock in TRUTH_CLOCKS
    for l2 in TRUTH_L2
    if f"{clock}-{l2}" != DEFAULT_CONDITION
}

# Every backend name -> whether it is a ground truth (it measures under a profiler and writes a report).
# The drivers behind them are nsprof.drivers.registry's, which checks that it has one for each.
BUILTIN_BACKENDS = {"ncu": True, "nsys": True, NO_PROFILER: False}
# The built-in backends whose drivers control clocks and caches (Driver.controls_conditions): only
# these take a condition. nsys measures at whatever clocks and L2 state the run has.
BUILTIN_CONDITIONED = ("ncu",)
_backends: dict[str, bool] = dict(BUILTIN_BACKENDS)
_conditioned: set[str] = set(BUILTIN_CONDITIONED)


def add_backend(name: str, ground_truth: bool, conditions: bool = False) -> None:
    """Make `name` a backend the settings take (nsprof.drivers.registry.register calls it);
    `conditions`: its driver controls clocks and caches, so its truth takes a condition."""
    _backends[name] = ground_truth
    if conditions:
        _conditioned.add(name)
    else:
        _conditioned.discard(name)


def remove_backend(name: str) -> None:
    """Forget backend `name` (nsprof.drivers.registry.unregister calls it)."""
    _backends.pop(name, None)
    _conditioned.discard(name)


def conditioned() -> tuple[str, ...]:
    """The ground truths whose drivers control clocks and caches (and so take a condition)."""
    return tuple(name for name in ground_truths() if name in _conditioned)


def backends() -> tuple[str, ...]:
    """Every backend name, in registration order."""
    return tuple(_backends)


def ground_truths() -> tuple[str, ...]:
    """The backends that measure under a profiler (ncu, nsys, ...), in registration order."""
    return tuple(name for name, truth in _backends.items() if truth)


@dataclass(frozen=True)
class Truth:
    """How a ranking's numbers are taken, parsed once from its name (Truth.parse): a ground truth,
    a profiler's backend under one condition, `ncu` (the backend's session defaults) or
    `ncu@free-warm` (clocks free, L2 warm: --clock-control none --cache-control none), or a fast
    timer (`graph`, `cupti`, ...: TIMER_BACKENDS). clock/l2 are the condition words (TRUTH_CLOCKS,
    TRUTH_L2), None when not given."""

    backend: str
    clock: str | None = None
    l2: str | None = None

    @classmethod
    def parse(cls, spec: str | Truth) -> Truth:
        """`tool` or `tool@clock-l2` (clock: base | free; l2: cold | warm), the condition only for a
        tool that controls clocks and caches (an NsprofError in one line for any other backend or
        fast timer). `tool@base-cold` is the same condition as the plain `tool` (ncu's defaults in
        nsprof) and is named so. A Truth is checked so too, by its name; anything else is a TypeError."""
        if not isinstance(spec, (str, Truth)):
            raise TypeError(f"truth {spec!r} is no name of a truth")
        spec = (spec.name if isinstance(spec, Truth) else spec).strip()
        backend, at, condition = spec.partition("@")
        if not at:
            return cls(backend)
        if (backend in _backends or backend in TIMER_BACKENDS) and backend not in _conditioned:
            raise NsprofError(
                f"truth {spec!r}: {backend} cannot set clocks or caches, so it takes no condition: give "
                f"plain {backend} (a condition @CLOCK-L2 is for {', '.join(conditioned()) or 'ncu'})"
            )
        if condition == DEFAULT_CONDITION:
            return cls(backend)
        if condition not in TRUTH_VARIANTS:
            raise NsprofError(
                f"truth {spec!r}: a condition is @CLOCK-L2 with CLOCK one of "
                f"{', '.join(TRUTH_CLOCKS)} and L2 one of {', '.join(TRUTH_L2)} (e.g. {backend}@free-warm)"
            )
        clock, l2 = condition.split("-")
        return cls(backend, clock, l2)

    @classmethod
    def of_labels(cls, backend: str, labels: dict[str, str]) -> Truth:
        """The truth of `backend` under `labels` (clock_control, cache_control)."""
        words = {(v["clock_control"], v["cache_control"]): k for k, v in TRUTH_VARIANTS.items()}
        condition = words.get((labels.get("clock_control", "base"), labels.get("cache_control", "all")))
        return cls(backend) if condition is None else cls(backend, *condition.split("-"))

    @property
    def name(self) -> str:
        return self.backend if self.clock is None else f"{self.backend}@{self.clock}-{self.l2}"

    @property
    def condition(self) -> str:
        """Its condition's words ("free-warm"), "" for the backend's defaults."""
        return "" if self.clock is None else f"{self.clock}-{self.l2}"

    @property
    def overrides(self) -> dict[str, str]:
        """The session settings its condition changes (clock_control, cache_control)."""
        return TRUTH_VARIANTS[self.condition] if self.condition else {}

    @property
    def profiler(self) -> bool:
        """Whether a profiler takes it (a ground truth), not a fast timer."""
        return self.backend in ground_truths()

    @property
    def timer(self) -> str:
        """A fast timer's nsprof timer method (nsprof.timers.specs)."""
        return TIMER_BACKENDS[self.backend]

    @property
    def clock_control(self) -> str:
        return TRUTH_CLOCKS[self.clock or "base"]

    @property
    def cache_control(self) -> str:
        return TRUTH_L2[self.l2 or "cold"]

    def method(self, mode: str) -> str:
        """The per-config table's method name of this truth in `mode`: `ncu:graph`, `ncu@free-warm:graph`."""
        return f"{self.name}:{mode}"

    def check_ground_truth(self) -> None:
        """An NsprofError in one line unless it is a ground truth (--truth takes only those)."""
        truths = ground_truths()
        if self.backend in truths:
            return
        if self.backend in TIMER_BACKENDS and self.clock is None:
            raise NsprofError(
                f"--truth takes ground truths ({', '.join(truths)}); {self.name} is a fast timer: "
                f"use --backend {self.name}"
            )
        variants = ", ".join(f"{truths[0]}@{s}" for s in TRUTH_VARIANTS) if truths else ""
        raise NsprofError(
            f"unknown truth {self.name!r}: choose from {', '.join(truths)}"
            + (f" (or a variant such as {variants})" if variants else "")
        )
