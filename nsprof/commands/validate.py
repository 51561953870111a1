"""`nsprof validate`: fast timers against the ground truths over a target's configs (`validate`),
then the tables, the plot, the page and the JSON document (`show`)."""

from __future__ import annotations

from pathlib import Path

import click

from nsprof.commands.common import (
    StageBars,
    check_plot,
    cluster_settings,
    clusters,
    on_target,
    one_on_stdout,
    write_html,
    wrote,
)
from nsprof.errors import NsprofError, OptionError
from nsprof.host.redirect import results_only_on_stdout
from nsprof.validate import saved_about


def check(settings, *, plot_path, html_path, save_path, as_json) -> None:
    """What ValidateSettings cannot check itself: the timers' names, the outputs, the conditions."""
    from nsprof.timers.specs import expand
    from nsprof.validate import resolve_truths

    try:
        expand(list(settings.timers))
    except ValueError as exc:
        raise OptionError(str(exc), option="--timers") from None
    one_on_stdout(
        **{
            "--plot -": plot_path == "-",
            "--html -": html_path == "-",
            "--save -": save_path == "-",
            "--json": as_json,
        }
    )
    check_plot(plot_path)
    try:
        resolve_truths(settings)  # a condition a tool cannot take, --matched without ncu: one line
    except NsprofError as exc:
        raise OptionError(str(exc), option="--matched" if "--matched" in str(exc) else "--truth") from None


def validate(target: str, settings, *, devices, scheduler, verbose):
    """The ValidateResult of TARGET under `settings`, after every check that needs no GPU."""
    from dataclasses import replace

    from nsprof.drivers.registry import get_driver
    from nsprof.validate import validate as run_validate

    def run(space):
        for backend in dict.fromkeys(t.backend for t in settings.truths):
            get_driver(backend)  # a missing tool is one line, before any work
        with clusters(), StageBars() as bars:
            clustered = replace(settings, cluster=cluster_settings(devices, scheduler, verbose))
            with results_only_on_stdout():
                return run_validate(target, clustered, on_stage=bars, space=space)

    return on_target(target, run)


def show(target: str, result, *, plot_path, html_path, save_path=None, as_json=False) -> None:
    """Prints and draws a ValidateResult (from a run, or from validate --save's JSON)."""
    from nsprof.render.html import validate_page
    from nsprof.render.json import agreement_document
    from nsprof.render.plot import plot

    for (method, config_id), reason in sorted(result.failures.items(), key=str):
        click.echo(f"nsprof: {method} failed on config {config_id}: {reason}", err=True)
    if plot_path:
        plot(
            result.per_config, result.agreement, result.timers, result.truths, plot_path, floors=result.floors
        )
        wrote(plot_path)
    if html_path:
        write_html(html_path, lambda: validate_page(result, title=f"nsprof validate {target}"))
    document = agreement_document(
        result.agreement,
        result.per_config,
        result.floors,
        result.verdict,
        matched=result.matched,
        conditions=result.conditions,
        repeat=result.repeat,
        about=saved_about(target, result),
    )
    if save_path == "-":
        click.echo(document)
    elif save_path:
        Path(save_path).write_text(document + "\n")
        click.echo(f"wrote {save_path}", err=True)
    if as_json:
        click.echo(document)
    else:
        click.echo(_tables(result), err="-" in (plot_path, html_path, save_path))


def _tables(result) -> str:
    from nsprof.render.validate_tables import (
        format_agreement,
        format_conditions,
        format_floors,
        format_matched,
        format_per_config,
    )

    sections = [
        format_per_config(result.per_config, result.configs),
        format_agreement(result.agreement, result.floors),
        format_floors(result.floors),
        format_matched(result.matched),
        result.verdict,
        format_conditions(result.conditions),
    ]
    return "\n\n".join(section for section in sections if section)
