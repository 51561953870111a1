"""Interleaved fast timers: every config measured in turn, round after round (A B C A B C ...).

A plain timer measures one config after another, so drift over the run (clocks, temperature,
other work on the card) reads as a difference between configs. Here each config's value is the
median of its round values (a round: one visit of `reps` samples, the first call of each visit
an untimed warm-up, as the config before left other data in L2), and drift falls on all alike.

Each round value carries the SM clock NVML reports as the round ends. A round taken while the
card throttled, its clock below THROTTLE_FRACTION of the highest clock of its batch (NVBench's
rule, against the clock the card actually ran at rather than its boost maximum, so that clocks
locked low are no throttling), is discarded and counted. Where NVML is missing the clock is None
and nothing is discarded.

The configs held at once (inputs, captured graphs) are a batch, closed once they fill
MEMORY_FRACTION of the GPU's memory; each batch is interleaved on its own.

Holds: ROUNDS, THROTTLE_FRACTION, MEMORY_FRACTION, memory_full, release, prepare (a config's Sampler for
one method: its graph captured once), Rounds (the round values of every config and method of a
batch, and each one's result line), throttle_counts and throttle_note.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

ROUNDS = 10  # rounds per config; a method's reps are spread over them
MEMORY_FRACTION = 0.5  # a batch of configs held at once may fill this share of the GPU's memory
WARMUP = 10  # calls before a config's sampler is prepared, as nsprof.timers.measure makes
THROTTLE_FRACTION = 0.75


@dataclass
class Sampler:
    """One config under one method: `sample(reps)` -> `reps` samples (ns), how they are taken, and
    the launch itself: a captured graph holds its tensors' addresses, not the tensors, so the launch
    (whose closure owns them) must live as long as the graph is replayed."""

    sample: Callable[[int], list[float]]
    conditions: dict
    launch: Callable[[], object]

    def visit(self, reps: int) -> list[float]:
        """One round: a warm-up call, then `reps` samples."""
        return self.sample(reps + 1)[1:]


def prepare(method: str, fn, calls_per_graph: int = 20) -> Sampler:
    """`fn`'s Sampler under an interleaved method (nsprof.timers.specs.INTERLEAVED), after WARMUP
    calls; a graph is captured here, once, so that a fault in capture is this config's."""
    import torch

    from nsprof.timers.specs import INTERLEAVED

    timer, l2 = INTERLEAVED[method]
    for _ in range(WARMUP):  # outside any capture: a first launch may compile, load or allocate
        fn()
    torch.cuda.synchronize()
    if timer == "graph":
        from nsprof.timers.graph import graph_sampler

        sample, conditions = graph_sampler(fn, l2, calls_per_graph)
    else:
        from nsprof.timers.cupti import time_cupti

        _, conditions = time_cupti(fn, 1, l2)  # CUPTI works here, and how it measures

        def sample(reps: int) -> list[float]:
            return time_cupti(fn, reps, l2)[0]

    conditions.update(l2=l2, interleaved=True)  # the same dict: a cold graph adds its flush's median
    return Sampler(sample, conditions, fn)


def memory_full() -> bool:
    """Whether the configs held so far (inputs, captured graphs) fill MEMORY_FRACTION of the GPU's
    memory, as the driver counts it: then they are measured as one batch before more are built."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return total - free >= MEMORY_FRACTION * total


def release() -> None:
    """Give a measured batch's memory (its launches are dropped) back to the driver: torch's cache
    would keep it, and memory_full, which asks the driver, would then see the next batch full."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


@dataclass
class Rounds:
    """Every round of one batch: (config, method) -> [(median ns of the round's valid samples,
    SM clock MHz as it ended)]. Which rounds were throttled is decided at the end, against the
    highest clock of the whole batch: a card whose clocks are locked low (or capped) throttles
    nothing by that alone."""

    taken: dict = field(default_factory=dict)

    def add(self, config_id: int, method: str, samples_ns: list[float], clock_mhz: float | None) -> None:
        valid = [s for s in samples_ns if s == s]
        clock = clock_mhz if clock_mhz and clock_mhz > 0 else None  # NVML's 0 MHz: no clock read
        if valid:
            self.taken.setdefault((config_id, method), []).append((float(statistics.median(valid)), clock))

    @property
    def peak_mhz(self) -> float | None:
        clocks = [c for rounds in self.taken.values() for _, c in rounds if c is not None]
        return max(clocks) if clocks else None

    def line(self, config_id: int, method: str, conditions: dict) -> dict:
        """The result line of one config and method: median and least of its kept rounds, every
        kept round's value and clock, how many rounds were discarded as throttled (clock below
        THROTTLE_FRACTION of the batch's peak); an error when none was kept."""
        peak = self.peak_mhz
        taken = self.taken.get((config_id, method), [])
        kept = [(v, c) for v, c in taken if peak is None or c is None or c >= THROTTLE_FRACTION * peak]
        throttled = len(taken) - len(kept)
        line = {"method": method, "throttled": throttled, "peak_clock_mhz": peak}
        if not kept:
            why = (
                f"all {throttled} rounds taken while the GPU throttled" if throttled else "no round measured"
            )
            return {**line, "error": f"{why} (interleaved {method})"}
        values = [v for v, _ in kept]
        return {
            **line,
            "median_ns": float(statistics.median(values)),
            "min_ns": min(values),
            "rounds_ns": values,
            "rounds_clock_mhz": [c for _, c in kept],
            "conditions": {**conditions, "rounds": len(taken)},
        }


def throttle_counts(lines: list[dict]) -> list[dict]:
    """What the throttle check counted in each result line (its rounds, those discarded, its batch's highest
    clock and which batch), without the rounds' values: what throttle_note says, for the lines of one run or of
    several (the batches of a run on several GPUs)."""
    keys = ("method", "throttled", "peak_clock_mhz", "batch", "worker_pid")
    return [
        {**{k: x[k] for k in keys if k in x}, "rounds": len(x.get("rounds_ns", [])) + x.get("throttled", 0)}
        for x in lines
    ]


def throttle_note(method: str, counts: list[dict]) -> str:
    """What the throttle check did for one method over the run's throttle_counts, in one line."""
    lines = [x for x in counts if x.get("method") == method]
    rounds = sum(x["rounds"] for x in lines)
    throttled = sum(x.get("throttled", 0) for x in lines)
    # each batch's highest clock, the batch being one worker process's (a restarted worker numbers from 1);
    # a method's error line in it carries none
    peaks: dict = {}
    for x in lines:
        batch = (x.get("worker_pid"), x.get("batch", 1))
        peaks[batch] = max(peaks.get(batch) or 0.0, x.get("peak_clock_mhz") or 0.0)
    split = (
        f" in {len(peaks)} batches of configs that fit in the GPU's memory together" if len(peaks) > 1 else ""
    )
    seen = Counter(peak for peak in peaks.values() if peak)  # each highest clock: in how many batches
    if not seen:
        return f"{method}: {rounds} rounds{split}; no SM clock read (NVML missing or failing), throttling not checked"
    if len(seen) == 1:
        highest = f", {next(iter(seen)):.0f} MHz"
    else:  # each batch's rounds were checked against its own
        each = [f"{peak:.0f} MHz in {n}" for peak, n in sorted(seen.items(), reverse=True)]
        highest = f": {each[0]} batch{'es' if seen[max(seen)] > 1 else ''}, {', '.join(each[1:])}"
    return (
        f"{method}: {throttled} of {rounds} rounds{split} discarded, taken while the SM clock was below "
        f"{THROTTLE_FRACTION:.0%} of the highest of its batch{highest} (NVML)"
    )
