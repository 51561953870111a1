"""`nsprof tune`: rank every config of a target by ground truth (or a fast timer).

    report = tune("examples/gemm_tilelang.py:space", TuneSettings(backend="ncu", mode="graph"))
    report.ranking.best_config_id, report.ranking.table   # report.shapes: every shape's findings

Orchestration over nsprof.measure's Backends: ground truths (ncu, nsys, or any registered
driver) run through nsprof.profile (GroundTruth); fast timers (graph, cupti,
event and their variants) through FastTimers. One path for every target: a target without
shapes is one shape, and every step works per shape:

- the first pass measures every (shape, config) point in one session per truth, through the
  results store (resume per point), then ranks each shape on its own (rank_truth);
- adaptive reps measure every shape's contenders in the same interleaved sessions (nsprof.adaptive);
- `prescreen` ranks each shape with a fast timer first and sends each shape's best
  `prescreen_top` to the ground truth;
- several truths are compared at each shape, and a disagreement is explained by probes that
  measure every disagreeing shape's contenders together (cross_truth);
- the tuner's own pick and the feed-back, per shape (nsprof.feedback).

The package, by job: measure (a truth's rows, their key), stored (the results store), rankings (one
truth's rankings, adaptive reps), explain (the truths compared); here, tune() and the prescreen.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import replace

from nsprof import feedback
from nsprof.analysis.ranking import rank
from nsprof.analysis.tune_report import Ranking, ShapeReport, TuneReport
from nsprof.errors import Interrupted, NsprofError
from nsprof.settings import PRESCREEN_TOP, TuneSettings
from nsprof.space import config_label
from nsprof.tune.explain import cross_truth
from nsprof.tune.measure import retryable, shape_keys
from nsprof.tune.rankings import measure_first_pass, rank_truth, worker_ahead
from nsprof.tune.stored import by_shape

__all__ = [
    "Ranking",
    "ShapeReport",
    "TuneReport",
    "TuneSettings",
    "rank_truth",
    "retryable",
    "tune",
]


def tune(
    target: str,
    settings: TuneSettings | None = None,
    *,
    config_ids: list[int] | None = None,
    on_stage: Callable[[str, int], Callable[[str, int, str], None]] | None = None,
    space=None,
) -> TuneReport:
    """Rank every config under each truth of `settings` (rank_truth), at each shape of a target with
    shapes, compare the truths' winners when there are several (cross_truth), ask the target's
    tuner what it picks itself, and feed the deploy truth's ranking back to it. The report holds
    one ShapeReport per shape (one for a target without shapes): every truth's ranking there, the
    comparison, the prescreen, the tuner's pick. `space`: the target's Space where the caller has
    loaded it already."""
    from nsprof.profile import config_ids_of
    from nsprof.space import load_target

    settings = replace(settings or TuneSettings(), tune_id=secrets.token_hex(8))
    space = space or load_target(target)
    n = len(space.configs)
    wanted = list(range(n)) if config_ids is None else config_ids_of(space, config_ids)
    stage = on_stage or (lambda name, count: None)
    points = space.points.all(wanted)
    with (
        feedback.tuner_children(target, space, settings) as children,  # importing while tune measures
        contextlib.ExitStack() as held,
    ):
        firsts = _first_passes_ahead(target, settings, held)
        prescreened, crosses, steps = ({}, []), {}, {}
        if settings.prescreen:
            with timed(steps, "prescreen"):
                points, prescreened = _prescreen(target, space, settings, points, stage)
        per_truth = _per_truth(target, space, settings, points, stage, firsts, steps)
        keys = shape_keys(space)
        rankings = {shape: {truth: per_truth[truth][shape] for truth in per_truth} for shape in keys}
        try:
            if len(per_truth) > 1:
                with timed(steps, "compare"):
                    crosses = cross_truth(target, space, rankings, settings, stage)
            sent = by_shape(space, points)
            return _report(target, space, settings, rankings, crosses, prescreened, sent, children, steps)
        except KeyboardInterrupt:  # every truth ranked: without a store, shown as they are
            if settings.use_store:
                raise
            raise Interrupted(_partial(target, space, settings, per_truth, steps)) from None


def _per_truth(target: str, space, settings: TuneSettings, points, stage, firsts: dict, steps: dict) -> dict:
    """Every truth's rankings, {truth: {shape: Ranking}}, one truth after another (rank_truth). Without a
    store, an interrupt carries the TuneReport of those ranked before it and the part of the one it
    stopped (Interrupted)."""
    per_truth: dict = {}
    for truth in settings.ranked_truths:
        try:
            with timed(steps, truth.name):
                per_truth[truth.name] = rank_truth(
                    target,
                    space,
                    truth,
                    settings,
                    points,
                    stage(truth.name, len(points)),
                    stage=stage,
                    ahead=firsts.get(truth.name),
                )
        except Interrupted as part:  # without a store: the part of the truth it stopped
            per_truth[truth.name] = part.part
            raise Interrupted(_partial(target, space, settings, per_truth, steps)) from None
        except KeyboardInterrupt:  # before the truth measured anything: those ranked before it
            if settings.use_store or not per_truth:
                raise
            raise Interrupted(_partial(target, space, settings, per_truth, steps)) from None
    return per_truth


def _partial(target: str, space, settings: TuneSettings, per_truth: dict, steps: dict) -> TuneReport:
    """The TuneReport of the truths ranked (or part-ranked) before an interrupt ({truth: {shape: Ranking}}):
    no comparison, no pick, nothing fed back; the deploy truth's ranking where it has one."""
    deploy = settings.deploy_truth.name if settings.deploy_truth.name in per_truth else next(iter(per_truth))
    shapes = [
        ShapeReport({name: rankings[shape] for name, rankings in per_truth.items()}, deploy, shape, value)
        for shape, value in _shape_values(space)
    ]
    return TuneReport(target, *_plain(space, settings, shapes), [], steps)


def _plain(space, settings: TuneSettings, shapes: list) -> tuple:
    """A TuneReport's configs, shapes and settings, as JSON values (as a saved report gives them back)."""
    plain = json.loads(json.dumps({"configs": space.configs, "settings": settings.record()}, default=str))
    return plain["configs"], shapes, plain["settings"]


def _shape_values(space) -> list[tuple]:
    """(shape, its value as a JSON value; None for a target without shapes) for every shape."""
    return [
        (shape, None if shape is None else json.loads(json.dumps(space.shapes[shape], default=str)))
        for shape in shape_keys(space)
    ]


@contextlib.contextmanager
def timed(steps: dict, name: str):
    """Adds to `steps` ({name: wall seconds}, the report's) what the block took."""
    began = time.perf_counter()
    try:
        yield
    finally:
        steps[name] = round(steps.get(name, 0.0) + time.perf_counter() - began, 3)


def _first_passes_ahead(target: str, settings: TuneSettings, held: contextlib.ExitStack) -> dict:
    """A worker started now for each first pass that something else runs before ({truth name: Ahead}): every
    truth's but the first's, and the first's too after a prescreen; each closed with `held`."""
    truths = settings.ranked_truths if settings.prescreen else settings.ranked_truths[1:]
    firsts = {truth.name: worker_ahead(target, truth, settings, held) for truth in truths}
    return {name: ahead for name, ahead in firsts.items() if ahead is not None}


def _report(
    target: str,
    space,
    settings: TuneSettings,
    rankings: dict,
    crosses: dict,
    prescreened: tuple[dict, list[str]],
    sent,
    children,
    steps: dict,
):
    """The TuneReport of `rankings` ({shape: {truth: Ranking}}), after asking the target's tuner what
    it picks and feeding it the deploy truth's rankings: what those steps say goes into the deploy
    ranking's notes (after the ranking's own), what fails into the report's errors. `sent`: each
    shape's configs sent to ground truth ({shape: config ids}, for the prescreen's notes); `children`:
    the tuner calls' children, started ahead (feedback.tuner_children); `steps`: what each step took so
    far ({name: wall seconds}), the pick's and the feed-back's added."""
    deploy = settings.deploy_truth.name
    deployed = {shape: truths[deploy] for shape, truths in rankings.items()}
    added: dict = {shape: [] for shape in rankings}
    errors: list[str] = []
    # the pick before the feed-back: the tuner's own choice, not the one nsprof hands it
    with timed(steps, "pick"):
        picks = feedback.tuner_picks(target, space, deployed, settings, added, errors, children)
    with timed(steps, "feed_back"):
        feedback.feed_back(target, space, deployed, settings, added, errors, children)
    shapes = []
    for shape, value in _shape_values(space):
        truths = rankings[shape]
        added[shape] += _prescreen_notes(truths[deploy], prescreened, shape, sent.get(shape, []))
        ranking = replace(truths[deploy], notes=[*truths[deploy].notes, *added[shape]])
        found = (crosses.get(shape), prescreened[0].get(shape), picks.get(shape))
        shapes.append(ShapeReport({**truths, deploy: ranking}, deploy, shape, value, *found))
    return TuneReport(target, *_plain(space, settings, shapes), errors, steps)


def _prescreen(target: str, space, settings: TuneSettings, points: list[int], stage):
    """The fast timer settings.prescreen over `points`, ranked at each shape: the best
    settings.prescreen_top of each shape's measured configs go on to the ground truth.
    Returns those points, and each shape's ranked table ({shape: table}) with what the prescreen's
    measurement said (a resume's "resumed: ..."). Through the results store where the tune uses one, as a
    ground truth's first pass: each config kept as it is measured, and a resume measures none again; its
    run ranks nothing of the tune's (a re-read ranks the points the ground truth's runs record)."""
    from nsprof.adaptive import of_shape
    from nsprof.profile import config_summary

    progress, said = stage(settings.prescreen, len(points)), []
    unranked = replace(settings, ranks=False)
    rows, _ = measure_first_pass(target, space, settings.prescreen_truth, unranked, points, progress, said)
    tables, kept = {}, []
    for shape in shape_keys(space):
        table = rank(config_summary(of_shape(rows, shape)), settings.stat)
        table.insert(2, "config", [config_label(space.configs[int(c)]) for c in table["config_id"]])
        top = table[table["error"].isna()]["config_id"].head(settings.prescreen_top or PRESCREEN_TOP)
        kept += [space.points.id(int(c), shape) for c in top]
        tables[shape] = table
    if not kept:
        raise NsprofError(f"the prescreen timer {settings.prescreen} measured no config")
    return kept, (tables, [f"prescreen: {note}" for note in said])


def _prescreen_notes(
    ranking: Ranking, prescreened: tuple[dict, list[str]], shape, sent: list[int]
) -> list[str]:
    """What the prescreen said (`prescreened`: its tables by shape and its notes) and where the ground-truth
    winner stood in `shape`'s prescreen (`sent`: the configs it sent on)."""
    tables, said = prescreened
    best = ranking.best_config_id
    if tables.get(shape) is None or best is None:
        return []
    position = sent.index(best) + 1
    notes = [*said, f"the ground-truth winner was #{position} of the prescreen's top {len(sent)}"]
    if position == len(sent):
        notes.append(
            "it was the last one sent to ground truth: a better config may lie outside the "
            "prescreened set; raise --top"
        )
    return notes
