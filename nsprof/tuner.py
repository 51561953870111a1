"""The TunerHook interface: what `nsprof tune` asks of the autotuner behind a Space.

A hook does two things, each optional to the tuner behind it:
- `pick()`: what the tuner itself picks with its own timer ("tuner pick"), when it can say;
  `pick_shapes(shapes)` the same at each shape of a Space with shapes;
- `feed_back(latencies_ms)`: take nsprof's ranking (config index -> ms) back into the
  tuner's own cache, and say in one line what was written;
- `feed_back_shapes(latencies_by_shape)`: the same for a Space with shapes, every shape's ranking
  (shape index -> config index -> ms) at once, each stored under the key the tuner itself computes
  for a call at that shape; {shape index: line}, or {"error": line} for a shape that failed (each_shape).

The concrete hooks are in nsprof.integrations (Triton, TileLang). A Space carries its hook
in `Space.tuner`; `tune` runs each call in a fresh child process of its own
(`python -m nsprof.feedback TARGET CALL ARGS_JSON`: nsprof.feedback.tuner_in_child).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping


def best_strictly_first(latencies_ms: Mapping[int, float]) -> tuple[int, dict[int, float]]:
    """nsprof's best (the lowest latency, the lowest config index among equal ones) and the
    latencies to hand a tuner: a tuner keeps the first of equal latencies in an order of its own
    (TileLang: its workers' completion order; Triton: its configs after pruning), so a config tied
    with the best is handed the next float above it. The best keeps its measured latency."""
    best = min(latencies_ms, key=lambda index: (latencies_ms[index], index))
    floor = float(latencies_ms[best])
    return best, {
        index: math.nextafter(floor, math.inf)
        if index != best and float(latency) <= floor
        else float(latency)
        for index, latency in latencies_ms.items()
    }


def each_shape(latencies_by_shape: Mapping[int, Mapping[int, float]], feed_one) -> dict[int, str | dict]:
    """feed_back_shapes' answer: feed_one(shape, latencies_ms) -> one line, for each shape in order. A shape
    that fails stops none of the others: its answer is {"error": what it raised, in one line}."""
    answers: dict[int, str | dict] = {}
    for shape, latencies_ms in sorted(latencies_by_shape.items()):
        try:
            answers[int(shape)] = feed_one(int(shape), latencies_ms)
        except Exception as exc:  # noqa: BLE001 - the user's tuner: whatever it raised, said for its shape
            answers[int(shape)] = {"error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
    return answers


class TunerHook(ABC):
    """An autotuner as `nsprof tune` sees it.

    `name` is what tune's notes print ("handed to {name}: ..."). `can_pick` and `can_feed_back`
    say which of the two calls the tuner supports; tune calls only those.
    """

    name: str = "the tuner"
    can_pick: bool = False
    can_feed_back: bool = True
    # True: tune calls feed_back_shapes with one shape at a time, each in a fresh process of its own
    # (a tuner whose cache key for a call depends on what the process compiled before: TileLang's).
    feed_back_shapes_apart: bool = False

    def pick(self) -> dict | None:
        """What the tuner picks with its own timer: {"tuner", "timer", "config_id", "config",
        "timings_ms"}, or None when it cannot say. Runs user kernels (in tune's child process)."""
        return None

    @property
    def can_pick_shapes(self) -> bool:
        """Whether this hook picks at each shape of a Space with shapes (it overrides pick_shapes)."""
        return self.can_pick and type(self).pick_shapes is not TunerHook.pick_shapes

    def pick_shapes(self, shapes: list[int]) -> dict[int, dict | None]:
        """For a Space with shapes: what the tuner picks with its own timer at each shape index of
        `shapes`, {shape index: pick() of that shape}. A hook that cannot does not override it."""
        raise NotImplementedError(f"{self.name} picks at one shape only (its hook has no pick_shapes)")

    @abstractmethod
    def feed_back(self, latencies_ms: Mapping[int, float]) -> str:
        """Make the tuner choose by nsprof's latencies (config index -> ms) and store that choice
        in its own cache; returns a one-line description of what was written."""

    @property
    def can_feed_back_shapes(self) -> bool:
        """Whether this hook takes every shape's ranking (it overrides feed_back_shapes)."""
        return type(self).feed_back_shapes is not TunerHook.feed_back_shapes

    def feed_back_shapes(
        self, latencies_by_shape: Mapping[int, Mapping[int, float]]
    ) -> dict[int, str | dict]:
        """For a Space with shapes: each shape's ranking (shape index -> config index -> ms) into the
        tuner's cache under the key the tuner computes for a call at that shape; {shape index: one line
        on what was written, or {"error": one line} where that shape failed} (each_shape makes it). A
        hook over a tuner without per-shape entries does not override it."""
        raise NotImplementedError(
            f"{self.name} takes the ranking of one shape only (its hook has no feed_back_shapes)"
        )
