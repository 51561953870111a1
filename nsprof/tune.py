"""`nsprof tune`: rank every config of a target by ground truth (or a fast timer).

    ranked = tune("examples/gemm_tilelang.py:space", TuneSettings(backend="ncu", mode="graph"))
    ranked.best_config, ranked.table

Orchestration over nsprof.measure's Backends: ground truths (ncu, nsys, or any registered
driver) run through nsprof.profile (compile, then GroundTruth); fast timers (graph, cupti,
event and their variants) through FastTimers. `prescreen` ranks all configs with a fast timer
first and sends only the best `prescreen_top` to the ground truth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from nsprof.analysis.adaptive import AdaptiveSummary, Plan, first_pass_cost
from nsprof.analysis.confidence import Decision, decide
from nsprof.analysis.ranking import rank
from nsprof.drivers import registry
from nsprof.errors import NsprofError
from nsprof.measure import FastTimers, GroundTruth, Measured
from nsprof.render.tables import describe_pick
from nsprof.reports.checks import one_line
from nsprof.settings import TIMER_BACKENDS, TuneSettings, ground_truths
from nsprof.space import config_label

__all__ = ["TIMER_BACKENDS", "TuneResult", "TuneSettings", "key_labels", "measure_rows", "retryable", "tune"]

@dataclass
class TuneResult:
    # ranked DataFrame (nsprof.analysis.ranking.rank): rank, config_id, config, value_ns, spread,
    # cycles, clock, vs_best, ci_low_ns, ci_high_ns, ci_coverage, tied_with_best
    table: object
    configs: list
    backend: str
    label: str  # how the numbers were taken, in words
    prescreen: object | None = None  # the prescreen's ranked table, when used
    notes: list[str] = field(default_factory=list)
    # What the target's own autotuner picks with its own timer, when the Space can say (Triton).
    tuner_pick: dict | None = None
    # Steps after the ranking that failed (the tuner's own pick, the feed-back): the ranking
    # stands, and the command exits non-zero after printing it.
    errors: list[str] = field(default_factory=list)
    stat: str = "median"  # the statistic ranked by
    # What the adaptive reps did: sessions, reps, why they stopped (nsprof.adaptive); None: not tried
    adaptive: AdaptiveSummary | None = None

    @property
    def decision(self) -> Decision:
        """A winner, a tie (its members, in rank order), or an untested best (fewer than 2 reps):
        nsprof.analysis.confidence.decide over the ranked table."""
        return decide(self.table, self.stat)

    @property
    def tie_set(self) -> list[int]:
        """The best and every config tied with it, in rank order."""
        return list(self.decision.members)

    @property
    def best_config_id(self) -> int | None:
        """The config fed back: the decision's (out of a tie, by its stated rule)."""
        return self.decision.config_id

    @property
    def best_config(self):
        best = self.best_config_id
        return None if best is None else self.configs[best]


def _profile_settings(backend: str, settings: TuneSettings):
    """settings.profile for ground truth `backend` (which may differ from settings.backend)."""
    return settings.profile if settings.profile.backend == backend else replace(settings.profile, backend=backend)


def key_labels(backend: str, settings: TuneSettings) -> dict[str, str]:
    """The conditions a measurement is taken under (results-store key fields)."""
    if backend in ground_truths():
        return {"mode": settings.mode, **registry.driver_class(backend).labels(_profile_settings(backend, settings))}
    name = TIMER_BACKENDS[backend]
    return {"mode": "graph" if name.startswith("graph") else "direct", "clock_control": "none",
            "cache_control": "all" if name.endswith("cold") else "none"}


# Failure reasons that say nothing about the config itself: the session gave up on it (restarts
# spent, a worker that failed to start, a report lost again and again) or something outside
# killed the worker. See nsprof.session for the wording.
_NOT_THE_CONFIG = re.compile(r"^(not run: |measured \d+ times, but |worker killed by signal SIG(KILL|TERM|HUP|INT)\b"
                             r"|profiling counters are not permitted|the disk holding )")
_TIMEOUT = re.compile(r"^timeout: still running after ([0-9.e+]+) s")


def retryable(reason: str, timeout_s: float) -> bool:
    """Whether a stored failure is worth measuring again under `timeout_s` without being asked."""
    timed_out = _TIMEOUT.match(reason)
    if timed_out:
        return float(timed_out.group(1)) < timeout_s  # resumed with a longer --timeout
    return bool(_NOT_THE_CONFIG.match(reason))


def measure_rows(target: str, n: int, backend: str, settings: TuneSettings, config_ids: list[int], on_progress,
                 on_rows: Callable[[object], None] | None = None,
                 on_device: Callable[[dict | None], None] | None = None, plan: Plan | None = None):
    """Tidy rows for `config_ids` under `backend`: kernels for ground truths (compiled first, see
    nsprof.profile.profile_result); for a fast timer one row per config holding the timer's
    statistic as rep 0. Failed configs are rows with an error.

    on_rows(frame) gets whole configs' rows as they are known (each worker run's, and on Ctrl-C
    or SIGTERM what was finished), so that they can be stored before the run ends. on_device(device)
    gets what the worker measured on ({"uuid", "name"}, or None where it did not say).

    With `plan` (a ground truth only): one interleaved session of adaptive reps over plan.configs
    (nsprof.measure.GroundTruth.interleave) instead of a first pass over config_ids.
    """
    if plan is not None:
        truth = GroundTruth(_profile_settings(backend, settings))
        measured = truth.interleave(target, list(plan.configs), plan.rounds, plan.first_rep, n_configs=n,
                                    on_progress=on_progress, on_rows=on_rows)
    elif backend in ground_truths():
        from nsprof.profile import profile_result

        measured: Measured = profile_result(target, _profile_settings(backend, settings), config_ids=config_ids,
                                            on_progress=on_progress, on_rows=on_rows)
    else:
        import tempfile

        name = TIMER_BACKENDS[backend]
        work_dir = Path(settings.work_dir or tempfile.mkdtemp(prefix="nsprof-tune-"))
        timers = FastTimers([name], settings.profile, work_dir / f"timer-{name}", timer_reps=settings.timer_reps,
                            stat=settings.stat, labels=key_labels(backend, settings), failure_source=name)
        measured = timers.run(target, config_ids, n_configs=n, on_progress=on_progress, on_rows=on_rows)
    if on_device is not None:
        on_device(measured.device)
    return measured.frame


ADAPTIVE_RUN = "adaptive_session"  # the key in a stored run's settings that marks a session of adaptive reps


def _select_stored(stored, wanted_json: dict[int, str], adaptive_runs: set[int]):
    """Of stored rows, those tune ranks: only rows taken of today's configs (an id names another
    config once the space is edited); of each config its latest first-pass run (resumed runs can
    hold a config twice) and the adaptive sessions stored after it, which add reps to it; a rep
    held twice is the later run's."""
    stored = stored[[wanted_json.get(int(c)) == text for c, text in zip(stored["config_id"], stored["config_json"])]]
    adaptive = stored["run_id"].isin(list(adaptive_runs))
    base = stored[~adaptive].groupby("config_id")["run_id"].max()
    first = stored["config_id"].map(base)
    keep = (stored["run_id"] == first) | (adaptive & first.notna() & (stored["run_id"] > first))
    stored = stored[keep.fillna(False).astype(bool)]
    latest_rep = stored.groupby(["config_id", "mode", "rep"], dropna=False)["run_id"].transform("max")
    return stored[stored["run_id"] == latest_rep]


class _Stored:
    """What tune needs to go back to the results store after its first pass: the key of the
    space's rows and today's configs."""

    def __init__(self, settings: TuneSettings, group: dict, wanted_json: dict[int, str], gpu_uuid: str) -> None:
        self.settings, self.group, self.wanted_json, self.gpu_uuid = settings, group, wanted_json, gpu_uuid

    def rows(self, store):
        runs = store.runs()
        adaptive = {int(i) for i, text in zip(runs["id"], runs["settings_json"])
                    if isinstance(text, str) and f'"{ADAPTIVE_RUN}"' in text}
        return _select_stored(store.frame(**self.group, config_id=list(self.wanted_json)), self.wanted_json, adaptive)

    def session(self, target: str, backend: str, n: int, plan: Plan, number: int, on_progress):
        """One adaptive session, stored as a run of its own (marked ADAPTIVE_RUN), each config's
        rows in one transaction as the session hands them over; returns its rows."""
        from dataclasses import asdict

        from nsprof.store import MeasurementKey, ResultStore

        with ResultStore(self.settings.store) as store:
            labels = {**asdict(self.settings), ADAPTIVE_RUN: number, "configs": list(plan.configs),
                      "rounds": plan.rounds}
            run_id = store.start_run(target=target, settings=labels, gpu_uuid=self.gpu_uuid, **self.group)
            status = "failed"

            def store_rows(frame) -> None:
                from nsprof.adaptive import planned_rows

                kept = planned_rows(frame, plan)
                for config_id, config_rows in kept.groupby("config_id", sort=True):
                    store.add(run_id, MeasurementKey(config_id=int(config_id), config_json=self.wanted_json[int(config_id)],
                                                     **self.group), config_rows)

            try:
                rows = measure_rows(target, n, backend, self.settings, list(plan.configs), on_progress,
                                    on_rows=store_rows, plan=plan)
                status = "ok" if rows["error"].isna().any() else "nothing measured"
            except KeyboardInterrupt:
                status = "interrupted"
                raise
            finally:
                store.finish_run(run_id, status)
        return rows

    def merged(self):
        from nsprof.store import ResultStore

        with ResultStore(self.settings.store) as store:
            return self.rows(store)


def _measure_stored(target: str, space, backend: str, settings: TuneSettings, wanted: list[int], on_progress,
                    notes: list[str]):
    """measure_rows through the results store: resume, one transaction per config, GPU lock.
    Returns the rows to rank (see _select_stored) and the _Stored context for adaptive sessions."""
    from nsprof.host.gpu import gpu_of, which_gpu
    from nsprof.space import target_fingerprint
    from nsprof.store import MeasurementKey, ResultStore, config_json

    truth = backend in ground_truths()
    tool_version = GroundTruth(settings.profile).tool_version() if truth else ""
    # A fast timer's row holds the statistic asked for, so that is part of what it measured.
    stored_backend = backend if truth else f"{backend}:{settings.stat}"
    gpu = which_gpu(0)
    group = {"fingerprint": target_fingerprint(target), "gpu": gpu.key, "backend": stored_backend,
             "tool_version": tool_version, **key_labels(backend, settings)}
    wanted_json = {c: config_json(space.configs[c]) for c in wanted}
    with ResultStore(settings.store) as store:
        todo = list(wanted)
        if settings.resume:
            todo = store.missing(group, wanted, config_jsons=wanted_json, retry_failed=settings.retry_failed,
                                 retry_if=lambda reason: retryable(reason, settings.timeout_s))
            notes.append(f"resumed: {len(wanted) - len(todo)} of {len(wanted)} configs came from the results store")
        if todo:
            run_id = store.start_run(target=target, settings=settings, gpu_uuid=gpu.uuid, **group)
            status = "failed"
            stored_ids: set[int] = set()

            def store_rows(frame) -> None:
                # Each config once, as soon as it is whole: Ctrl-C or SIGTERM keeps it.
                for config_id, config_rows in frame.groupby("config_id", sort=True):
                    config_id = int(config_id)
                    if config_id in stored_ids or config_id not in wanted_json:
                        continue
                    store.add(run_id, MeasurementKey(config_id=config_id, config_json=wanted_json[config_id],
                                                     **group), config_rows)
                    stored_ids.add(config_id)

            try:
                devices: list[dict | None] = []
                rows = measure_rows(target, len(space.configs), backend, settings, todo, on_progress,
                                    on_rows=store_rows, on_device=devices.append)
                store_rows(rows)  # what was not handed over yet
                status = "ok" if rows["error"].isna().any() else "nothing measured"
            except KeyboardInterrupt:
                status = "interrupted"
                raise
            finally:
                store.finish_run(run_id, status)
            ran_on = gpu_of(devices[0] if devices else None)
            if ran_on is not None and ran_on.uuid != gpu.uuid:
                # The worker measured on another GPU than nvidia-smi's numbering suggested
                # (CUDA_DEVICE_ORDER): its own word is the key.
                store.relabel_gpu(run_id, ran_on.key, ran_on.uuid)
                notes.append(f"measured on {ran_on.key}, not {gpu.key or 'the GPU nvidia-smi names'}: stored as such")
                group["gpu"] = ran_on.key
        context = _Stored(settings, group, wanted_json, gpu.uuid)
        return context.rows(store), context


def tune(target: str, settings: TuneSettings | None = None, *, config_ids: list[int] | None = None,
         on_stage: Callable[[str, int], Callable[[str, int, str], None]] | None = None) -> TuneResult:
    from nsprof.profile import check_config_ids, check_measured, config_summary, precompile
    from nsprof.space import load_target

    settings = settings or TuneSettings()
    space = load_target(target)
    n = len(space.configs)
    wanted = list(range(n)) if config_ids is None else check_config_ids(config_ids, n)
    stage = on_stage or (lambda name, count: None)
    precompile(space, config_ids=wanted)
    notes: list[str] = []
    prescreen_table = None
    if settings.prescreen:
        rows = measure_rows(target, n, settings.prescreen, settings, wanted, stage(settings.prescreen, len(wanted)))
        prescreen_table = rank(config_summary(rows), settings.stat)
        prescreen_table.insert(2, "config", [config_label(space.configs[int(c)]) for c in prescreen_table["config_id"]])
        wanted = [int(c) for c in prescreen_table[prescreen_table["error"].isna()]["config_id"].head(settings.prescreen_top)]
        if not wanted:
            raise NsprofError(f"the prescreen timer {settings.prescreen} measured no config")
    progress = stage(settings.backend, len(wanted))
    timed, cost_of_first_pass = _timed(progress, settings)
    if settings.use_store:
        rows, stored = _measure_stored(target, space, settings.backend, settings, wanted, timed, notes)
    else:
        rows, stored = measure_rows(target, n, settings.backend, settings, wanted, timed), None
    rows, adaptive = _adaptive(target, n, settings, rows, stored, cost_of_first_pass(), stage)
    if settings.ground_truth:
        notes.append(adaptive.describe())
    summary = config_summary(rows)
    if settings.ground_truth:
        conditions = registry.driver_class(settings.backend).conditions(settings.profile)
        reps = (f"{settings.reps} reps" if not adaptive.reps else
                f"{settings.reps} reps, the contenders' up to {max(adaptive.reps_per_config.values())} (adaptive)")
        label = (f"{settings.backend}, mode {settings.mode}, {settings.stat} of {reps}"
                 + (f", {conditions}" if conditions else ""))
    else:
        label = f"fast timer {TIMER_BACKENDS[settings.backend]}, {settings.stat} of {settings.timer_reps} samples"
    table = rank(summary, settings.stat)
    table.insert(2, "config", [config_label(space.configs[int(c)]) for c in table["config_id"]])
    result = TuneResult(table, space.configs, settings.backend, label, prescreen_table, notes, stat=settings.stat,
                        adaptive=adaptive)
    best = result.best_config_id
    if best is None:
        check_measured(rows)
    tuner = space.tuner
    if settings.tuner_pick and tuner is not None and tuner.can_pick and best is not None:
        # Before the feed-back below, which makes the tuner pick nsprof's winner.
        try:
            result.tuner_pick = tuner_pick_in_child(target, settings, n)
        except Exception as exc:  # the user's tuner failed: the ranking still stands
            result.errors.append(f"the target's own autotuner failed: {one_line(f'{type(exc).__name__}: {exc}', 300)}")
        else:
            if result.tuner_pick is not None:  # None: the tuner could not say
                notes.append(describe_pick(result.tuner_pick, table))
    if settings.feed_back and tuner is not None and tuner.can_feed_back and best is not None:
        measured = table[table["error"].isna() & table["value_ns"].notna()]
        latencies_ms = {int(c): float(v) / 1e6 for c, v in zip(measured["config_id"], measured["value_ns"])}
        try:
            stored = tuner_in_child(target, "feed_back", [latencies_ms], settings, n)
        except Exception as exc:
            result.errors.append(f"feeding the ranking back to {tuner.name} failed: "
                                 f"{one_line(f'{type(exc).__name__}: {exc}', 300)}")
        else:
            notes.append(f"handed to {tuner.name}: {stored}")
    if prescreen_table is not None and best is not None:
        position = wanted.index(best) + 1
        notes.append(f"the ground-truth winner was #{position} of the prescreen's top {len(wanted)}")
        if position == len(wanted):
            notes.append("it was the last one sent to ground truth: a better config may lie outside the "
                         "prescreened set; raise --top")
    return result



def _timed(progress, settings: TuneSettings):
    """The first pass's progress callback, timing when each config finishes, and a function giving
    the cost model (nsprof.analysis.adaptive.first_pass_cost) from those times."""
    import time

    began = time.monotonic()
    done_at: list[float] = []

    def timed(event: str, config_id: int, detail: str) -> None:
        if event == "done":
            done_at.append(time.monotonic() - began)
        if progress is not None:
            progress(event, config_id, detail)

    def cost():
        return first_pass_cost(time.monotonic() - began, done_at, settings.reps, settings.profile.warmup)

    return timed, cost


def _adaptive(target: str, n: int, settings: TuneSettings, rows, stored: _Stored | None, cost, stage):
    """Adaptive reps for the contenders (nsprof.adaptive.refine), each session through the results
    store when there is one."""
    import pandas as pd

    from nsprof.adaptive import refine

    def measure(plan: Plan, number: int):
        progress = stage(f"adaptive {number}", len(plan.configs))
        if stored is not None:
            return stored.session(target, settings.backend, n, plan, number, progress)
        return measure_rows(target, n, settings.backend, settings, list(plan.configs), progress, plan=plan)

    def merge(rows, kept):
        return stored.merged() if stored is not None else pd.concat([rows, kept], ignore_index=True)

    return refine(rows, settings, measure=measure, merge=merge, cost=cost)


RESULT_MARKER = "NSPROF_RESULT "

TUNER_CALLS = ("pick", "feed_back")

_TUNER_CHILD = (
    "import json, sys\n"
    "from nsprof.space import load_target\n"
    "name, args = sys.argv[2], json.loads(sys.argv[3])\n"
    "if name == 'feed_back':\n"
    "    args = [{int(k): float(v) for k, v in args[0].items()}]\n"
    "tuner = load_target(sys.argv[1]).tuner\n"
    "if tuner is None:\n"
    "    sys.exit(f'{sys.argv[1]} has no tuner hook (Space.tuner)')\n"
    "result = getattr(tuner, name)(*args)\n"
    f"print({RESULT_MARKER!r} + json.dumps(result, default=str), flush=True)\n"
)


def tuner_in_child(target: str, name: str, args: list, settings: TuneSettings, n_configs: int):
    """Run the target Space's tuner hook, `space.tuner.<name>(*args)` ("pick" or "feed_back"), in
    a fresh child process; its result comes back as JSON.

    Its own benchmark loop runs user kernels: a child keeps a hang (timeout: the per-config
    timeout times the number of configs) or a lost CUDA context out of nsprof's process, and
    the GPU lock keeps other nsprof runs off the GPU meanwhile. A fresh process also computes
    the tuner's cache key exactly as the user's own next process will (TileLang's key is not
    the same in a process that has compiled configs already).
    """
    import subprocess
    import sys

    from nsprof.host.lock import gpu_lock

    if name not in TUNER_CALLS:
        raise ValueError(f"a tuner hook call is one of {TUNER_CALLS}, not {name!r}")
    timeout = settings.timeout_s * max(1, n_configs)
    with gpu_lock(0, wait=settings.wait):
        try:
            done = subprocess.run([sys.executable, "-c", _TUNER_CHILD, target, name, json.dumps(args)],
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NsprofError(f"it ran past {timeout:g} s (--timeout times the number of configs)") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    raise NsprofError(f"its process exited with status {done.returncode}" + (f": {lines[-1]}" if lines else ""))


def tuner_pick_in_child(target: str, settings: TuneSettings, n_configs: int) -> dict | None:
    """What the target's own autotuner picks with its own timer (its Space's tuner.pick())."""
    return tuner_in_child(target, "pick", [], settings, n_configs)
