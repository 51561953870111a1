"""`nsprof analyze`: read reports into tidy rows and print their summary (`analyze`), or two
reports side by side (`compare`); `View` is which rows are shown, and how."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from nsprof.commands.common import csv_on_stdout, one_on_stdout, refuse_clobbering, write_exports, wrote
from nsprof.errors import NsprofError, OptionError, error_line, printable

EXIT_UNREADABLE = 2  # some report could not be read (the others were still shown)
COMPARE_COLUMNS = [
    "range",
    "kernel",
    "kernel_full",
    "count_a",
    "count_b",
    "median_ns_a",
    "median_ns_b",
    "ratio",
    "median_cycles_a",
    "median_cycles_b",
    "cycles_ratio",
]


@dataclass(frozen=True)
class View:
    """Which rows of a summary are shown (kernel_re, range_re, no_warmup, sort_by, reverse, top) and how
    (timeunit, names, wide, style: table, csv, json or markdown)."""

    kernel_re: str | None = None
    range_re: str | None = None
    sort_by: str = "range"
    reverse: bool = False
    top: int | None = None
    timeunit: str = "us"
    no_warmup: bool = False
    names: str = "short"
    wide: bool = False
    style: str = "table"
    by: str = "range"  # range: per range and kernel; kernel: every range pooled (analysis.kernels)

    @property
    def width(self) -> int | None:
        from nsprof.render.analyze_tables import NAME_WIDTH

        return None if self.wide else NAME_WIDTH

    def chosen(self, summary):
        from nsprof.analysis.listing import order, select

        chosen = select(summary, self.kernel_re, self.range_re, warmup=not self.no_warmup)
        return order(chosen, self.sort_by, self.top, reverse=self.reverse)


def _check(files, compare, as_json, plot_path, csv_path, parquet_path, by_kernel=False) -> bool:
    """The options' checks, before any report is read; whether something else takes standard output."""
    if compare and len(files) != 2:
        raise OptionError("--compare takes exactly two report files")
    if [str(path) for path in files].count("-") > 1:
        raise OptionError("standard input (-) is named more than once: it can be read only once")
    if compare and by_kernel:
        raise OptionError("--compare compares ranges; leave out --by kernel")
    if compare and as_json:
        raise OptionError(
            "--compare prints a table; use --format json for the comparison, "
            "--json without --compare for the rows"
        )
    to_stdout = one_on_stdout(
        **{
            "--json": as_json,
            "--csv -": csv_path == "-",
            "--parquet -": parquet_path == "-",
            "--plot -": plot_path == "-",
        }
    )
    if plot_path:
        from nsprof.render.plot import plot_path as checked_plot_path
        from nsprof.render.plot import require_matplotlib

        require_matplotlib()
        checked_plot_path(plot_path)
    outputs = {"--csv": csv_path, "--parquet": parquet_path, "--plot": plot_path}
    refuse_clobbering(outputs, [("the input report", path) for path in files])
    return to_stdout


def _read(files, domain, as_rows: bool, launches: bool = False):
    """(the files read, their tidy frames, one message for each file that could not be read); with
    `as_rows`, a small plain report as plain lists (nsprof.schema.ListTable) instead of a frame."""
    from nsprof.reports import read_report
    from nsprof.reports.inputs import shown_name

    read, frames, unreadable = [], [], []
    for path in files:
        try:
            frame = read_report(path, domain=domain, as_rows=as_rows, launches=launches)
        except NsprofError as exc:  # named at the end; the other reports are still shown
            message = str(exc)
            unreadable.append(
                message if message.startswith(shown_name(path)) else f"{shown_name(path)}: {message}"
            )
            continue
        for warning in frame.attrs.get("warnings", []):
            click.echo(f"nsprof: warning: {shown_name(path)}: {printable(warning)}", err=True)
        if not as_rows:
            frame.insert(0, "file", str(path))
        frames.append(frame)
        read.append(path)
    return read, frames, unreadable


def analyze(
    files,
    view: View,
    *,
    compare=False,
    domain=None,
    plot_path=None,
    as_json=False,
    csv_path=None,
    parquet_path=None,
) -> int:
    """Summarise (or with `compare`, compare) the reports; the exit status: 2 when one could not be read."""
    import pandas as pd

    from nsprof.render.json import write_rows

    by_kernel = view.by == "kernel"
    to_stdout = _check(files, compare, as_json, plot_path, csv_path, parquet_path, by_kernel)
    # Printing tables only: a small plain report is read as plain lists (a ListTable), not a
    # DataFrame, and summarised, chosen and printed so; every other output needs the frames.
    tables_only = view.style in ("table", "markdown") and not (
        plot_path or as_json or csv_path or parquet_path or compare or by_kernel
    )
    files, frames, unreadable = _read(files, domain, tables_only, launches=by_kernel and not to_stdout)
    if frames and tables_only:
        _summarize(files, frames, view, plot_path, printed=not to_stdout)
    elif frames and not (compare and unreadable):
        tidy = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        write_exports(tidy, csv_path, parquet_path)
        if as_json:
            write_rows(tidy, sys.stdout)
        elif compare:
            _compare(files, frames, view, plot_path, printed=not to_stdout)
        else:
            _summarize(files, frames, view, plot_path, printed=not to_stdout)
    for message in unreadable:  # each report that could not be read, one line each
        click.echo(error_line(f"nsprof: error: {message}"), err=True)
    return EXIT_UNREADABLE if unreadable else 0


def _summarize(files, frames, view: View, plot_path, printed: bool) -> None:
    """The summary of each report (and --plot's durations); printed unless standard output is taken."""
    from nsprof.analysis.listing import samples
    from nsprof.analysis.summary import summarize

    summaries = [(path, frame, view.chosen(summarize(frame))) for path, frame in zip(files, frames)]
    if plot_path:
        from nsprof.render.analyze_plot import durations_plot

        durations_plot(
            [(str(path), samples(frame, summary)) for path, frame, summary in summaries],
            plot_path,
            unit=view.timeunit,
        )
        wrote(plot_path)
    if not printed:
        return
    if view.by == "kernel":
        _by_kernel(files, frames, view)
    elif view.style in ("csv", "json"):
        _summary_records(summaries, view.style)
    else:
        _summary_tables(summaries, view)


def _summary_tables(summaries, view: View) -> None:
    from nsprof.render.analyze_tables import format_summary

    _echo_tables(summaries, format_summary, view)


def _echo_tables(tables, format_table, view: View) -> None:
    """Each report's table under its name and description, then its notes."""
    from nsprof.render.notes import describe_report, summary_notes

    for path, frame, table in tables:
        click.echo(f"{printable(path)}  ({describe_report(frame)})")
        if view.style == "markdown":
            click.echo("")
        click.echo(format_table(table, view.timeunit, view.width, view.names, view.style))
        for note in summary_notes(frame, table, view.width, view.names):  # kernel columns suffice
            click.echo(note)
        click.echo("")


def _by_kernel(files, frames, view: View) -> None:
    """--by kernel: each report's per-kernel summary, every range pooled, with launch configurations."""
    import pandas as pd

    from nsprof.analysis.kernels import KERNEL_COLUMNS, kernel_order, kernel_summary
    from nsprof.render.analyze_tables import format_kernels
    from nsprof.render.json import json_text, records

    tables = []
    for path, frame in zip(files, frames):
        table = kernel_summary(
            frame, frame.attrs.get("launch_configs"), view.range_re, warmup=not view.no_warmup
        )
        tables.append(
            (path, frame, kernel_order(table, view.sort_by, view.top, view.reverse, view.kernel_re))
        )
    if view.style in ("csv", "json"):
        rows = [{"file": str(path), **row} for path, _, table in tables for row in records(table)]
        if view.style == "json":
            click.echo(json_text(rows))
        else:
            csv_on_stdout(pd.DataFrame(rows, columns=["file", *KERNEL_COLUMNS]))
        return
    _echo_tables(tables, format_kernels, view)


def _summary_records(summaries, style: str) -> None:
    import pandas as pd

    from nsprof.render.json import json_text, summary_records

    rows = summary_records([(path, summary) for path, _, summary in summaries])
    if style == "json":
        click.echo(json_text(rows))
    else:
        columns = ["file", *(c for c in summaries[0][2].columns if c != "group")]
        csv_on_stdout(pd.DataFrame(rows, columns=columns))


def _compare(files, frames, view: View, plot_path, printed: bool) -> None:
    """--compare: the two reports' rows joined, chosen like the summary's rows."""
    from nsprof.analysis.summary import compare, compare_overall, per_range

    joined = compare(*frames)
    median = joined["median_ns_a"].fillna(joined["median_ns_b"])
    joined = view.chosen(
        joined.assign(
            source="both", total_ns=median, median_ns=median, count=joined["count_a"] + joined["count_b"]
        )
    )
    if plot_path:
        from nsprof.render.analyze_plot import ratio_plot

        ratio_plot(
            per_range(joined),
            files[0].name,
            files[1].name,
            plot_path,
            compare_overall(joined)["geomean_ratio"],
        )
        wrote(plot_path)
    if not printed:
        return
    from nsprof.render.notes import describe_report

    taken = (describe_report(frames[0]), describe_report(frames[1]))  # how each side's numbers were taken
    if view.style == "json":
        from nsprof.render.json import compare_document

        shown = joined.drop(columns=["source", "total_ns", "median_ns", "count"])
        click.echo(compare_document(shown, files[0], files[1], taken))
    elif view.style == "csv":
        csv_on_stdout(joined[COMPARE_COLUMNS].assign(taken_a=taken[0], taken_b=taken[1]))
    else:
        _compare_table(files, taken, joined, view)


def _compare_table(files, taken: tuple[str, str], joined, view: View) -> None:
    from nsprof.render.analyze_tables import format_compare
    from nsprof.render.notes import compare_note

    click.echo(f"A: {printable(files[0])}  ({taken[0]})")
    click.echo(f"B: {printable(files[1])}  ({taken[1]})")
    if view.style == "markdown":
        click.echo("")
    click.echo(
        format_compare(
            joined,
            printable(files[0].name),
            printable(files[1].name),
            view.timeunit,
            view.width,
            view.names,
            view.style,
        )
    )
    note = compare_note(joined)
    if note:
        click.echo(note)
