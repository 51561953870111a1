"""A stored tune read again: reread ranks what the results store holds for a target's configs as tune
ranks it (stored_rows, then rank_rows), per shape and per truth, with no GPU and no profiler, and
without importing the target.

    with ResultStore(path) as store:
        report = reread(store, target="examples/gemm.py:space")   # or run_id=3
    format_tune(report)

What a tune ran with comes from the store: the settings its latest run of the target recorded (the
truths, the deploy truth, the mode, the statistic; --run: that run's), each truth's key from the
latest run under that truth's conditions (the target's fingerprint, the GPU, the tool version), and
the configs from the JSON the store keeps of each (its latest run's): their labels are made from
that JSON, so the target's Space is not needed. The truths' winners are compared as tune compares
them; what explains a disagreement needs probes measured again (tune --explain), so none is said here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from nsprof.analysis.tune_report import ShapeReport, TuneReport, check_ranked
from nsprof.errors import NsprofError
from nsprof.settings import Truth, TuneSettings
from nsprof.space import config_label
from nsprof.store_rows import in_order, json_digest, own_order, settings_of
from nsprof.tune.explain import cross_truth
from nsprof.tune.measure import key_labels
from nsprof.tune.rankings import rank_rows, unmeasured_shape
from nsprof.tune.stored import RANKED_POINTS, TARGET_PLACE, TUNE_ID, adaptive_runs, stored_rows, target_place

__all__ = ["reread"]

MAX_CONFIG_ID = 10_000_000  # a config id past it is no index of a space a store could have measured
# The settings a tune records (TuneSettings.record) that decide how its numbers are ranked and labelled.
_RANKING_SETTINGS = ("mode", "stat", "reps", "timer_reps", "max_reps", "truths", "deploy")


def same_target(stored: str, asked: str) -> bool:
    """Whether a run's target (as its tune was given it) is `asked`: the same text, or the same
    file (resolved from here) and Space."""
    if stored == asked:
        return True
    stored_file, _, stored_name = stored.rpartition(":")
    asked_file, _, asked_name = asked.rpartition(":")
    if not (stored_file and asked_file) or stored_name != asked_name:
        return False
    return Path(stored_file).resolve() == Path(asked_file).resolve()


def _missing(value) -> bool:
    import pandas as pd

    return value is None or bool(pd.api.types.is_scalar(value) and pd.isna(value))


def _text(value) -> str:
    return "" if _missing(value) else str(value)


def _record(run) -> dict:
    """What a stored run recorded of its settings (settings_json); {} where it holds nothing readable."""
    return settings_of(_text(run.settings_json) or "{}")


def _settings(run, store) -> TuneSettings:
    """The TuneSettings a stored run's tune ranked with, as far as ranking needs them; a run without
    recorded settings: its own backend and mode, the defaults for the rest. Settings no tune records
    (edited by hand): StoreError, one line."""
    record = _record(run)
    backend, _, stat = _text(run.backend).partition(":")  # a fast timer is stored as timer:stat
    given = {name: record[name] for name in _RANKING_SETTINGS if record.get(name) not in (None, "", [])}
    given.setdefault("mode", _text(run.mode) or "graph")
    if stat:
        given.setdefault("stat", stat)
    try:
        given["truths"] = tuple(given.get("truths", ()))
        return TuneSettings(
            backend=str(record.get("backend") or backend),
            **given,
            explain=False,  # the winners are compared; no probe is measured again
            feed_back=False,
            tuner_pick=False,
        )
    except (TypeError, ValueError, NsprofError) as exc:
        raise store.edited(f"run {run.id}'s settings {_text(run.settings_json)[:60]!r} ({exc})") from None


def _key_orders(runs, anchor) -> dict:
    """The key orders (store_rows.key_orders' of the configs, key_order's of the shapes) of the target's runs
    (`runs`, one fingerprint's), and the configs (their JSON's digests, by id) and shapes (their JSON, in
    order) the target listed: the newest first pass's that recorded them up to the `anchor` run (after it
    only where none did; an adaptive session's run records none); none for a store that holds none (its keys
    then come in the store's sorted order, and every config and shape it holds is ranked)."""
    for run in sorted(runs.itertuples(), key=lambda r: (int(r.id) > int(anchor.id), -int(r.id))):
        record = _record(run)
        if isinstance(record.get("config_key_orders"), dict):
            n, shapes = record.get("n_configs"), record.get("shape_jsons")
            return {
                "config_key_orders": record["config_key_orders"],
                "shape_keys": record.get("shape_keys"),
                "listed_config_digests": _texts(record.get("listed_config_digests")),
                "listed_shapes": _texts(record.get("listed_shapes")),
                # what a run recorded before the lists: how many configs, which shapes (sorted)
                "n_configs": n if type(n) is int and n >= 0 else None,
                "shape_jsons": shapes if isinstance(shapes, list) else None,
            }
    return dict.fromkeys(
        ("shape_keys", "listed_config_digests", "listed_shapes", "n_configs", "shape_jsons"), None
    ) | {"config_key_orders": {}}


def _texts(value) -> list[str] | None:
    """`value` where it is a list of strings (a run's listed configs or shapes), else None."""
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def _truth_key(truth: Truth, settings: TuneSettings) -> tuple[str, dict]:
    """The backend and labels `truth`'s stored runs carry."""
    return (truth.backend if truth.profiler else f"{truth.backend}:{settings.stat}"), key_labels(
        truth, settings
    )


def _of_truth(truth: Truth, settings: TuneSettings):
    """Whether a stored run is one of `truth`'s (its backend and labels)."""
    backend, labels = _truth_key(truth, settings)
    return lambda run: (
        _text(run.backend) == backend and all(_text(getattr(run, k)) == v for k, v in labels.items())
    )


def _group(runs, truth: Truth, settings: TuneSettings, anchor) -> dict | None:
    """The key (without config) of `truth`'s rows among `runs` (the target's): the anchor run's when
    it is one of that truth's, else the latest one's on the anchor's GPU; None when no run is."""
    backend, labels = _truth_key(truth, settings)
    of_truth = _of_truth(truth, settings)
    if of_truth(anchor):
        run = anchor
    else:
        matching = [run for run in runs.itertuples() if of_truth(run) and _text(run.gpu) == _text(anchor.gpu)]
        if not matching:
            return None
        run = matching[-1]
    return {
        "run_id": [int(r) for r in runs["id"]],
        "fingerprint": _text(run.fingerprint),
        "gpu": _text(run.gpu),
        "backend": backend,
        "tool_version": _text(run.tool_version),
        **labels,
    }


def _cut_short(store, ids: list[int]) -> list[str]:
    """The note where the newest of the runs `ids` ended before measuring all it was asked (interrupted, or
    still "running": killed, or running now): the configs it did not reach come from the earlier runs that
    finished, if any, else the ranking may lack them; none once a later run (a --resume) finished."""
    runs = store.runs()
    status = dict(zip(runs["id"].astype(int), runs["status"]))
    newest = max(ids)
    if status.get(newest) not in ("interrupted", "running"):
        return []
    how = "was interrupted" if status[newest] == "interrupted" else "never finished (killed, or running now)"
    whole = [str(run) for run in ids if run != newest and status.get(run) == "ok"]
    if whole:
        return [
            f"run {newest} {how}: the configs it did not reach are ranked as run {', '.join(whole)} measured them"
        ]
    return [
        f"run {newest} {how}: a config it never reached is not in this ranking (tune --resume "
        "measures what is missing)"
    ]


def _ranked_points(runs, truth: Truth, settings: TuneSettings, anchor) -> set | None:
    """The (config id, shape JSON) points the tune ranked, as its runs recorded them (`runs`: the tune's): the
    oldest run of the anchor's call that did (a call ranks the same points under every truth; its explaining
    probes record none), else `truth`'s newest first pass up to the `anchor` run that did; None where none did
    (an nsprof that recorded none)."""
    call = _record(anchor).get(TUNE_ID)
    recorded = [run for run in runs.itertuples() if isinstance(_record(run).get(RANKED_POINTS), list)]
    own = [run for run in recorded if call is not None and _record(run).get(TUNE_ID) == call]
    if own:
        run = min(own, key=lambda r: int(r.id))
    else:
        of_truth, adaptive = _of_truth(truth, settings), adaptive_runs(runs)
        earlier = [r for r in recorded if of_truth(r) and int(r.id) not in adaptive]
        if not earlier:
            return None
        run = min(earlier, key=lambda r: (int(r.id) > int(anchor.id), -int(r.id)))
    ranked = _record(run)[RANKED_POINTS]
    try:
        return {(int(c), str(shape)) for shape, ids in ranked for c in ids}
    except (TypeError, ValueError):
        raise ValueError(f"run {run.id}'s {RANKED_POINTS} {str(ranked)[:60]!r}") from None


def _rank_group(
    store, truth: Truth, settings: TuneSettings, group: dict, orders: dict, ranked: set | None
) -> tuple[list, dict]:
    """The configs (their stored JSON, keys in the run's order: `orders`; None for an id it holds none of)
    and {shape: (shape's value, Ranking)} of what `store` holds under `group`: every config it holds, as its
    latest run stored it, ranked at each shape it holds (None: a target without shapes): only of the
    configs and shapes the target listed then (`orders`, where recorded), and of the points the tune ranked
    (`ranked`, where recorded: a tune of some configs ranks those alone)."""
    frame = store.frame(**group)
    if frame.empty:
        return [], {}
    _check_written_by_nsprof(store, frame)
    if ranked is not None:
        points = zip(frame["config_id"], frame["shape_json"].fillna(""))
        frame = frame.loc[[(int(c), str(shape)) in ranked for c, shape in points]]  # loc: [] is no rows
    listed = orders["listed_config_digests"]
    if listed is not None:  # rows of the config each id named then, not of one it named before
        digests = {text: json_digest(str(text)) for text in set(frame["config_json"])}
        frame = frame.loc[
            [
                c < len(listed) and listed[c] == digests[t]
                for c, t in zip(frame["config_id"], frame["config_json"])
            ]
        ]
    elif orders["n_configs"] is not None:
        frame = frame[frame["config_id"] < orders["n_configs"]]
    shapes_listed = orders["listed_shapes"] or orders["shape_jsons"]
    if shapes_listed is not None:
        frame = frame[frame["shape_json"].fillna("").isin(shapes_listed)]
    if frame.empty:
        return [], {}
    latest = frame.sort_values("run_id", kind="stable").groupby("config_id").tail(1)
    wanted_json = {int(c): str(text) for c, text in zip(latest["config_id"], latest["config_json"])}
    configs = [None] * (max(wanted_json) + 1)
    for config_id, text in wanted_json.items():
        order = own_order(orders["config_key_orders"], config_id)
        configs[config_id] = in_order(_loaded(store, f"config {config_id}", text), order)
    shapes = _shape_indices(frame, orders["listed_shapes"])
    at = {text: [c for c in wanted_json if ranked is None or (c, text) in ranked] for _, text in shapes}
    rows = stored_rows(store, group, wanted_json, at)  # each shape's configs its tune ranked
    ids = sorted({int(r) for r in rows["run_id"]})
    runs = ", ".join(map(str, ids))
    notes = [
        f"re-read from the results store {store.path}: runs {runs} (nothing measured now)",
        *_cut_short(store, ids),
    ]
    results = {}
    for shape, text in shapes:
        of_shape = rows if shape is None else rows[(rows["shape_json"] == text).fillna(False).astype(bool)]
        if shape is not None:
            of_shape = of_shape.assign(shape=shape)
        value = (
            None if shape is None else in_order(_loaded(store, f"shape {shape}", text), orders["shape_keys"])
        )
        ranking = rank_rows(configs, truth, settings, of_shape, list(notes))
        if shape is not None and ranking.best_config_id is None:
            ranking.notes.append(unmeasured_shape(shape, config_label(value)))
        results[shape] = (value, ranking)
    return configs, results


def _check_written_by_nsprof(store, frame) -> None:
    """A store edited by hand, in one line (store.edited): a config id no list could hold, a shape or a config
    that is no JSON."""
    ids = [int(c) for c in frame["config_id"]]
    if min(ids) < 0 or max(ids) > MAX_CONFIG_ID:  # a list of that many would not fit
        raise store.edited(f"config id {min(ids) if min(ids) < 0 else max(ids)}")
    for text in set(frame["shape_json"].dropna()) - {""}:
        _loaded(store, "shape", str(text))
    for text, config_id in frame.groupby("config_json", sort=False)["config_id"].first().items():
        _loaded(store, f"config {config_id}", str(text))


def _loaded(store, what: str, text: str):
    """The JSON `text` of `what` the store holds; a store that holds no JSON there was edited by hand."""
    try:
        return json.loads(text)
    except ValueError:
        raise store.edited(f"{what} as {text[:60]!r}") from None


def _shape_indices(frame, listed: list[str] | None) -> list[tuple[int | None, str]]:
    """(index, JSON) of each shape the rows hold (None, "" for a target without shapes), by its JSON: a target
    may list its shapes in another order from run to run. Its index is its place in `listed` (the shapes the
    re-read's run listed, in order) where recorded; else where the newest run holding it listed it, a shape
    whose index a newer run gave another shape after the others."""
    held = set(map(str, frame["shape_json"].fillna("")))
    if listed is not None and held <= set(listed):
        if listed == [""]:
            return [(None, "")]
        return [(index, text) for index, text in enumerate(listed) if text in held]
    newest: dict[str, tuple[int, int | None]] = {}
    for run_id, shape, text in zip(frame["run_id"], frame["shape"].astype(object), frame["shape_json"]):
        if str(text) not in newest or int(run_id) > newest[str(text)][0]:
            newest[str(text)] = (int(run_id), None if _missing(shape) else int(shape))
    indices: dict[str, int | None] = {}
    late = []
    for text in sorted(newest, key=lambda t: -newest[t][0]):  # the newest run's shapes first
        index = newest[text][1]
        if index is not None and index in indices.values():
            late.append(text)
        else:
            indices[text] = index
    following = max((i for i in indices.values() if i is not None), default=-1) + 1
    indices.update({text: following + k for k, text in enumerate(late)})
    return sorted(((i, t) for t, i in indices.items()), key=lambda pair: -1 if pair[0] is None else pair[0])


def _run(store, target: str | None, run_id: int | None):
    """The run a re-read starts from: run `run_id`, or `target`'s latest; and the runs of its target: of its
    source (fingerprint) and its file (another copy of the same source is another target)."""
    runs = store.runs()
    if run_id is not None:
        chosen = runs[runs["id"] == int(run_id)]
        if chosen.empty:
            raise NsprofError(f"results store {store.path} has no run {run_id} (nsprof results lists them)")
    else:
        chosen = runs[[_same_place(run, str(target)) for run in runs.itertuples()]]
        if chosen.empty:  # a project moved since: its runs recorded the old place; the same text and source
            chosen = runs[[_moved(run, str(target)) for run in runs.itertuples()]]
        if chosen.empty:
            raise NsprofError(
                f"results store {store.path} has no run of target {target} (nsprof results lists the runs)"
            )
    anchor = next(chosen.tail(1).itertuples())

    def mine(run) -> bool:
        return _text(run.fingerprint) == _text(anchor.fingerprint) and _same_place(
            run, _text(anchor.target), anchor
        )

    return anchor, runs[[mine(run) for run in runs.itertuples()]]


def _moved(run, target: str) -> bool:
    """Whether stored `run` may be of `target` moved since: the target's text the same and, where its file
    is here, its source's fingerprint."""
    from nsprof.space_source import target_fingerprint

    if not same_target(_text(run.target), target):
        return False
    try:
        return _text(run.fingerprint) == target_fingerprint(target)
    except (NsprofError, OSError):  # its file is not here: the text alone
        return True


def _same_place(run, target: str, anchor=None) -> bool:
    """Whether stored `run` is of `target`: by the target file each recorded, resolved, where both did (of
    `anchor`'s record, or of `target` resolved from here, where its file is); else by the target's text
    (same_target)."""
    other = _record(run).get(TARGET_PLACE)
    place = _record(anchor).get(TARGET_PLACE) if anchor is not None else target_place(target)
    if other and place:
        return other == place
    return same_target(_text(run.target), target)


def _this_tune(runs, anchor, settings: TuneSettings):
    """`runs` (the target's) but those of a later tune than the anchor run's. A run records which call of tune
    stored it (TUNE_ID): the tune ends at the first later run another call stored (a resume that found nothing
    missing stores adaptive reps alone). Within one call, and for runs of an nsprof that recorded no call, by
    order: a tune makes its first passes (runs not of adaptive reps) in the order of the truths it ranks, one
    each, so after the anchor, the first one under a truth it does not rank (an explaining probe's), or under
    one not after the previous first pass of the anchor's call, is another tune's, and its rows and those
    after it are not this one's."""
    tune_id = _record(anchor).get(TUNE_ID)
    calls = {int(r.id): _record(r).get(TUNE_ID) for r in runs.itertuples()}
    # a later run stored by another call (for an anchor that recorded none: by any call that did)
    later = [i for i, call in calls.items() if i > int(anchor.id) and call != tune_id]
    runs = runs[runs["id"] < later[0]] if later else runs
    truths = [_of_truth(truth, settings) for truth in settings.ranked_truths]
    adaptive = adaptive_runs(runs)

    def truth_of(run) -> int | None:  # the index of the ranked truth whose first pass `run` is (-1: none)
        return None if int(run.id) in adaptive else next((i for i, of in enumerate(truths) if of(run)), -1)

    firsts = [(int(run.id), truth_of(run)) for run in runs.itertuples() if truth_of(run) is not None]
    anchor_id = int(anchor.id)
    last = next((t for i, t in reversed(firsts) if i <= anchor_id and calls[i] == tune_id), -1)
    for run_id, truth in firsts:
        if run_id > anchor_id:
            if truth == -1 or truth <= last:
                return runs[runs["id"] < run_id]
            last = truth
    return runs


def reread(store, *, target: str | None = None, run_id: int | None = None) -> TuneReport:
    """The TuneReport of a stored tune: of `target` (its latest run's settings and fingerprint) or of
    run `run_id`'s tune, ranked from `store` (an open nsprof.store.ResultStore) as tune ranks it:
    per shape, every truth's ranking the store holds and their comparison. An NsprofError in one
    line when the store holds no such run, nothing under its deploy truth, or nothing ranked under any
    truth (check_ranked: every config failed, as the tune that stopped there said)."""
    anchor, of_target = _run(store, target, run_id)
    settings = _settings(anchor, store)
    of_target = _this_tune(of_target, anchor, settings)
    orders = _key_orders(of_target, anchor)
    per_truth, lacking, configs = {}, [], []
    for truth in settings.ranked_truths:
        group = _group(of_target, truth, settings, anchor)
        try:
            points = _ranked_points(of_target, truth, settings, anchor)
        except ValueError as exc:
            raise store.edited(str(exc)) from None
        known, ranked = (
            ([], {}) if group is None else _rank_group(store, truth, settings, group, orders, points)
        )
        if ranked:
            per_truth[truth.name] = ranked
            configs = _merged(configs, known)
        else:
            lacking.append(truth.name)
    deploy = settings.deploy_truth.name
    if deploy not in per_truth:
        raise NsprofError(
            f"results store {store.path} holds no measurement of {_text(anchor.target)} under {deploy} by the "
            f"tune of run {anchor.id} ({_text(anchor.status)}); `nsprof results` lists the runs"
        )
    rankings = {
        shape: {name: ranked[shape][1] for name, ranked in per_truth.items() if shape in ranked}
        for shape in per_truth[deploy]
    }
    whole = not lacking and all(len(truths) == len(per_truth) for truths in rankings.values())
    crosses = (
        cross_truth(_text(anchor.target), None, rankings, settings, None)
        if whole and len(per_truth) > 1
        else {}
    )
    shapes = []
    for shape, truths in rankings.items():
        lines = [f"{name}: the store holds nothing under this truth" for name in lacking]
        ranking = replace(truths[deploy], notes=[*truths[deploy].notes, *lines])
        cross = crosses.get(shape)
        shown = {**truths, deploy: ranking} if cross is not None else {deploy: ranking}
        shapes.append(ShapeReport(shown, deploy, shape, per_truth[deploy][shape][0], cross))
    # the settings as the tune recorded them (--budget-s, --prescreen...), the defaults for what it did not
    ranked_with = json.loads(json.dumps(settings.record(), default=str))
    record = {**ranked_with, **{k: v for k, v in _record(anchor).items() if k in ranked_with}}
    report = TuneReport(_text(anchor.target), configs, shapes, record)
    try:
        check_ranked(report)
    except NsprofError as exc:
        raise NsprofError(f"results store {store.path}, {report.target}: {exc}") from None
    return report


def _merged(configs: list, more: list) -> list:
    """Two truths' stored configs as one list: where one holds no JSON of a config, the other's."""
    longer, shorter = (configs, more) if len(configs) >= len(more) else (more, configs)
    return [c if c is not None or i >= len(shorter) else shorter[i] for i, c in enumerate(longer)]
