"""`nsprof profile`: compile every config of a target, measure them with one Backend
(nsprof.measure), and summarise them per config and mode.

    from nsprof.settings import ProfileSettings
    from nsprof.profile import config_summary, profile_result

    result = profile_result("examples/gemm_tilelang.py:space", ProfileSettings(backend="nsys"))
    config_summary(result.frame, result.configs)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nsprof.host.redirect import output_to
from nsprof.measure import Backend, GroundTruth, Measured, Request
from nsprof.settings import ProfileSettings
from nsprof.space import config_label


def check_config_ids(config_ids, n_configs: int) -> list[int]:
    """The ids as a list, or an NsprofError naming the first that is not a config of the space."""
    from nsprof.errors import NsprofError

    ids = list(config_ids)
    if not ids:
        raise NsprofError("no config ids given")
    for config_id in ids:
        if not isinstance(config_id, int) or not 0 <= config_id < n_configs:
            raise NsprofError(f"config id {config_id!r} is not in the space (0 to {n_configs - 1})")
    return ids


def check_measured(frame) -> None:
    """An NsprofError, in one line, when no row of `frame` is a measurement (every config failed)."""
    from nsprof.errors import NsprofError
    from nsprof.reports.checks import one_line

    if (frame["error"].isna() & frame["duration_ns"].notna()).any():
        return
    failed = frame[frame["error"].notna() & frame["config_id"].notna()].sort_values(
        "config_id", kind="stable"
    )
    first = (
        f" (config {int(failed.iloc[0]['config_id'])}: {one_line(str(failed.iloc[0]['error']), 200)})"
        if len(failed)
        else ""
    )
    raise NsprofError(f"no config was measured: all {failed['config_id'].nunique()} failed{first}")


def precompile(
    space, jobs: int | None = None, log: str | None = None, config_ids: list[int] | None = None
) -> dict[int, str]:
    """Run the space's compile step for every config in parallel; {config_id: error} for failures.
    For a space with shapes the ids are point ids (Space.points: every (shape, config) by default).

    The compilers' own output goes to `log` (default: a temporary file, removed when every
    config compiled), not the terminal.
    """
    from nsprof.worker.compile import compile_each

    if space.compile is None:
        return {}
    jobs = jobs or min(8, os.cpu_count() or 1)
    temporary_log = log is None
    if log is None:
        handle, log = tempfile.mkstemp(prefix="nsprof-compile-", suffix=".log")
        os.close(handle)

    points = space.points
    ids = points.all() if config_ids is None else config_ids
    reasons: dict[int, str | None] = {}
    with output_to(log):
        compile_each(space, points, ids, jobs, reasons.__setitem__)
    failures = {cfg: reasons[cfg] for cfg in ids if reasons.get(cfg)}  # in the order asked for
    if temporary_log and not failures:
        os.remove(log)  # nothing to look into; the output of failed compiles stays
    return failures


class CompileAhead:
    """The space's compile step as a process beside the session (nsprof.worker.compile), started
    with it: the compilers run while the profiler, the worker, torch and CUDA start up, and with a
    cold cache while the first configs are measured. The worker waits for each config's marker
    before building it, outside every range; its compile failures are that session's failed
    configs. Its output goes to a log in its folder, kept (and named) only when a config failed
    to compile or the step itself did.

        ahead = CompileAhead.start(target, space, points)
        try:
            backend.measure(replace(request, compiled=str(ahead.folder)))
        finally:
            ahead.finish()
    """

    def __init__(self, folder: Path, proc, log: Path) -> None:
        self.folder, self.proc, self.log = folder, proc, log
        self.began = time.monotonic()
        self.seconds: float | None = None  # how long the step ran (None while it runs)
        self.kept = False  # finish() kept the folder: a config failed to compile, or the step did
        self._watcher = None  # the watch thread (_watch())
        self._stopping = False  # finish() stops the step: its death is no news for the worker

    @classmethod
    def start(
        cls, target: str, space, points: list[int], jobs: int | None = None, python: str | None = None
    ) -> CompileAhead:
        import json
        import subprocess
        import sys

        from nsprof.host.children import dies_with_nsprof

        folder = Path(tempfile.mkdtemp(prefix="nsprof-compile-"))
        layout = space.points
        job = folder / "job.json"
        job.write_text(
            json.dumps(
                {
                    "target": target,
                    "points": list(points),
                    "n_configs": layout.n_configs,
                    "n_shapes": layout.n_shapes,
                    "folder": str(folder),
                    "jobs": jobs or min(8, os.cpu_count() or 1),
                }
            )
        )
        log = folder / "compile.log"
        with open(log, "wb") as handle:
            proc = subprocess.Popen(
                [python or sys.executable, "-m", "nsprof.worker.compile", str(job)],
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=dies_with_nsprof(),
            )
        ahead = cls(folder, proc, log)
        ahead._watch()
        return ahead

    def _say_died(self, code: int) -> None:
        """Tell the worker, in `end`, that the step died: it stops waiting for what it will never compile."""
        from nsprof.worker.compile import END, write_marker

        if not (self.folder / END).exists():
            write_marker(self.folder / END, f"the compile step exited with status {code} (log: {self.log})")

    def finish(self) -> None:
        """Stop the step if it still runs (the session ended before it: nothing more is needed),
        with its compilers' own children (nvcc, ptxas: its process group), then remove its folder
        unless a config failed to compile or the step itself failed."""
        import shutil
        import signal

        # Not proc.poll(): while the watch thread waits it holds Popen's wait lock, and poll says
        # None even for a step that has exited. returncode is set once the step was reaped.
        stopped = self.proc.returncode is None
        self._stopping = True  # the watch thread writes no `end` now: nothing waits for it
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # start_new_session: its group is its pid
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if self._watcher is not None:
            self._watcher.join()  # it is done with the folder before anything is removed
        if self.seconds is None:
            self.seconds = time.monotonic() - self.began
        code = self.proc.returncode
        failed = code != 0 and not (stopped and code == -signal.SIGKILL)
        if failed:
            self._say_died(code)
        if not failed and not any(self.folder.glob("*.fail")):
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            self.kept = True

    def _watch(self) -> None:
        """Say in `end` when the step died (a compiler that crashed the process, a kill): a thread of
        nsprof's own, run for the session's length."""
        import threading

        def wait() -> None:
            code = self.proc.wait()
            self.seconds = time.monotonic() - self.began
            if code != 0 and not self._stopping:
                self._say_died(code)

        self._watcher = threading.Thread(target=wait, daemon=True, name="nsprof-compile-watch")
        self._watcher.start()


@dataclass
class ProfileResult(Measured):
    """What profile_result measured (frame, failures with the compile failures, device, reports,
    work_dir, wall_s: see nsprof.measure.Measured), and under what: everything about the rows
    that a CSV of them would not keep."""

    target: str = ""
    backend: str = ""
    configs: list = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # the conditions every row is labelled with
    # The compile step before the session (its wall_s and phases do not hold it): 0.0 when the
    # space has no compile step or the backend compiles itself.
    precompile_s: float = 0.0


def profile_result(
    target: str,
    settings: ProfileSettings | None = None,
    *,
    config_ids: list[int] | None = None,
    on_progress: Callable[[str, int, str], None] | None = None,
    jobs: int | None = None,
    on_rows: Callable[[object], None] | None = None,
    backend: Backend | None = None,
    space=None,
    points: list[int] | None = None,
    expect: dict | None = None,
) -> ProfileResult:
    """Compile, then measure every config (or `config_ids`) of `target` with `backend` (default:
    the ground truth settings.backend names).

    A target with shapes (Space.shapes) is measured at every shape in the one session: `points`
    names (shape, config) pairs by point id (Space.points; default `config_ids` at every shape), and
    the result's failures and the progress ids are point ids too; every row has its `shape`.

    on_rows(frame) gets the rows of configs as they become final (see run_session): first the
    configs that failed to compile, then each worker run's whole configs and failures. On
    Ctrl-C it has had every whole config measured before the KeyboardInterrupt goes on.

    The worker measures the target only as it was read (`expect`, default `space.as_read()`: the space
    given or loaded here); one edited since is refused (nsprof.errors.TargetChanged).
    """
    import pandas as pd

    from nsprof.space import load_target

    settings = settings or ProfileSettings()
    backend = backend or GroundTruth(settings)
    space = space or load_target(target)
    expect = expect or space.as_read()
    n_configs = len(space.configs)
    wanted, layout = _wanted_points(space, n_configs, config_ids, points)
    began = time.monotonic()
    ahead, compile_failures, compile_here = _compile_before(target, space, backend, settings, wanted, jobs)
    precompile_s = time.monotonic() - began
    compile_frame = _compile_failed(backend, compile_failures, layout, on_progress, on_rows)
    to_run = [c for c in wanted if c not in compile_failures]
    frames = []
    measured = None
    if to_run:
        try:
            request = _request(target, to_run, n_configs, layout, expect, ahead, compile_here)
            measured = backend.measure(request, on_progress=on_progress, on_rows=on_rows)
        finally:
            if ahead is not None:
                ahead.finish()
        frames.append(measured.frame)
    if compile_frame is not None:
        frames.append(compile_frame)
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    kept_log = _compile_notes(ahead, measured, precompile_s)
    return _result(frame, target, space, backend, measured, compile_failures, kept_log, precompile_s)


def _result(
    frame, target: str, space, backend: Backend, measured, compile_failures: dict, kept_log, precompile_s
):
    """profile_result's ProfileResult: the session's `measured` (None: nothing ran) and the
    compile failures."""
    return ProfileResult(
        frame=frame,
        target=target,
        backend=backend.name,
        configs=space.configs,
        labels=backend.labels,
        failures={**(measured.failures if measured else {}), **compile_failures},
        reports=list(measured.reports) if measured else [],
        work_dir=measured.work_dir if measured else None,
        wall_s=measured.wall_s if measured else 0.0,
        device=measured.device if measured else None,
        notes=(list(measured.notes) if measured else []) + kept_log,
        phases=dict(measured.phases) if measured else {},
        config_phases=dict(measured.config_phases) if measured else {},
        precompile_s=precompile_s,
    )


def _wanted_points(space, n_configs: int, config_ids: list[int] | None, points: list[int] | None):
    """profile_result's ids to measure and the space's points: `points` as given, else
    `config_ids` (default: all) at every shape of a shaped space."""
    wanted = list(range(n_configs)) if config_ids is None else check_config_ids(config_ids, n_configs)
    layout = space.points
    if points is not None:
        for point in points:
            layout.split(point)  # a ValueError for an id that is no point of this space
        wanted = list(points)
    elif layout.shaped:
        wanted = layout.all(wanted)
    return wanted, layout


def _compile_before(target: str, space, backend: Backend, settings: ProfileSettings, wanted: list[int], jobs):
    """Compile what has to be compiled before the session: (the CompileAhead under way or None,
    the failures of a precompile, whether the served worker compiles)."""
    ahead = None
    compile_failures, compile_here = {}, False
    if space.compile is None or backend.compiles_itself:
        pass  # nothing to compile, or the configs are compiled where they are measured
    elif backend.served():  # the served worker compiles each config (and so does a standalone rest)
        compile_here = True
    elif backend.takes_compiled and settings.compile_ahead:
        ahead = CompileAhead.start(target, space, wanted, jobs, settings.python)
    else:
        compile_failures = precompile(space, jobs, config_ids=wanted)
    return ahead, compile_failures, compile_here


def _request(
    target: str, to_run: list[int], n_configs: int, layout, expect, ahead, compile_here: bool
) -> Request:
    """The session's Request for the ids `to_run`, compiled ahead into `ahead`'s folder if any."""
    return Request(
        target,
        to_run,
        n_configs,
        layout.n_shapes,
        expect=expect,
        compiled=str(ahead.folder) if ahead else "",
        compile_here=compile_here,
    )


def _compile_failed(backend: Backend, compile_failures: dict, layout, on_progress, on_rows):
    """Report the configs that failed to compile (progress, then their rows); their frame or None."""
    for cfg, reason in compile_failures.items():
        if on_progress:
            on_progress("fail", cfg, reason)
    compile_frame = None
    if compile_failures:
        compile_frame = backend.failure_frame(compile_failures, layout)
        if on_rows:
            on_rows(compile_frame)
    return compile_frame


def _compile_notes(ahead, measured, precompile_s: float) -> list[str]:
    """Say where the compilers' output is kept (on stderr, and returned as notes), and add the
    compile times to the session's phases file."""
    kept_log = [f"the compilers' output is kept in {ahead.log}"] if ahead is not None and ahead.kept else []
    for note in kept_log:  # as the session says which path measured: at once, on stderr
        print(f"nsprof: {note}", file=sys.stderr, flush=True)
    if measured is not None and measured.work_dir is not None:
        from nsprof.session import add_to_phases_file

        add_to_phases_file(
            measured.work_dir,
            precompile_s=precompile_s,
            **({"compile_ahead_s": ahead.seconds} if ahead else {}),
        )
    return kept_log


def config_summary(frame, configs: list | None = None):
    """One row per config × mode: per-rep durations summed over the rep's kernels, then
    median, min, max, spread ((max-min)/median), the median's interval (ci_low_ns, ci_high_ns
    and its achieved coverage ci_coverage: nsprof.analysis.confidence), reps, kernels per rep,
    cycles, clock. Rows of a target with shapes (a `shape` set) are one per shape × config × mode,
    with a `shape` column first; never pooled over shapes."""
    import pandas as pd

    shaped = "shape" in frame and frame["shape"].notna().any()
    keys = ["shape", "config_id"] if shaped else ["config_id"]
    per_rep = _per_rep(frame[frame["error"].isna() & frame["config_id"].notna()], keys)
    rows = []
    for key, group in per_rep.groupby(level=[*keys, "mode"], sort=True):
        *where, mode = key
        rows.append({**{k: int(v) for k, v in zip(keys, where)}, "mode": mode, **_rep_stats(group)})
    for rec in frame[frame["error"].notna()].itertuples():
        where = {"config_id": int(rec.config_id)}
        if shaped:
            where["shape"] = None if pd.isna(rec.shape) else int(rec.shape)
        rows.append({**where, "mode": None, "reps": 0, "kernels": 0, **_NO_STATS, "error": rec.error})
    summary = pd.DataFrame(rows, columns=[*keys, "mode", "reps", "kernels", *_NO_STATS, "error"])
    if configs is not None:
        summary.insert(len(keys), "config", [config_label(configs[c]) for c in summary["config_id"]])
    return summary.sort_values([*keys, "mode"], na_position="last").reset_index(drop=True)


# config_summary's numbers of a config that failed, in its column order.
_NO_STATS = dict.fromkeys(
    (
        "median_ns",
        "min_ns",
        "max_ns",
        "spread",
        "median_cycles",
        "median_clock_hz",
        "ci_low_ns",
        "ci_high_ns",
        "ci_coverage",
    ),
    float("nan"),
)


def _per_rep(measured, keys: list[str]):
    """The measured rows' totals per (keys, mode, rep): duration and cycles summed over the
    rep's kernels, the median clock, and the kernel count."""
    grouped = measured.groupby([*keys, "mode", "rep"], sort=True)
    per_rep = grouped.agg(clock_hz=("clock_hz", "median"), kernels=("duration_ns", "size"))
    # min_count=1: a rep without cycles (nsys) stays NaN instead of summing to 0
    per_rep["duration_ns"] = grouped["duration_ns"].sum(min_count=1)
    per_rep["cycles"] = grouped["cycles"].sum(min_count=1)
    return per_rep


def _rep_stats(group) -> dict:
    """config_summary's columns from reps to error for one config × mode's per-rep totals."""
    from nsprof.analysis.confidence import median_interval

    median = float(group["duration_ns"].median())
    interval = median_interval(group["duration_ns"].to_numpy())
    return {
        "reps": len(group),
        "kernels": int(group["kernels"].median()),
        "median_ns": median,
        "min_ns": float(group["duration_ns"].min()),
        "max_ns": float(group["duration_ns"].max()),
        "spread": float((group["duration_ns"].max() - group["duration_ns"].min()) / median)
        if median
        else float("nan"),
        "median_cycles": float(group["cycles"].median()),
        "median_clock_hz": float(group["clock_hz"].median()),
        "ci_low_ns": interval.low,
        "ci_high_ns": interval.high,
        "ci_coverage": interval.coverage,
        "error": None,
    }
