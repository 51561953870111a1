"""Settings: frozen, validated on construction, and passed whole."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from nsprof.errors import NsprofError

BACKENDS = ("ncu", "nsys", "none")
CLOCK_CONTROLS = ("base", "none")
CACHE_CONTROLS = ("all", "none")
GRAPH_PROFILING = ("node", "graph")
MIN_PHASE_S = 60.0


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
            (self.backend in BACKENDS, f"backend must be one of {BACKENDS}"),
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

    @property
    def labels(self) -> dict[str, str]:
        """The conditions every row of this session is labelled with."""
        if self.backend == "ncu":
            return {"clock_control": self.clock_control, "cache_control": self.cache_control}
        return {"clock_control": "none", "cache_control": "none"}
