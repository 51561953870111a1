"""The one measuring seam: a Backend measures a Request (points of a target) and returns tidy rows.

    from nsprof.measure import GroundTruth, Request
    measured = GroundTruth(ProfileSettings(backend="ncu")).measure(Request(target, (0, 1, 2), n_configs=3))
    measured.frame, measured.failures, measured.device

This module holds Request, the Backend interface (one `measure(request)`), and its two kinds.

Two kinds implement it: GroundTruth (a driver under nsprof.session: ncu, nsys, or any other
registered in nsprof.drivers.registry) and FastTimers (nsprof's in-process timers, and the
tuners' own, in the bare worker). nsprof.profile, nsprof.validate and nsprof.tune are
orchestration over Backends.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from nsprof.errors import NsprofError
from nsprof.session import Measured
from nsprof.settings import NO_PROFILER, ProfileSettings

Progress = Callable[[str, int, str], None]  # (event: done | fail | retry, config_id, detail)
OnRows = Callable[[object], None]  # a tidy frame of configs that became final


@dataclass(frozen=True)
class Request:
    """What one measurement is asked to measure: `ids`, point ids of `target` (nsprof.schema.Points:
    config ids for a target without shapes) of a Space of `n_configs` configs at `n_shapes` shapes.

    expect: what the caller read of the target (nsprof.space.Space.as_read), which the worker checks
    before it measures (nsprof.worker.protocol.Job.expect; nsprof.errors.TargetChanged where it
    differs). plan: adaptive reps (nsprof.analysis.adaptive.Plan: its rounds over `ids`, each
    point's reps numbered from plan.first_rep) instead of a first pass; a ground truth's only.
    compiles: where the target's compile step runs (nsprof.space.Space.compiles; "": it has none):
    beside each session, or in its worker (nsprof.session.run_session). ahead: see run_session."""

    target: str
    ids: tuple[int, ...]
    n_configs: int
    n_shapes: int = 0
    expect: dict | None = field(default=None, compare=False)
    plan: object | None = None
    compiles: str = ""
    device: int = 0
    # a ground truth's worker started ahead for this session (nsprof.session.ahead.Ahead), or None
    ahead: object | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(int(i) for i in self.ids))

    @property
    def points(self):
        from nsprof.schema import Points

        return Points(self.n_configs, self.n_shapes)


class Backend(ABC):
    """Measures a Request on one device."""

    name: str = ""

    @abstractmethod
    def measure(
        self, request: Request, *, on_progress: Progress | None = None, on_rows: OnRows | None = None
    ) -> Measured:
        """Measure `request`.

        on_progress(event, point id, detail) follows the points; on_rows(frame) gets the rows of
        points as they become final, and on Ctrl-C or SIGTERM what was finished, before the
        KeyboardInterrupt goes on (see nsprof.session.run_session)."""

    def failure_frame(self, failures: dict[int, str], points=None):
        """Rows for configs that failed before this backend ran them (a compile step), labelled
        as its own rows are; keyed by point id (`points`, nsprof.schema.Points) for a target with shapes."""
        from nsprof.schema import failure_frame

        return failure_frame(failures, points, source=self.name, **self.labels)

    @property
    def labels(self) -> dict[str, str]:
        """The conditions this backend's rows are labelled with."""
        return {}

    def in_subfolder(self, name: str) -> Backend:
        """The same backend with its reports and logs in `name` under its work folder (one of
        several sessions of one run: nsprof.cluster's batches); itself copied when it has none."""
        import copy

        other = copy.copy(self)
        settings = getattr(self, "settings", None)
        if isinstance(settings, ProfileSettings) and settings.work_dir is not None:
            other.settings = replace(settings, work_dir=Path(settings.work_dir) / name)
        return other


def _one_gpu(device: int) -> None:
    if device != 0:
        raise NsprofError(f"measuring on GPU {device}: only GPU 0 is supported so far")


class GroundTruth(Backend):
    """A driver (ncu, nsys, ...) in a supervised worker session, under `settings` as given."""

    def __init__(self, settings: ProfileSettings) -> None:
        from nsprof.drivers import registry

        self.settings = settings
        self.name = settings.backend
        self.driver = registry.get_driver(settings.backend)  # a missing tool: one line, before any work

    @property
    def labels(self) -> dict[str, str]:
        return self.driver.labels(self.settings)

    def tool_version(self) -> str:
        return self.driver.tool_version()

    def measure(
        self, request: Request, *, on_progress: Progress | None = None, on_rows: OnRows | None = None
    ) -> Measured:
        """A first pass over request.ids in one supervised session (restarted past a crash), or with
        request.plan the adaptive reps: plan.rounds rounds over the ids in one session, one visit
        per point and round in the order given (A B C A B C ...), point p's reps numbered from
        plan.first_rep[p] (nsprof.worker.program's interleaved job). --timeout bounds each visit.
        An interleaved session is one worker run: a crash ends it (its points are failures, nothing
        restarts), and only whole sessions hand rows over."""
        from nsprof.session import run_session

        _one_gpu(request.device)
        settings, extra = self.settings, {"expect": request.expect} if request.expect else {}
        if request.plan is not None:
            settings = replace(settings, reps=request.plan.rounds, max_restarts=0)
            first_rep = {str(c): int(r) for c, r in request.plan.first_rep.items()}
            extra.update(interleave=True, first_rep=first_rep)
        return run_session(
            request.target,
            request.n_configs,
            settings,
            config_ids=list(request.ids),
            on_progress=on_progress,
            on_rows=on_rows,
            driver=self.driver,
            n_shapes=request.n_shapes,
            job_extra=extra or None,
            compiles=request.compiles,
            ahead=request.ahead,
        )


def _point(points, row: dict) -> int:
    """The point id of a timer's result line."""
    return points.id(row["config_id"], row.get("shape"))


def _written(results: Path) -> list[dict]:
    """The timer worker's result rows so far."""
    # whole lines only: the worker may be writing the next one
    text = results.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


class FastTimers(Backend):
    """Fast timer methods (nsprof.timers.specs names) in one bare worker: one row per config and
    method, the method's `stat` over `timer_reps` samples as rep 0.

    `settings` gives the timeout, the GPU wait and the work folder (`work_dir`, which must be
    set: the worker writes its rows there); its backend and reps are the bare worker's own.
    A config whose worker died is a row with source `failure_source`.
    """

    def __init__(
        self,
        methods: list[str],
        settings: ProfileSettings,
        work_dir: Path,
        *,
        timer_reps: int = 100,
        stat: str = "median",
        labels: dict[str, str] | None = None,
        failure_source: str = "timers",
    ) -> None:
        self.methods = list(methods)
        self.name = "+".join(self.methods)
        from nsprof.timers.specs import INTERLEAVED

        self.interleave = any(m in INTERLEAVED for m in self.methods)
        if self.interleave and not all(m in INTERLEAVED for m in self.methods):
            raise NsprofError("interleaved and plain timers run in separate workers: give one kind")
        from nsprof.drivers import registry

        self.settings = replace(
            settings, backend=NO_PROFILER, modes=("direct",), reps=1, warmup=3, work_dir=Path(work_dir)
        )
        self.driver = registry.get_driver(NO_PROFILER)  # carried with the backend, to a Dask worker too
        self.timer_reps = timer_reps
        self.value = "median_ns" if stat == "median" else "min_ns"
        self._labels = dict(labels or {})
        self.failure_source = failure_source

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    def frame(self, rows: list[dict], failures: dict[int, str], points=None):
        """The worker's result rows (and the configs it died on: point ids, `points`) as tidy rows."""
        from nsprof.schema import Failure, Points, make_frame

        points = points or Points(0)
        labels = self._labels
        out = []
        for row in rows:
            where = {"config_id": row["config_id"], "shape": row.get("shape")}
            if row.get("error"):  # the method raised (the worker's result line says so)
                out.append(
                    {**where, **Failure(row["error"], "crash").columns(), "source": row["method"], **labels}
                )
                continue
            # an interleaved method's line: one row per kept round (its value, the clock as it ended)
            clock_mhz = (row.get("conditions") or {}).get("sm_clock_mhz_after")
            values = row.get("rounds_ns", [row.get(self.value)])
            clocks = row.get("rounds_clock_mhz", [clock_mhz])
            out += [
                {
                    **where,
                    "rep": rep,
                    "kernel": row["method"],
                    "source": row["method"],
                    "duration_ns": value,
                    "clock_hz": None if clock is None else clock * 1e6,
                    **labels,
                }
                for rep, (value, clock) in enumerate(zip(values, clocks))
            ]
        have = {(r["config_id"], r["shape"]) for r in out}
        for point, reason in failures.items():
            if points.split(point) not in have:  # a config whose every method failed has its rows already
                out.append(
                    {
                        **points.rows(point),
                        **Failure.of(reason).columns(),
                        "source": self.failure_source,
                        **labels,
                    }
                )
        return make_frame(out)

    def measure(
        self, request: Request, *, on_progress: Progress | None = None, on_rows: OnRows | None = None
    ) -> Measured:
        from nsprof.host.owned import own_folder
        from nsprof.session import run_session
        from nsprof.session.folders import claim_base, numbered
        from nsprof.timers.interleave import throttle_counts, throttle_note

        if request.plan is not None:
            raise NsprofError("adaptive reps are a ground truth's: a fast timer gives one number per config")
        _one_gpu(request.device)
        points, work_dir = request.points, own_folder(self.settings.work_dir, "--work-dir")
        # timers.jsonl, or timers1.jsonl ... where an earlier run in a reused work folder left one (kept)
        results = claim_base(work_dir, numbered("timers", bare_first=True), ".jsonl").with_suffix(".jsonl")

        handed: set[int] = set()  # the points whose rows on_rows has had

        def progress(event: str, point: int, detail: str) -> None:
            # The worker wrote a config's rows before its "done" line: hand them over now, so that a
            # SIGKILLed nsprof has stored every config its worker finished (but the one in flight).
            if event == "done" and on_rows is not None and point not in handed:
                handed.add(point)
                rows = [row for row in _written(results) if _point(points, row) == point]
                if rows:
                    on_rows(self.frame(rows, {}))
            if on_progress is not None:
                on_progress(event, point, detail)

        try:
            session = run_session(
                request.target,
                request.n_configs,
                self.settings,
                config_ids=list(request.ids),
                on_progress=progress,
                n_shapes=request.n_shapes,
                job_extra=self._job(request, results),
                compiles=request.compiles,
                driver=self.driver,
            )
        except KeyboardInterrupt:
            if on_rows is not None:
                left = [row for row in _written(results) if _point(points, row) not in handed]
                on_rows(self.frame(self._whole(left, handed, points), {}))
            raise
        written = self._whole(_written(results), session.failures, points)
        counts = throttle_counts(written) if self.interleave else []
        throttle = [throttle_note(m, counts) for m in self.methods] if self.interleave else []
        return Measured(
            frame=self.frame(written, session.failures, points),
            failures=session.failures,
            notes=[*session.notes, *throttle],  # the session's own (how it ran), then the throttle checks
            throttle_counts=counts,
            device=session.device,
            work_dir=work_dir,
            wall_s=session.wall_s,
            phases=session.phases,
            config_phases=session.config_phases,
        )

    def _whole(self, rows: list[dict], failed, points) -> list[dict]:
        """The rows of points with a line of every method, and not failed, and every method's failure: a
        config its worker died or was stopped in, part-way through its methods, is no measurement."""
        methods: dict[int, set] = {}
        for row in rows:
            methods.setdefault(_point(points, row), set()).add(row.get("method"))
        done = {p for p, seen in methods.items() if seen >= set(self.methods) and p not in failed}
        return [row for row in rows if row.get("error") or _point(points, row) in done]

    def _job(self, request: Request, results: Path) -> dict:
        """The worker's job: time every config with the methods, writing rows to `results`."""
        return {
            "task": "timers",
            "timers": self.methods,
            "timer_reps": self.timer_reps,
            "interleave": self.interleave,
            "results": str(results),
            **({"expect": request.expect} if request.expect else {}),
        }
