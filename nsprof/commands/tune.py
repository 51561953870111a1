"""`nsprof tune`: rank a target's configs under one or more truths (`tune`), then the table or
JSON, the plot and the page (`show`); `truth_list` reads --truth beside --backend."""

from __future__ import annotations

import contextlib
import time

import click

from nsprof.commands.common import (
    StageBars,
    check_plot,
    cluster_settings,
    clusters,
    each_written,
    on_target,
    one_on_stdout,
    refuse_clobbering,
    split,
    target_source,
    write_html,
    wrote,
)
from nsprof.errors import Interrupted, NsprofError, printable
from nsprof.host.redirect import results_only_on_stdout
from nsprof.truth import Truth


def truth_list(truths: str | None, backend: str | None) -> tuple[str, ...]:
    """--truth's names; --backend beside it only where it says the same (one truth, that backend)."""
    if truths is None:
        return ()
    names = split(truths)  # none empty, each once: the option's callback
    asked = [Truth.parse(name) for name in names]  # as parsed: ncu is ncu@base-cold
    if backend is not None and asked != [Truth.parse(backend)]:
        raise NsprofError(
            f"--backend {backend} and --truth {','.join(names)} contradict: --truth names every truth "
            "to rank; drop --backend"
        )
    return names


def tune(target: str, settings, ids, *, plot_path, html_path, as_json, devices, scheduler, verbose):
    """The TuneReport of TARGET's configs (`ids`, or all) under TuneSettings `settings`, after
    every check that needs no GPU."""
    from dataclasses import replace

    from nsprof.drivers.registry import get_driver
    from nsprof.host.children import process_began
    from nsprof.tune import tune as run_tune

    one_on_stdout(**{"--plot -": plot_path == "-", "--html -": html_path == "-", "--json": as_json})
    inputs = [("the target's source", target_source(target))]
    if settings.use_store:
        from nsprof.store import DEFAULT_PATH

        inputs.append(("the results store", settings.store or DEFAULT_PATH))
    refuse_clobbering({"--plot": plot_path, "--html": html_path}, inputs)
    check_plot(plot_path)  # one line before any work
    try:
        with clusters(), StageBars() as bars:
            settings = replace(settings, cluster=cluster_settings(devices, scheduler, verbose))

            started: dict = {}  # nsprof's start and the target's listing, up to the first run

            def run(space):
                # After the options and the target: a missing tool is one line. A resume may need no tool
                # (the store holding every config): measure_stored decides, before it measures anything.
                for truth in settings.ranked_truths:
                    if truth.profiler and not (settings.use_store and settings.resume):
                        get_driver(truth.backend)
                began = process_began()
                if began is not None:  # a run again on the target as it is (on_target) keeps the first's
                    started.setdefault("start", round(time.monotonic() - began, 3))
                with results_only_on_stdout():
                    report = run_tune(target, settings, config_ids=ids, on_stage=bars, space=space)
                return replace(report, steps={**started, **report.steps})

            return on_target(target, run, settings.timeout_s)
    except Interrupted as part:  # no results store holds what was ranked: it is shown
        _show_part(target, part.part, plot_path=plot_path, html_path=html_path, as_json=as_json)
        raise


def _show_part(target: str, report, **outputs) -> None:
    """The rankings of an interrupted tune without a results store, said to be a part; an output that
    fails is said in one line, and the interrupt goes on."""
    try:
        click.echo(
            "nsprof: interrupted: the rankings of what was measured before it follow (nothing fed back)",
            err=True,
        )
        show(target, report, **outputs, part=True)
    except NsprofError as exc:
        with contextlib.suppress(OSError):
            click.echo(f"nsprof: error: {exc}", err=True)
    except OSError:  # the terminal is gone (SIGHUP): the reports stay in the folder named
        pass


def show(target: str, report, *, plot_path, html_path, as_json, part: bool = False) -> int:
    """Print the report (an nsprof.analysis.tune_report.TuneReport; `part`: an interrupted run's, which
    its plot's title says); the exit status: 1 when some step failed."""
    from nsprof.render.json import tune_document
    from nsprof.render.tune_tables import format_tune

    try:  # the files first, each whichever fails: a standard output that fails loses none of them
        each_written(
            lambda: _write_plot(target, report, plot_path, part),
            lambda: _write_page(target, report, html_path),
        )
    finally:  # and a file that cannot be written loses nothing of the ranking
        if as_json:
            click.echo(tune_document(report))
        else:
            click.echo(format_tune(report), err=plot_path == "-" or html_path == "-")
    for error in report.errors:
        click.echo(f"nsprof: {printable(error)}", err=True)
    return 1 if report.errors else 0


def _write_plot(target: str, report, plot_path, part: bool) -> None:
    if plot_path:
        from nsprof.render.tune_plot import plot_tune

        first = report.shapes[0]
        at = f" at shape {first.shape} (of {len(report.shapes)}; --json has all)" if report.shaped else ""
        at += " (interrupted: a part)" if part else ""
        ranking = first.ranking
        plot_tune(
            ranking.table, plot_path, printable(f"{target}: ranked by {ranking.label}{at}"), report.configs
        )
        wrote(plot_path)


def _write_page(target: str, report, html_path) -> None:
    if html_path:
        from nsprof.render.html import tune_page

        write_html(html_path, lambda: tune_page(report, title=f"nsprof tune {target}"))
