"""`nsprof validate`: fast timers against the ground truths over a target's configs (`validate`),
then the tables, the plot, the page and the JSON document (`show`)."""

from __future__ import annotations

import contextlib

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
    target_source,
    write_html,
    wrote,
)
from nsprof.errors import NsprofError, OptionError, printable
from nsprof.host.owned import written_over
from nsprof.host.redirect import results_only_on_stdout
from nsprof.validate_saved import saved_about


def check(target: str, settings, *, plot_path, html_path, save_path, as_json) -> None:
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
    outputs = {"--plot": plot_path, "--html": html_path, "--save": save_path}
    refuse_clobbering(outputs, [("the target's source", target_source(target))])
    check_plot(plot_path)
    try:
        resolve_truths(settings)  # a condition a tool cannot take, --matched without ncu: one line
    except NsprofError as exc:
        raise OptionError(str(exc), option="--matched" if "--matched" in str(exc) else "--truth") from None
    if settings.l2_check:  # its sessions run under ncu: missing, one line now, before any measuring
        from nsprof.drivers.registry import driver_class

        try:
            driver_class("ncu").find()
        except NsprofError as exc:
            raise OptionError(str(exc), option="--l2-check") from None


class NothingCompared(NsprofError):
    """A validate run that measured or compared nothing; its ValidateResults (`results`) are shown first."""

    def __init__(self, message: str, results=None) -> None:
        super().__init__(message)
        self.results = results


def validate(target: str, settings, *, devices, scheduler, verbose, outputs) -> None:
    """TARGET measured under `settings`, then shown (`show`). Its work folder, a temporary one unless
    --work-dir, is removed when the run ends (a run again on a changed target included), unless it measured
    or compared nothing, which keeps it and names it (its reports and the workers' logs say why) after the
    tables. Every check that needs no GPU comes first."""
    from dataclasses import replace

    from nsprof.drivers.registry import get_driver
    from nsprof.session.folders import work_folder
    from nsprof.validate import validate as run_validate

    def run(space):
        if not folder:  # made once the target is read, one for a run again on a changed target
            folder.append(stack.enter_context(work_folder(settings.work_dir, "nsprof-validate-")))
        for backend in dict.fromkeys(t.backend for t in settings.truths):
            get_driver(backend)  # a missing tool is one line, before any work
        with clusters(), StageBars() as bars:
            clustered = replace(
                settings, cluster=cluster_settings(devices, scheduler, verbose), work_dir=folder[0]
            )
            with results_only_on_stdout():
                return run_validate(target, clustered, on_stage=bars, space=space)

    folder: list = []
    try:
        with contextlib.ExitStack() as stack:
            results, failed = on_target(target, run, settings.timeout_s), None
            _check_measured(results)
    except NothingCompared as exc:  # the folder kept and named in it
        results, failed = exc.results, exc
    try:
        show(target, results, **outputs, failed=failed)
    except BaseException as exc:
        if failed is None or exc is failed:
            raise
        if isinstance(exc, OSError):  # standard output closed (| head): the run's failure is the exit
            raise failed from None
        click.echo(f"nsprof: {failed}", err=True)  # an output that failed, Ctrl-C: the run's failure too
        raise


def show(target: str, results, *, plot_path, html_path, save_path=None, as_json=False, failed=None) -> None:
    """Prints and draws the ValidateResults of a run or of validate --save's JSON, one per shape: every
    shape's tables and JSON, the plot and the page of the first shape."""
    from nsprof.render.html import validate_page
    from nsprof.render.plot import plot

    for result in results:
        at = "" if result.shape is None else f" at shape {result.shape}"
        for (method, config_id), reason in sorted(result.failures.items(), key=str):
            click.echo(f"nsprof: {method} failed on config {config_id}{at}: {printable(reason)}", err=True)
    first = results[0]
    title = f"nsprof validate {target}" + _first_of(results)
    document = _document(target, results)

    def draw() -> None:
        if plot_path:
            plot(
                first.per_config, first.agreement, first.timers, first.truths, plot_path, floors=first.floors
            )
            wrote(plot_path)

    def page() -> None:
        if html_path:
            write_html(html_path, lambda: validate_page(first, title=title))

    def save() -> None:
        if save_path and save_path != "-":
            with written_over(save_path) as out:
                out.write((document + "\n").encode("utf-8"))
            click.echo(f"wrote {save_path}", err=True)

    try:  # the files first: a standard output that fails loses none of them
        each_written(draw, page, save)
    finally:  # and a file that cannot be written loses nothing of the tables
        if save_path == "-" or as_json:
            click.echo(document)
        if not as_json:
            click.echo(
                "\n\n".join(_tables(r, len(results)) for r in results),
                err="-" in (plot_path, html_path, save_path),
            )
    if failed is not None:
        raise failed
    _check_measured(results)


def _document(target: str, results) -> str:
    """The JSON document of a run's ValidateResults (--json, --save), every shape's."""
    from nsprof.render.json import agreement_record, validate_document

    return validate_document(
        [
            agreement_record(
                r.agreement,
                r.per_config,
                r.floors,
                r.verdict,
                matched=r.matched,
                conditions=r.conditions,
                repeat=r.repeat,
                l2_check=r.l2_check,
                about=saved_about(target, r),
            )
            for r in results
        ]
    )


def _check_measured(results) -> None:
    """An NsprofError, in one line, when no timer and no truth measured any config at any shape, or when
    nothing was compared: no truth, or no fast timer, measured 2 of the configs (1 of a space of one) that
    the other measured, at any shape. The line gives the first failure of the side that measured too few."""
    from nsprof.reports.checks import nothing_measured

    if not any(r.per_config is not None and r.per_config["value_ns"].notna().any() for r in results):
        reasons: dict[int, str] = {}
        for result in results:
            for (_, config_id), reason in sorted(result.failures.items(), key=str):
                if isinstance(config_id, int):
                    reasons.setdefault(config_id, reason)
        raise NothingCompared(nothing_measured(dict(sorted(reasons.items()))), results)
    least = min(2, len(results[0].configs))
    if any(r.agreement is not None and (r.agreement["n"] >= least).any() for r in results):
        return
    if any(_truth_measured(r) >= least for r in results):
        what, truth_side = f"no fast timer measured {least} of the configs a truth measured", False
    else:
        what, truth_side = f"no ground truth measured {least} of the configs", True
    first = next(_failures(results, truth_side), None)
    raise NothingCompared(
        f"nothing compared: {what}" + (f" (first failure: {printable(first)})" if first else ""), results
    )


def _truth_measured(result) -> int:
    """The most configs one truth measured in `result`."""
    rows = result.per_config
    if rows is None:
        return 0
    measured = rows[rows["method"].isin(result.truths) & rows["value_ns"].notna()]
    return int(measured.groupby("method")["config_id"].nunique().max()) if len(measured) else 0


def _failures(results, truth_side: bool):
    """Each failure of the truths' sessions (`truth_side`) or of the fast timers', shape by shape, config
    by config: "METHOD on config N[ at shape S]: REASON"."""
    from nsprof.l2check import METHOD_PREFIX

    tools = {truth.split(":", 1)[0] for r in results for truth in r.truths}
    for r in results:
        at = "" if r.shape is None else f" at shape {r.shape}"
        keyed = sorted(r.failures.items(), key=lambda kv: (str(type(kv[0][1])), kv[0][1], kv[0][0]))
        for (method, config_id), reason in keyed:
            if method.startswith(METHOD_PREFIX):  # the L2 check's sessions: neither side
                continue
            if (method in tools or method in r.truths) == truth_side:
                yield f"{method} on config {config_id}{at}: {reason}"


def _first_of(results) -> str:
    """What a drawing of the first shape alone says of the others."""
    if results[0].shape is None:
        return ""
    return f" at shape {results[0].shape} (of {len(results)}; the tables and --json have all)"


def _tables(result, n_shapes: int) -> str:
    from nsprof.render.validate_tables import (
        format_agreement,
        format_conditions,
        format_floors,
        format_l2_check,
        format_matched,
        format_per_config,
    )
    from nsprof.space import config_label

    shape = None
    if result.shape is not None:
        shape = f"at shape {result.shape} of {n_shapes}: {config_label(result.shape_value)}"
    sections = [
        shape,
        format_per_config(result.per_config, result.configs),
        format_agreement(result.agreement, result.floors),
        format_floors(result.floors),
        format_matched(result.matched),
        result.verdict,
        format_l2_check(result.l2_check, result.timers),
        format_conditions(result.conditions),
    ]
    return "\n\n".join(section for section in sections if section)
