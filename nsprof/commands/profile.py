"""`nsprof profile`: measure every config of a target under one ground truth (`profile`), then
print the tidy rows or the per-config summary (`show`)."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import click

from nsprof.commands.common import (
    StageBars,
    cluster_settings,
    clusters,
    on_target,
    refuse_clobbering,
    target_source,
    write_exports,
)
from nsprof.errors import NsprofError, OptionError, TargetChanged, printable
from nsprof.host.redirect import results_only_on_stdout


def warn(settings) -> None:
    """The choices whose rows measure something else than kernel durations, said on stderr."""
    if settings.backend == "ncu" and settings.clock_control == "none":
        click.echo(
            "nsprof: warning: --clock-control none: on the H200 µs kernels measured 35-80x too long "
            "this way; rows are labelled clock_control=none",
            err=True,
        )
    if settings.backend == "ncu" and settings.graph_profiling == "graph":
        click.echo(
            "nsprof: warning: --graph-profiling graph gives whole-graph workloads, not kernel durations",
            err=True,
        )


def profile(target: str, settings, ids, *, as_json, csv_path, devices, scheduler, verbose):
    """Measure TARGET's configs (`ids`, or all) with ProfileSettings `settings`: the ProfileResult
    and the failures as (config id, shape or None, reason). Interrupted (Ctrl-C, SIGTERM, SIGHUP), the
    configs it finished are shown and written as a whole run's would be, then the interrupt goes on."""
    warn(settings)
    if as_json and csv_path == "-":
        raise OptionError("--json and --csv - both write to standard output: choose one")
    refuse_clobbering({"--csv": csv_path}, [("the target's source", target_source(target))])

    interrupted: list = []  # (ProfileResult of the finished configs, failures), once interrupted
    try:
        return _measured(target, settings, ids, devices, scheduler, verbose, interrupted)
    except KeyboardInterrupt:
        if interrupted:
            _show_interrupted(target, settings, *interrupted[0], as_json=as_json, csv_path=csv_path)
        raise


def _measured(target: str, settings, ids, devices, scheduler, verbose, interrupted: list):
    """profile's measurement; on an interrupt, what it finished put in `interrupted` first."""
    from nsprof.cluster import sharded
    from nsprof.measure import GroundTruth
    from nsprof.profile import config_ids_of, profile_result

    with clusters(), StageBars(width=0) as bars:
        cluster = cluster_settings(devices, scheduler, verbose)  # its options: one line before any work

        def run(space):
            truth = GroundTruth(settings)  # a missing tool is one line before any work starts
            checked = ids
            if ids is not None:
                try:
                    checked = config_ids_of(space, ids)
                except TargetChanged:
                    raise  # a saved view behind the target: on_target reads it again
                except NsprofError as exc:
                    raise OptionError(str(exc), option="--configs") from None
            backend = sharded(truth, cluster)
            n = (len(checked) if checked is not None else len(space.configs)) * max(1, space.n_shapes)
            update, failures = bars(settings.backend, n), []

            def progress(event, config_id, detail):
                update(event, config_id, detail)
                if event == "fail":
                    failures.append((config_id, detail))

            finished, started = [], time.monotonic()
            try:
                with results_only_on_stdout():
                    result = profile_result(
                        target,
                        settings,
                        config_ids=checked,
                        on_progress=progress,
                        on_rows=finished.append,
                        backend=backend,
                        space=space,
                    )
            except KeyboardInterrupt:
                part = _finished(target, backend, space, finished, time.monotonic() - started)
                interrupted.append(
                    (part, [(*space.points.split(point), detail) for point, detail in failures])
                )
                raise
            # a point id for a target with shapes: (config id, shape)
            return result, [(*space.points.split(point), detail) for point, detail in failures]

        return on_target(target, run, settings.timeout_s)


def _finished(target: str, backend, space, frames: list, wall_s: float):
    """The ProfileResult of the configs an interrupted run finished (the rows on_rows got)."""
    import pandas as pd

    from nsprof.profile import ProfileResult
    from nsprof.schema import make_frame

    frame = pd.concat(frames, ignore_index=True) if frames else make_frame([])
    return ProfileResult(
        frame=frame,
        target=target,
        backend=backend.name,
        configs=space.configs,
        labels=backend.labels,
        wall_s=wall_s,
    )


def _show_interrupted(target: str, settings, result, failures, *, as_json, csv_path) -> None:
    """What an interrupted run finished, written and shown as a whole run's would be (the files first: the
    terminal a SIGHUP came from may be gone), and said to be a part; nothing written where nothing finished
    (an earlier run's --csv stays). An output that fails is said in one line: the interrupt goes on."""
    frame = result.frame
    done = frame[frame["error"].isna() & frame["config_id"].notna()]
    shaped = "shape" in done and done["shape"].notna().any()
    n = len(done.drop_duplicates(["config_id", "shape"] if shaped else ["config_id"]))
    try:
        if frame.empty:
            click.echo("nsprof: interrupted before any config finished: nothing to show or write", err=True)
            return
        write_exports(frame, csv_path, None)
        unit = "(shape, config) pairs" if shaped else "configs"
        what = f"the {n} {unit} measured before it" if n else f"no {unit} measured before it"
        failed = " and those that failed" if frame["error"].notna().any() else ""
        click.echo(f"nsprof: interrupted: {what}{failed} follow; the rest were not run", err=True)
        show(target, settings, result, failures, as_json=as_json, csv_path=None, whole=False)
    except NsprofError as exc:  # an output that cannot be written: said, and the interrupt goes on
        with contextlib.suppress(OSError):
            click.echo(f"nsprof: error: {exc}", err=True)
    except OSError:  # the terminal is gone (SIGHUP): the files are written
        pass


def show(target: str, settings, result, failures, *, as_json, csv_path, whole: bool = True) -> None:
    """The failures, the rows to --csv/--json or the per-config summary; an error when every config failed
    (`whole`: a run that ended, not an interrupted one's part)."""
    from nsprof.profile import check_measured
    from nsprof.render.json import write_rows

    for config_id, shape, detail in failures:
        where = "" if shape is None else f" at shape {shape}"
        click.echo(f"nsprof: config {config_id}{where} failed: {printable(detail)}", err=True)
    frame = result.frame
    try:
        write_exports(frame, csv_path, None)  # first: a standard output that fails loses none of it
    finally:  # and a file that cannot be written loses none of the table
        if as_json:
            write_rows(frame, sys.stdout)
        else:
            _print_table(target, settings, result, to_stderr=csv_path == "-", whole=whole)
    if whole:
        check_measured(frame)  # every config failed: the table says why, and the exit status too


def _print_table(target: str, settings, result, *, to_stderr: bool, whole: bool) -> None:
    from nsprof.profile import config_summary
    from nsprof.render.run_tables import format_config_summary

    labels = result.labels
    kept = "temporary reports removed (pass --work-dir to keep them)"
    if not whole:
        kept = "interrupted: the configs it finished"
    elif result.work_dir:  # and this run's own reports: a reused --work-dir holds earlier runs' too
        names = ", ".join(Path(report).name for report in result.reports)
        kept = f"reports kept in {result.work_dir}" + (f": {names}" if names else "")
    click.echo(
        f"{printable(target)}: {settings.backend}, clock control {labels['clock_control']}, cache control "
        f"{labels['cache_control']}, {result.wall_s:.1f} s wall; {kept}",
        err=to_stderr,
    )
    click.echo(format_config_summary(config_summary(result.frame, result.configs)), err=to_stderr)
