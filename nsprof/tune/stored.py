"""A truth's rows in the results store: measure_stored (the first pass through the store: resume
per point, one transaction per point), Stored (a session's rows stored point by point, the rows to
rank read back, adaptive sessions as runs of their own), select_stored (which stored rows count)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

from nsprof.analysis.adaptive import Plan
from nsprof.errors import NsprofError, StoreError, TargetChanged, ToolNotFound, error_line
from nsprof.measure import GroundTruth, Measured
from nsprof.settings import Truth, TuneSettings
from nsprof.store_rows import config_json, json_digest, key_order, key_orders, settings_of
from nsprof.tune import measure
from nsprof.tune.measure import key_labels, retryable, shape_keys
from nsprof.tune.turn import resume_turn, storing_first_pass, takes_turns

__all__ = [
    "ADAPTIVE_RUN",
    "RANKED_POINTS",
    "TUNE_ID",
    "Stored",
    "adaptive_runs",
    "by_shape",
    "measure_stored",
    "select_stored",
    "stored_rows",
    "stored_tool_version",
]


ADAPTIVE_RUN = "adaptive_session"  # the key in a stored run's settings that marks a session of adaptive reps
TUNE_ID = "tune_id"  # the key in a stored run's settings naming the call of tune that stored it
RANKED_POINTS = "ranked_points"  # the key in a tune's runs' settings: [[shape JSON, [config ids]], ...]


def select_stored(stored, wanted_json: dict[int, str], adaptive_runs: set[int]):
    """Of stored rows of one shape, those tune ranks: only rows taken of today's configs (an id
    names another config once the space is edited); of each config its latest first-pass run
    (resumed runs can hold a config twice) and the adaptive sessions stored after it, which add
    reps to it; a rep held twice is the later run's."""
    import pandas as pd

    today = [wanted_json.get(int(c)) == text for c, text in zip(stored["config_id"], stored["config_json"])]
    stored = stored[pd.Series(today, index=stored.index, dtype=bool)]
    adaptive = stored["run_id"].isin(list(adaptive_runs))
    base = stored[~adaptive].groupby("config_id")["run_id"].max()
    first = stored["config_id"].map(base)
    keep = (stored["run_id"] == first) | (adaptive & first.notna() & (stored["run_id"] > first))
    stored = stored[keep.fillna(False).astype(bool)]
    latest_rep = stored.groupby(["config_id", "mode", "rep"], dropna=False)["run_id"].transform("max")
    return stored[stored["run_id"] == latest_rep]


TARGET_PLACE = "target_place"  # a run's record of its target's file, resolved: the same from any folder


def target_place(target: str) -> str | None:
    """Where `target` is, written the same from any folder: its file resolved, then its Space's name; None
    for a module's target, or a file not there."""
    from nsprof.space import target_file
    from nsprof.space_source import split_target

    where, name = split_target(target)
    try:
        file = target_file(where)
    except NsprofError:
        file = None
    return f"{file.resolve()}:{name}" if file is not None else None


def adaptive_runs(runs) -> set[int]:
    """The ids of the stored runs (store.runs()) that are sessions of adaptive reps."""
    return {int(i) for i, text in zip(runs["id"], runs["settings_json"]) if ADAPTIVE_RUN in settings_of(text)}


def stored_rows(store, group: dict, wanted_json: dict[int, str], shapes: dict[str, list[int]]):
    """The rows tune ranks of what `store` holds under `group` (the key without config) for the
    configs `wanted_json` ({config_id: config_json}), at each shape of `shapes` ({shape's JSON, ""
    for a target without shapes: the config ids this run ranks there}): select_stored of each
    shape's rows, one frame."""
    import pandas as pd

    adaptive = adaptive_runs(store.runs())
    per_shape = [
        select_stored(store.frame(**group, shape_json=text, config_id=list(ids)), wanted_json, adaptive)
        for text, ids in shapes.items()
    ]
    return per_shape[0] if len(per_shape) == 1 else pd.concat(per_shape, ignore_index=True)


def stored_tool_version(store, group: dict) -> str | None:
    """The tool version of the store's latest run under `group` (the key without config; its
    tool_version is not looked at): how a resume names the key's tool where the tool is not
    installed, the store being the one witness of the version it measured with. None when the
    store has no such run."""
    import pandas as pd

    runs = store.runs()
    same = pd.Series(True, index=runs.index)
    for name, value in group.items():
        if name != "tool_version":
            same &= runs[name].fillna("") == str(value)
    versions = runs[same.fillna(False).astype(bool)]["tool_version"]
    return None if versions.empty or versions.isna().iloc[-1] else str(versions.iloc[-1])


def _recorded(store, run_id: int, measure: Callable[[], object]):
    """measure()'s rows, with the store's run `run_id` finished as what happened: ok, nothing
    measured, interrupted (Ctrl-C, SIGTERM: re-raised), target changed (its worker refused a target
    edited since nsprof read it: re-raised) or failed. The store's own failure at the end (a
    StoreError: its file went meanwhile) never hides what stopped the run: it is said, in one line,
    and the interrupt or error goes on."""
    try:
        rows = measure()
    except BaseException as exc:
        status = (
            "interrupted"
            if isinstance(exc, KeyboardInterrupt)
            else "target changed"
            if isinstance(exc, TargetChanged)
            else "failed"
        )
        try:
            store.finish_run(run_id, status)
        except StoreError as failed:
            print(error_line(f"nsprof: error: {failed}"), file=sys.stderr, flush=True)
        raise
    store.finish_run(run_id, "ok" if rows["error"].isna().any() else "nothing measured")
    return rows


class Stored:
    """A truth's rows in the results store: the key of the space's rows (`group`), the config ids
    this run ranks at each shape (`wanted`, by_shape's) with their JSON (`wanted_json`), and the
    shapes' JSON (one "" for a target without shapes). Stores a session's rows point by point, and
    reads back the rows to rank."""

    def __init__(self, settings: TuneSettings, space, group: dict, wanted: dict, gpu_uuid: str):
        from nsprof.space import shape_json
        from nsprof.store import config_json

        self.settings, self.group, self.wanted, self.gpu_uuid = settings, group, wanted, gpu_uuid
        self.wanted_json = {c: config_json(space.configs[c]) for ids in wanted.values() for c in ids}
        self.missing_tool: str | None = None  # why the truth's tool cannot run here (a resume without it)
        self.turn_held = False  # a --resume --wait's turn (nsprof.tune.turn), held by the caller
        self.layout = space.points
        self.shape_jsons = {
            shape: "" if shape is None else shape_json(space.shapes[shape]) for shape in shape_keys(space)
        }

    def run_labels(self, target: str) -> dict:
        """What each run this tune stores records of it: its settings, the target's place, which call of tune it
        was (TUNE_ID), and the configs it ranks at each shape (its JSON), stored now or before (a --resume),
        which a re-read of the tune ranks (RANKED_POINTS; none for an explaining probe's run: settings.ranks
        false, the contenders alone)."""
        settings = self.settings
        points = [[self.shape_jsons[shape], ids] for shape, ids in self.wanted.items()]
        return {
            **settings.record(),
            TARGET_PLACE: target_place(target) or target,
            **({TUNE_ID: settings.tune_id} if settings.tune_id else {}),
            **({RANKED_POINTS: points} if settings.ranks else {}),
        }

    def key(self, config_id: int, shape: int | None):
        from nsprof.store import MeasurementKey

        return MeasurementKey(
            config_id=config_id,
            config_json=self.wanted_json[config_id],
            shape_json=self.shape_jsons[shape],
            shape=shape,
            **self.group,
        )

    def add(self, store, run_id: int, frame, done: set | None = None) -> None:
        """Each point's rows of `frame` in one transaction (each once, with `done`: Ctrl-C or SIGTERM
        keeps every point stored as soon as it was whole)."""
        import pandas as pd

        for (shape, config_id), rows in frame.groupby(["shape", "config_id"], sort=True, dropna=False):
            if pd.isna(config_id):
                continue
            point = (None if pd.isna(shape) else int(shape), int(config_id))
            if (done is not None and point in done) or point[1] not in self.wanted_json:
                continue
            if point[0] not in self.shape_jsons:
                continue  # a row of another shape than the target has: never stored under one of its
            store.add(run_id, self.key(point[1], point[0]), rows)
            if done is not None:
                done.add(point)

    def rows(self, store):
        shapes = {self.shape_jsons[shape]: ids for shape, ids in self.wanted.items()}
        rows = stored_rows(store, self.group, self.wanted_json, shapes)
        if None not in self.shape_jsons and len(rows):
            # a row's shape is where its shape stands in the target now, not where it stood when measured
            rows["shape"] = rows["shape_json"].map({text: shape for shape, text in self.shape_jsons.items()})
        return rows

    def session(
        self, target: str, truth: Truth, n: int, plan: Plan, number: int, on_progress, space=None, ahead=None
    ):
        """One adaptive session (in `ahead`'s worker when given: measure_rows), stored as a run of its own
        (marked ADAPTIVE_RUN), each point's rows in one transaction as the session hands them over; returns
        its rows."""
        from nsprof.adaptive import planned_rows
        from nsprof.store import ResultStore

        with ResultStore(self.settings.store) as store:
            labels = {
                **self.run_labels(target),
                ADAPTIVE_RUN: number,
                "configs": list(plan.configs),
                "rounds": plan.rounds,
            }
            run_id = store.start_run(target=target, settings=labels, gpu_uuid=self.gpu_uuid, **self.group)

            def store_rows(frame) -> None:
                self.add(store, run_id, planned_rows(frame, plan, self.layout))

            return _recorded(
                store,
                run_id,
                lambda: measure.measure_rows(
                    target,
                    n,
                    truth,
                    self.settings,
                    list(plan.configs),
                    on_progress,
                    on_rows=store_rows,
                    plan=plan,
                    n_shapes=self.layout.n_shapes,
                    space=space,
                    ahead=ahead,
                ),
            )

    def merged(self):
        from nsprof.store import ResultStore

        with ResultStore(self.settings.store) as store:
            return self.rows(store)

    def turn_before_sessions(self, held: contextlib.ExitStack):
        """A --resume --wait's turn (nsprof.tune.turn) before its first adaptive session, where its
        first pass took none (nothing was missing), held in `held` to the end of its adaptive reps:
        two such resumes would otherwise plan the same reps of the same configs. Returns the rows to
        decide on again where another run was waited for (it may have stored those very reps), else None."""
        if self.turn_held or not takes_turns(self.settings):
            return None
        self.turn_held = True
        return self.merged() if held.enter_context(resume_turn()) else None


def by_shape(space, points: list[int]) -> dict[int | None, list[int]]:
    """The config ids among `points` at each shape (shape_keys order; a shape without any is left out)."""
    layout = space.points
    out: dict[int | None, list[int]] = {}
    for point in points:
        config_id, shape = layout.split(point)
        out.setdefault(shape, []).append(config_id)
    return {shape: out[shape] for shape in shape_keys(space) if shape in out}


def measure_stored(
    target: str,
    space,
    truth: Truth,
    settings: TuneSettings,
    points: list[int],
    on_progress,
    notes: list[str],
    on_measured: Callable[[Measured], None] | None = None,
    held: contextlib.ExitStack | None = None,
    on_turn: Callable[[], None] | None = None,
    ahead=None,
):
    """measure_rows through the results store: resume per point, one transaction per point, GPU lock.
    Returns the rows to rank (see select_stored) and the Stored context for adaptive sessions. With
    `held`, a --resume --wait's turn (nsprof.tune.turn) is entered there, so that the caller holds it
    through the adaptive reps too; without, for the first pass only. on_turn: called once the turn
    is taken (the first pass's clock starts again: waiting for another run is none of its time). ahead: a
    worker started ahead for the first pass (measure_rows)."""
    from nsprof.store import ResultStore

    group, gpu, missing_tool = _key(target, space, truth, settings)
    wanted = by_shape(space, points)
    context = Stored(settings, space, group, wanted, gpu.uuid)
    with ResultStore(settings.store) as store:
        if missing_tool is not None:
            _key_without_the_tool(store, context, truth, missing_tool, notes)
        noted = len(notes)
        todo = (
            _to_measure(store, context, settings, wanted, points, notes) if settings.resume else list(points)
        )
        # --resume --wait: another run may be storing these very points (nsprof.tune.turn), and then
        # adaptive reps of them: the caller holds the turn through its own
        turn = bool(todo) and takes_turns(settings)
        with contextlib.ExitStack() as here:
            waited = (held or here).enter_context(resume_turn()) if turn else False
            context.turn_held = bool(turn) and held is not None
            if turn and on_turn is not None:
                on_turn()
            if waited:
                del notes[noted:]  # decided again, now that the other run has stored what it measured
                todo = _to_measure(store, context, settings, wanted, points, notes)
            if todo and missing_tool is not None:
                raise missing_tool
            if todo:
                first = (truth, todo, on_progress, on_measured, ahead)
                _first_pass(store, context, target, space, first, gpu, notes)
            else:
                space.confirm()  # no worker checks the target: the stored rows are ranked under its configs as read
        return context.rows(store), context


def _key(target: str, space, truth: Truth, settings: TuneSettings):
    """The store key of `truth`'s rows of `space` (without the config), the GPU it names, and the
    ToolNotFound of a resume whose tool is not installed (None when it is, or not needed)."""
    from nsprof.cluster import cluster_gpu
    from nsprof.host.gpu import which_gpu
    from nsprof.space_source import target_fingerprint

    tool_version, missing_tool = "", None
    if truth.profiler:
        try:
            tool_version = GroundTruth(settings.truth_profile(truth)).tool_version()
        except ToolNotFound as exc:
            if not settings.resume:
                raise
            missing_tool = exc  # the store may hold every point: then nothing needs the tool
    # A fast timer's row holds the statistic asked for, so that is part of what it measured. A truth's
    # variant (ncu@base-warm) is stored as its backend: its clock and cache labels say the rest.
    stored_backend = truth.backend if truth.profiler else f"{truth.backend}:{settings.stat}"
    gpu = which_gpu(0) if settings.cluster is None else cluster_gpu(settings.cluster)
    group = {
        "fingerprint": space.fingerprint or target_fingerprint(target),
        "gpu": gpu.key,
        "backend": stored_backend,
        "tool_version": tool_version,
        **key_labels(truth, settings),
    }
    return group, gpu, missing_tool


def _key_without_the_tool(store, context: Stored, truth: Truth, missing_tool, notes: list[str]) -> None:
    """No tool, no version to key by: the store's latest run under this key says which it was."""
    stored_version = stored_tool_version(store, context.group)
    if stored_version is None:
        raise missing_tool
    context.group["tool_version"] = stored_version
    context.missing_tool = str(missing_tool)
    notes.append(
        f"{truth.backend} is not installed here: resumed under the tool version the store's "
        f"latest {truth.name} run of this target recorded ({stored_version})"
    )


def _to_measure(
    store, context: Stored, settings: TuneSettings, wanted: dict, points: list[int], notes
) -> list[int]:
    """The points of a resume the store has nothing for (or a failure worth measuring again: retryable)."""
    layout = context.layout
    sessions = adaptive_runs(store.runs())  # they add reps: a config they lost keeps its first pass
    todo = [
        layout.id(c, shape)
        for shape, configs in wanted.items()
        for c in store.missing(
            context.group,
            configs,
            config_jsons=context.wanted_json,
            retry_failed=settings.retry_failed,
            retry_if=lambda failure: retryable(failure, settings.timeout_s),
            shape_json=context.shape_jsons[shape],
            adding_runs=sessions,
        )
    ]
    unit = "(shape, config) pairs" if layout.shaped else "configs"
    notes.append(f"resumed: {len(points) - len(todo)} of {len(points)} {unit} came from the results store")
    return todo


def _first_pass(store, context: Stored, target, space, first, gpu, notes) -> None:
    """The first pass (`first`: its truth, the points to do, the progress and Measured callbacks, the
    worker started ahead for it or None), stored as a run, each point's rows as soon as they are whole."""
    from nsprof.host.gpu import gpu_of

    truth, todo, on_progress, on_measured, ahead = first
    settings = context.settings
    record = {
        **context.run_labels(target),
        "config_key_orders": key_orders(space.configs),
        "shape_keys": key_order(space.shapes or []),
        # what the target listed, every config's JSON (its digest) by id and every shape's in order: a re-read
        # ranks no config an id named before and numbers each shape as this run did; the counts for older readers
        "listed_config_digests": [json_digest(config_json(c)) for c in space.configs],
        "listed_shapes": list(context.shape_jsons.values()),
        "n_configs": len(space.configs),
        "shape_jsons": sorted(set(context.shape_jsons.values())),
    }
    run_id = store.start_run(target=target, settings=record, gpu_uuid=gpu.uuid, **context.group)
    done: set = set()
    devices: list[dict | None] = []

    def first_pass():
        rows = measure.measure_rows(
            target,
            len(space.configs),
            truth,
            settings,
            todo,
            on_progress,
            on_rows=lambda frame: context.add(store, run_id, frame, done),
            on_device=devices.append,
            n_shapes=space.points.n_shapes,
            on_measured=on_measured,
            space=space,
            ahead=ahead,
        )
        context.add(store, run_id, rows, done)  # what was not handed over yet
        return rows

    # a --resume --wait behind this run's job in an nsprof serve waits for its rows (nsprof.tune.turn); not a
    # run the server cannot take, which waits for the GPU itself
    served = truth.profiler and measure.serving_worker(truth, settings) is not None  # servers run profilers
    with storing_first_pass(gpu) if served else contextlib.nullcontext():
        _recorded(store, run_id, first_pass)
    ran_on = gpu_of(devices[0] if devices else None)
    # A cluster's key names every worker's GPU (nsprof.cluster.cluster_gpu), while a run's
    # batches may have used only some of them: that is no reason to relabel.
    if settings.cluster is None and ran_on is not None and ran_on.uuid != gpu.uuid:
        # The worker measured on another GPU than nvidia-smi's numbering suggested
        # (CUDA_DEVICE_ORDER): its own word is the key.
        store.relabel_gpu(run_id, ran_on.key, ran_on.uuid)
        notes.append(f"measured on {ran_on.key}, not {gpu.key or 'the GPU nvidia-smi names'}: stored as such")
        context.group["gpu"] = ran_on.key
