"""`nsprof tune`: rank every config of a target by ground truth (or a fast timer).

    ranked = tune("examples/gemm_tilelang.py:space", TuneSettings(backend="ncu", mode="graph"))
    ranked.best_config, ranked.table

Ground truths (ncu, nsys) run through nsprof.profile; fast timers (graph, cupti, event and
their variants) through the timer worker. `prescreen` ranks all configs with a fast timer
first and sends only the best `prescreen_top` to the ground truth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nsprof.analysis.ranking import rank
from nsprof.errors import NsprofError
from nsprof.render.tables import describe_pick
from nsprof.reports.checks import one_line
from nsprof.space import config_label

GROUND_TRUTHS = ("ncu", "nsys")
# --backend names of the fast timers -> nsprof timer method names
TIMER_BACKENDS = {"graph": "graph_warm", "graph_cold": "graph_cold", "cupti": "cupti", "cupti_cold": "cupti_cold",
                  "event": "event", "event_cold": "event_cold"}


@dataclass(frozen=True)
class TuneSettings:
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
    # config are: see retryable)
    retry_failed: bool = False
    wait: bool = False  # wait for another nsprof profiling this GPU instead of failing
    feed_back: bool = True  # hand the ranking to the target's tuner when its Space can take it
    tuner_pick: bool = True  # say what the target's own tuner picks with its own timer, when it can say

    def __post_init__(self) -> None:
        if self.backend not in GROUND_TRUTHS and self.backend not in TIMER_BACKENDS:
            raise NsprofError(f"unknown backend {self.backend!r}: choose from "
                              f"{', '.join(GROUND_TRUTHS + tuple(TIMER_BACKENDS))}")
        if self.mode not in ("direct", "graph"):
            raise NsprofError("mode must be direct or graph")
        if self.stat not in ("median", "min"):
            raise NsprofError("stat must be median or min")
        if self.prescreen is not None and self.prescreen not in TIMER_BACKENDS:
            raise NsprofError(f"--prescreen takes a fast timer: {', '.join(TIMER_BACKENDS)}")
        if self.prescreen_top < 1:
            raise NsprofError("--top must be at least 1")


@dataclass
class TuneResult:
    table: object  # ranked DataFrame: rank, config_id, config, value_ns, spread, cycles, clock, vs_best
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

    @property
    def best_config_id(self) -> int | None:
        measured = self.table[self.table["error"].isna()]
        return None if measured.empty else int(measured.iloc[0]["config_id"])

    @property
    def best_config(self):
        best = self.best_config_id
        return None if best is None else self.configs[best]


def key_labels(backend: str, mode: str) -> dict[str, str]:
    """The conditions a measurement is taken under (results-store key fields)."""
    if backend == "ncu":
        return {"mode": mode, "clock_control": "base", "cache_control": "all"}
    if backend == "nsys":
        return {"mode": mode, "clock_control": "none", "cache_control": "none"}
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
                 on_rows: Callable[[object], None] | None = None):
    """Tidy rows for `config_ids` under `backend`: kernels for ground truths; for a fast timer one
    row per config holding the timer's statistic as rep 0. Failed configs are rows with an error.

    on_rows(frame) gets whole configs' rows as they are known (each worker run's, and on Ctrl-C
    or SIGTERM what was finished), so that they can be stored before the run ends. The result's
    attrs["device"] is what the worker measured on ({"uuid", "name"}), where it said.
    """
    if backend in GROUND_TRUTHS:
        from nsprof.profile import profile
        from nsprof.settings import ProfileSettings

        return profile(target, ProfileSettings(backend=backend, modes=(settings.mode,), reps=settings.reps,
                                               timeout_s=settings.timeout_s, work_dir=settings.work_dir,
                                               wait_gpu=settings.wait),
                       config_ids=config_ids, on_progress=on_progress, on_rows=on_rows)
    import tempfile

    from nsprof.schema import make_frame
    from nsprof.validate import ValidateSettings, _run_timer_group

    name = TIMER_BACKENDS[backend]
    labels = key_labels(backend, settings.mode)
    value = "median_ns" if settings.stat == "median" else "min_ns"

    def records(rows: list[dict], failures: dict):
        out = []
        for row in rows:
            if row.get("error"):
                out.append({"config_id": row["config_id"], "error": row["error"], "source": name, **labels})
                continue
            clock_mhz = (row.get("conditions") or {}).get("sm_clock_mhz_after")
            out.append({"config_id": row["config_id"], "rep": 0, "kernel": name, "source": name,
                        "duration_ns": row.get(value), "clock_hz": None if clock_mhz is None else clock_mhz * 1e6,
                        **labels})
        have = {r["config_id"] for r in out}
        for (_, config_id), reason in failures.items():
            if config_id not in have:  # a config whose every method failed has its rows already
                out.append({"config_id": config_id, "error": reason, "source": name, **labels})
        return make_frame(out)

    work_dir = Path(settings.work_dir or tempfile.mkdtemp(prefix="nsprof-tune-"))
    rows, failures, device = _run_timer_group(
        target, n, [name], ValidateSettings(timer_reps=settings.timer_reps, timeout_s=settings.timeout_s,
                                            wait=settings.wait),
        work_dir / f"timer-{name}", on_progress, config_ids=config_ids,
        on_interrupt=None if on_rows is None else (lambda finished: on_rows(records(finished, {}))))
    frame = records(rows, failures)
    frame.attrs["device"] = device
    return frame


def gpu_of(device: dict | None):
    """The nsprof.host.gpu.Gpu a worker's device report names, or None (a CPU target, an old worker)."""
    from nsprof.host.gpu import Gpu

    uuid = str((device or {}).get("uuid") or "")
    if not uuid:
        return None
    if not uuid.startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid  # torch leaves out nvidia-smi's prefix
    return Gpu(None, uuid, str(device.get("name") or ""))


def _measure_stored(target: str, space, backend: str, settings: TuneSettings, wanted: list[int], on_progress,
                    notes: list[str]):
    """measure_rows through the results store: resume, one transaction per config, GPU lock."""
    from nsprof.host.gpu import which_gpu
    from nsprof.space import target_fingerprint
    from nsprof.store import MeasurementKey, ResultStore, config_json

    tool_version = ""
    if backend in GROUND_TRUTHS:
        from nsprof.host import tools

        tool = tools.find_ncu() if backend == "ncu" else tools.find_nsys()
        tool_version = tools.tool_version(tool.path)
    # A fast timer's row holds the statistic asked for, so that is part of what it measured.
    stored_backend = backend if backend in GROUND_TRUTHS else f"{backend}:{settings.stat}"
    gpu = which_gpu(0)
    group = {"fingerprint": target_fingerprint(target), "gpu": gpu.key, "backend": stored_backend,
             "tool_version": tool_version, **key_labels(backend, settings.mode)}
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
                rows = measure_rows(target, len(space.configs), backend, settings, todo, on_progress,
                                    on_rows=store_rows)
                store_rows(rows)  # what was not handed over yet
                status = "ok" if rows["error"].isna().any() else "nothing measured"
            except KeyboardInterrupt:
                status = "interrupted"
                raise
            finally:
                store.finish_run(run_id, status)
            ran_on = gpu_of(rows.attrs.get("device"))
            if ran_on is not None and ran_on.uuid != gpu.uuid:
                # The worker measured on another GPU than nvidia-smi's numbering suggested
                # (CUDA_DEVICE_ORDER): its own word is the key.
                store.relabel_gpu(run_id, ran_on.key, ran_on.uuid)
                notes.append(f"measured on {ran_on.key}, not {gpu.key or 'the GPU nvidia-smi names'}: stored as such")
                group["gpu"] = ran_on.key
        stored = store.frame(**group, config_id=wanted)
    # Only rows taken of today's configs (an id names another config once the space is edited),
    # and of each config its latest run (resumed runs can hold a config twice).
    stored = stored[[wanted_json.get(int(c)) == text for c, text in zip(stored["config_id"], stored["config_json"])]]
    latest = stored.groupby("config_id")["run_id"].transform("max")
    return stored[stored["run_id"] == latest]


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
    if settings.use_store:
        rows = _measure_stored(target, space, settings.backend, settings, wanted, progress, notes)
    else:
        rows = measure_rows(target, n, settings.backend, settings, wanted, progress)
    summary = config_summary(rows)
    if settings.backend in GROUND_TRUTHS:
        label = (f"{settings.backend}, mode {settings.mode}, {settings.stat} of {settings.reps} reps"
                 + (", clocks locked to base, caches flushed" if settings.backend == "ncu" else
                    ", CUPTI kernel trace at the run's own clocks"))
    else:
        label = f"fast timer {TIMER_BACKENDS[settings.backend]}, {settings.stat} of {settings.timer_reps} samples"
    table = rank(summary, settings.stat)
    table.insert(2, "config", [config_label(space.configs[int(c)]) for c in table["config_id"]])
    result = TuneResult(table, space.configs, settings.backend, label, prescreen_table, notes)
    best = result.best_config_id
    if best is None:
        check_measured(rows)
    if settings.tuner_pick and space.meta.get("tuner_pick") is not None and best is not None:
        # Before the feed-back below, which makes the tuner pick nsprof's winner.
        try:
            result.tuner_pick = tuner_pick_in_child(target, settings, n)
        except Exception as exc:  # the user's tuner failed: the ranking still stands
            result.errors.append(f"the target's own autotuner failed: {one_line(f'{type(exc).__name__}: {exc}', 300)}")
        else:
            notes.append(describe_pick(result.tuner_pick, table))
    hand_back = space.meta.get("feed_back")
    if settings.feed_back and hand_back is not None and best is not None:
        measured = table[table["error"].isna() & table["value_ns"].notna()]
        latencies_ms = {int(c): float(v) / 1e6 for c, v in zip(measured["config_id"], measured["value_ns"])}
        to = space.meta.get("feed_back_to", "the tuner")
        try:
            stored = meta_in_child(target, "feed_back", [latencies_ms], settings, n)
        except Exception as exc:
            result.errors.append(f"feeding the ranking back to {to} failed: "
                                 f"{one_line(f'{type(exc).__name__}: {exc}', 300)}")
        else:
            notes.append(f"handed to {to}: {stored}")
    if prescreen_table is not None and best is not None:
        position = wanted.index(best) + 1
        notes.append(f"the ground-truth winner was #{position} of the prescreen's top {len(wanted)}")
        if position == len(wanted):
            notes.append("it was the last one sent to ground truth: a better config may lie outside the "
                         "prescreened set; raise --top")
    return result




RESULT_MARKER = "NSPROF_RESULT "

_META_CHILD = (
    "import json, sys\n"
    "from nsprof.space import load_target\n"
    "name, args = sys.argv[2], json.loads(sys.argv[3])\n"
    "if name == 'feed_back':\n"
    "    args = [{int(k): float(v) for k, v in args[0].items()}]\n"
    "result = load_target(sys.argv[1]).meta[name](*args)\n"
    f"print({RESULT_MARKER!r} + json.dumps(result, default=str), flush=True)\n"
)


def meta_in_child(target: str, name: str, args: list, settings: TuneSettings, n_configs: int):
    """Run the target Space's meta[name](*args) (its own tuner's pick, or the feed-back) in a child.

    Its own benchmark loop runs user kernels: a child keeps a hang (timeout: the per-config
    timeout times the number of configs) or a lost CUDA context out of nsprof's process, and
    the GPU lock keeps other nsprof runs off the GPU meanwhile. A fresh process also computes
    the tuner's cache key exactly as the user's own next process will (TileLang's key is not
    the same in a process that has compiled configs already).
    """
    import subprocess
    import sys

    from nsprof.host.lock import gpu_lock

    timeout = settings.timeout_s * max(1, n_configs)
    with gpu_lock(0, wait=settings.wait):
        try:
            done = subprocess.run([sys.executable, "-c", _META_CHILD, target, name, json.dumps(args)],
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NsprofError(f"it ran past {timeout:g} s (--timeout times the number of configs)") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    raise NsprofError(f"its process exited with status {done.returncode}" + (f": {lines[-1]}" if lines else ""))


def tuner_pick_in_child(target: str, settings: TuneSettings, n_configs: int) -> dict:
    """What the target's own autotuner picks with its own timer (its Space's meta["tuner_pick"])."""
    return meta_in_child(target, "tuner_pick", [], settings, n_configs)
