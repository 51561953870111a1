"""The `nsprof` command line: a thin click layer over the library.

Each command turns its options into settings, calls the library (nsprof.reports, profile,
validate, tune, store, doctor) and prints what nsprof.render makes of the result.

Library errors (nsprof.errors.NsprofError) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from nsprof import __version__
from nsprof.drivers import registry
from nsprof.errors import NsprofError
from nsprof.host.redirect import results_only_on_stdout
from nsprof.settings import TIMER_BACKENDS, Truth

EXIT_ERROR = 2


class CliError(click.ClickException):
    exit_code = EXIT_ERROR

    def show(self, file=None) -> None:
        click.echo(f"nsprof: error: {self.format_message()}", err=True)


def _version_option():
    return click.version_option(__version__, "-V", "--version", prog_name="nsprof")


class _Group(click.Group):
    """The command group: every command added to it also takes -V/--version."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        if not any("--version" in param.opts for param in cmd.params):
            _version_option()(cmd)
        super().add_command(cmd, name)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@_version_option()
def cli() -> None:
    """nsprof: ground-truth kernel durations from Nsight Compute (ncu) and Nsight Systems (nsys).

    Runs candidate kernel configs under ncu and nsys, directly and inside CUDA graphs, and
    reads the reports into one table of pure kernel durations, each labelled with how it
    was taken.
    """


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file: through symbolic and hard links when both exist."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): compare where they would be
        return Path(a).resolve() == Path(b).resolve()


def _refuse_overwriting_inputs(files, outputs: dict[str, str | None]) -> None:
    for option, out in outputs.items():
        if not out:
            continue
        for path in files:
            if out != "-" and os.fspath(path) != "-" and _same_file(out, path):
                raise CliError(f"{option} {out} would overwrite the input report {path}; choose another file")


def _write_exports(frame, csv_path: str | None, parquet_path: str | None) -> None:
    """The tidy rows to --csv / --parquet files; `-` is standard output."""
    if csv_path:
        frame.to_csv(sys.stdout if csv_path == "-" else csv_path, index=False)
        sys.stdout.flush()
        click.echo(
            f"wrote {len(frame)} rows to {'standard output' if csv_path == '-' else csv_path}", err=True
        )
    if parquet_path:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise CliError("--parquet needs pyarrow: pip install 'nsprof[parquet]'") from None
        if parquet_path == "-":
            frame.to_parquet(sys.stdout.buffer, index=False)
            sys.stdout.buffer.flush()
        else:
            frame.to_parquet(parquet_path, index=False)
        click.echo(
            f"wrote {len(frame)} rows to {'standard output' if parquet_path == '-' else parquet_path}",
            err=True,
        )


def _regex(ctx, param, value: str | None) -> str | None:
    import re

    if value is not None:
        try:
            re.compile(value)
        except re.error as error:
            raise click.BadParameter(f"not a regular expression: {error}") from None
    return value


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--kernel",
    "kernel_re",
    metavar="REGEX",
    callback=_regex,
    help="Only kernels whose short or full name matches REGEX (re.search, like ncu's --kernel-name regex:).",
)
@click.option(
    "--range",
    "range_re",
    metavar="REGEX",
    callback=_regex,
    help="Only ranges matching REGEX (as printed: cfg0.direct, torch_push, (no range)).",
)
@click.option(
    "--sort",
    "sort_by",
    type=click.Choice(["range", "median", "total", "count", "name"]),
    default="range",
    show_default=True,
    help="range: natural order (cfg2 before cfg10), (no range) last; median, total, "
    "count: largest first; name: by kernel name.",
)
@click.option(
    "--top",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Only the first N rows of each report, after --sort.",
)
@click.option(
    "--timeunit",
    type=click.Choice(["ns", "us", "ms"]),
    default="us",
    show_default=True,
    help="Unit of the durations printed.",
)
@click.option(
    "--no-warmup",
    is_flag=True,
    help='Drop the kernels outside every NVTX range (the "(no range)" rows, else shown last).',
)
@click.option(
    "--names",
    type=click.Choice(["short", "demangled"]),
    default="short",
    show_default=True,
    help="Show kernels by their short or their full (demangled) name.",
)
@click.option("--wide", is_flag=True, help="Never shorten kernel or range names.")
@click.option(
    "--format",
    "style",
    type=click.Choice(["table", "csv", "json", "markdown"]),
    default="table",
    show_default=True,
    help="What is printed (the summary, or the comparison) as this.",
)
@click.option(
    "--plot",
    "plot_path",
    metavar="FILE",
    default=None,
    help="Plot each range's kernel durations (with --compare: the per-range B/A ratios) to FILE "
    "(.png, .svg, .pdf; - for PNG on standard output; needs matplotlib).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the tidy rows as a JSON array.")
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the tidy rows to a CSV file (- for standard output).",
)
@click.option(
    "--parquet",
    "parquet_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the tidy rows to a Parquet file (needs pyarrow; - for standard output).",
)
@click.option("--compare", is_flag=True, help="Show exactly two reports side by side with B/A ratios.")
@click.option("--domain", default=None, help="Attribute kernels only to NVTX ranges of this domain.")
def analyze(
    files,
    kernel_re,
    range_re,
    sort_by,
    top,
    timeunit,
    no_warmup,
    names,
    wide,
    style,
    plot_path,
    as_json,
    csv_path,
    parquet_path,
    compare,
    domain,
) -> None:
    """Read ncu CSV, .ncu-rep, nsys .sqlite or .nsys-rep reports and summarise them.

    FILES may be FIFOs or pipes (`<(...)`, /dev/stdin) and `-` for standard input: each is
    read once into a temporary copy (NSPROF_MAX_STREAM_BYTES bounds it, NSPROF_STREAM_WAIT_S
    bounds the wait for data).

    Prints one table per report: per NVTX range (nsprof's own per-config ranges pool
    their reps) and kernel, the count, median, min, max, mean, std and coefficient of
    variation of the kernel duration, the total and its share of the report's kernel time
    (% of time: filters do not change it), median cycles and clock. Columns empty for a whole
    report are left out. --kernel, --range, --no-warmup, --sort and --top choose the rows, of
    the comparison too.
    """
    import pandas as pd

    from nsprof.analysis.summary import compare as compare_frames
    from nsprof.analysis.summary import order, samples, select, summarize
    from nsprof.render.json import write_rows
    from nsprof.render.notes import compare_note, describe_report, summary_notes
    from nsprof.render.tables import NAME_WIDTH, format_compare, format_summary
    from nsprof.reports import read_report
    from nsprof.reports.inputs import shown_name

    if compare and len(files) != 2:
        raise click.UsageError("--compare takes exactly two report files")
    if compare and as_json:
        raise click.UsageError(
            "--compare prints a table; use --format json for the comparison, "
            "--json without --compare for the rows"
        )
    to_stdout = _one_on_stdout(
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
    _refuse_overwriting_inputs(files, {"--csv": csv_path, "--parquet": parquet_path, "--plot": plot_path})
    width = None if wide else NAME_WIDTH
    frames, read_files, unreadable = [], [], []
    for path in files:
        try:
            frame = read_report(path, domain=domain)
        except NsprofError as exc:  # named at the end; the other reports are still shown
            message = str(exc)
            unreadable.append(
                message if message.startswith(shown_name(path)) else f"{shown_name(path)}: {message}"
            )
            continue
        for warning in frame.attrs.get("warnings", []):
            click.echo(f"nsprof: warning: {shown_name(path)}: {warning}", err=True)
        frame.insert(0, "file", str(path))
        frames.append(frame)
        read_files.append(path)
    files = read_files

    def done() -> None:
        """Each report that could not be read, one line each, then exit status 2."""
        if unreadable:
            for message in unreadable:
                click.echo(f"nsprof: error: {message}", err=True)
            click.get_current_context().exit(EXIT_ERROR)

    if not frames or (compare and unreadable):
        return done()
    tidy = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    _write_exports(tidy, csv_path, parquet_path)
    if as_json:
        write_rows(tidy, sys.stdout)
        return done()
    printed = not to_stdout  # the summary or comparison goes to stdout unless something else does

    def chosen(summary):
        return order(select(summary, kernel_re, range_re, warmup=not no_warmup), sort_by, top)

    if compare:
        _analyze_compare(
            files,
            frames,
            chosen,
            compare_frames,
            timeunit,
            width,
            names,
            style,
            plot_path,
            printed,
            describe_report,
            format_compare,
            compare_note,
        )
        return done()
    summaries = [(path, frame, chosen(summarize(frame))) for path, frame in zip(files, frames)]
    if plot_path:
        from nsprof.render.analyze_plot import durations_plot

        durations_plot(
            [(str(path), samples(frame, summary)) for path, frame, summary in summaries],
            plot_path,
            unit=timeunit,
        )
        if plot_path != "-":
            click.echo(f"wrote {plot_path}", err=True)
    if not printed:
        return done()
    if style in ("csv", "json"):
        from nsprof.render.json import summary_records

        rows = summary_records([(path, summary) for path, _, summary in summaries])
        if style == "json":
            import json

            click.echo(json.dumps(rows, indent=2, ensure_ascii=False, allow_nan=False))
        else:
            columns = ["file", *(c for c in summaries[0][2].columns if c != "group")]
            pd.DataFrame(rows, columns=columns).to_csv(sys.stdout, index=False)
        return done()
    for path, frame, summary in summaries:
        click.echo(f"{path}  ({describe_report(frame)})")
        if style == "markdown":
            click.echo("")
        click.echo(format_summary(summary, timeunit, width, names, style))
        for note in summary_notes(frame, summary, width, names):
            click.echo(note)
        click.echo("")
    done()


def _one_on_stdout(**claims: bool) -> bool:
    """At most one output may take standard output (`-`, or --json); whether one does. The
    printed tables then go to stderr."""
    taken = [option for option, on_stdout in claims.items() if on_stdout]
    if len(taken) > 1:
        raise click.UsageError(f"{' and '.join(taken)} would both write to standard output; choose one")
    return bool(taken)


def _write_html(path: str, make_page) -> None:
    """Write the report page `make_page()` returns; says so on stderr (and when its plots were left out)."""
    from nsprof.render.html import NO_MATPLOTLIB, write_page

    text = make_page()
    write_page(text, path)
    if NO_MATPLOTLIB in text:
        click.echo(f"nsprof: warning: --html: {NO_MATPLOTLIB}", err=True)
    if path != "-":
        click.echo(f"wrote {path}", err=True)


def _analyze_compare(
    files,
    frames,
    chosen,
    compare_frames,
    timeunit,
    width,
    names,
    style,
    plot_path,
    printed,
    describe_report,
    format_compare,
    compare_note,
) -> None:
    """analyze --compare: the two reports' rows joined, chosen like the summary's rows."""
    from nsprof.analysis.summary import compare_overall, per_range

    a, b = frames
    joined = compare_frames(a, b)
    joined = chosen(
        joined.assign(
            source="both",
            total_ns=joined["median_ns_a"].fillna(joined["median_ns_b"]),
            median_ns=joined["median_ns_a"].fillna(joined["median_ns_b"]),
            count=joined["count_a"] + joined["count_b"],
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
        if plot_path != "-":
            click.echo(f"wrote {plot_path}", err=True)
    if not printed:
        return
    if style == "json":
        from nsprof.render.json import compare_document

        click.echo(
            compare_document(
                joined.drop(columns=["source", "total_ns", "median_ns", "count"]), files[0], files[1]
            )
        )
        return
    if style == "csv":
        columns = [
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
        joined[columns].to_csv(sys.stdout, index=False)
        return
    click.echo(f"A: {files[0]}  ({describe_report(a)})")
    click.echo(f"B: {files[1]}  ({describe_report(b)})")
    if style == "markdown":
        click.echo("")
    click.echo(format_compare(joined, files[0].name, files[1].name, timeunit, width, names, style))
    note = compare_note(joined)
    if note:
        click.echo(note)


def _config_ids(config_list: str | None) -> list[int] | None:
    if not config_list:
        return None
    try:
        return [int(x) for x in config_list.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            "--configs takes integers separated by commas", param_hint="--configs"
        ) from None


def _truth_list(truth_list: str | None, backend: str | None) -> tuple[str, ...]:
    """--truth's names; --backend beside it only where it says the same (one truth, that backend)."""
    if truth_list is None:
        return ()
    truths = tuple(name.strip() for name in truth_list.split(","))
    if not all(truths):
        raise CliError(f"--truth takes ground truths separated by commas, e.g. ncu,nsys (not {truth_list!r})")
    if backend is not None and truths != (backend,):
        raise CliError(
            f"--backend {backend} and --truth {','.join(truths)} contradict: --truth names every truth "
            "to rank; drop --backend"
        )
    return truths


def _cluster_options(command):
    """--devices, --scheduler and --verbose: spread the configs over several GPUs (nsprof.cluster)."""
    for option in reversed(
        [
            click.option(
                "--devices",
                "devices",
                default=None,
                metavar="IDS",
                help="Spread the configs over these GPUs of this host (e.g. 0,1): a local Dask cluster, "
                "one worker per GPU (needs pip install 'nsprof[dask]').",
            ),
            click.option(
                "--scheduler",
                "scheduler",
                default=None,
                metavar="ADDRESS",
                help="Spread the configs over an existing Dask cluster (tcp://host:8786) whose workers "
                "were started one per GPU with --resources GPU=1.",
            ),
            click.option(
                "--verbose",
                is_flag=True,
                help="With --devices or --scheduler: each Dask worker's state on stderr as it changes.",
            ),
        ]
    ):
        command = option(command)
    return command


def _cluster_settings(devices: str | None, scheduler: str | None, verbose: bool):
    """ClusterSettings from the options, or None (one GPU, no Dask)."""
    from nsprof.settings import ClusterSettings

    if devices is None and scheduler is None:
        if verbose:
            raise click.UsageError(
                "--verbose shows the Dask workers' state: it goes with --devices or --scheduler"
            )
        return None
    ids: tuple[int, ...] = ()
    if devices is not None:
        try:
            ids = tuple(int(x) for x in devices.split(",") if x.strip())
        except ValueError:
            raise click.BadParameter(
                "--devices takes GPU indices separated by commas, e.g. 0,1", param_hint="--devices"
            ) from None
        if not ids:
            raise click.BadParameter(
                "--devices takes GPU indices separated by commas, e.g. 0,1", param_hint="--devices"
            )
    try:
        settings = ClusterSettings(devices=ids, scheduler=scheduler, verbose=verbose)
    except NsprofError as exc:
        raise click.UsageError(str(exc)) from None
    from nsprof.cluster import connect

    connect(settings)  # Dask missing, a scheduler out of reach: one line before any work
    return settings


def _close_clusters() -> None:
    import sys as _sys

    if "nsprof.cluster" in _sys.modules:
        from nsprof.cluster import close

        close()


def _mode_tuple(mode: str) -> tuple[str, ...]:
    return ("direct", "graph") if mode == "both" else (mode,)


@cli.command()
@click.argument("target")
@click.option(
    "--backend",
    type=click.Choice(registry.ground_truths()),
    default="ncu",
    show_default=True,
    help="Ground-truth tool.",
)
@click.option(
    "--mode",
    type=click.Choice(["direct", "graph", "both"]),
    default="both",
    show_default=True,
    help="Plain launches, replays of a captured CUDA graph, or both.",
)
@click.option(
    "--reps", type=click.IntRange(1), default=5, show_default=True, help="Measurements per config and mode."
)
@click.option(
    "--warmup",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Unmeasured calls per config first.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=120,
    show_default=True,
    help="Seconds one config may run before it is killed and recorded as failed.",
)
@click.option(
    "--clock-control",
    type=click.Choice(["base", "none"]),
    default="base",
    show_default=True,
    help="ncu: lock clocks to base (default) or leave them free.",
)
@click.option(
    "--cache-control",
    type=click.Choice(["all", "none"]),
    default="all",
    show_default=True,
    help="ncu: flush caches before each replay (all) or not.",
)
@click.option(
    "--graph-profiling",
    type=click.Choice(["node", "graph"]),
    default="node",
    show_default=True,
    help="ncu: profile graph kernel nodes one by one, or whole graphs (not per-kernel!).",
)
@click.option("--configs", "config_list", default=None, help="Only these config ids, e.g. 0,3,5.")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep reports and logs here (default: a temporary folder, named at the end).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the tidy rows as a JSON array.")
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the tidy rows to a CSV file (- for standard output, the table then goes to stderr).",
)
@click.option(
    "--wait", is_flag=True, help="Wait for another nsprof measuring on this GPU instead of failing."
)
@_cluster_options
def profile(
    target,
    backend,
    mode,
    reps,
    warmup,
    timeout_s,
    clock_control,
    cache_control,
    graph_profiling,
    config_list,
    work_dir,
    as_json,
    csv_path,
    wait,
    devices,
    scheduler,
    verbose,
) -> None:
    """Measure every config of TARGET (file.py:space) under ncu or nsys.

    All configs run in one profiled child process, each inside its own NVTX ranges; a
    config that crashes or hangs is recorded as failed and the rest are still measured.
    Prints per config and mode the median, min and spread over reps of the summed kernel
    durations, with cycles and clock.
    """
    from nsprof.measure import GroundTruth
    from nsprof.settings import ProfileSettings

    if backend == "ncu" and clock_control == "none":
        click.echo(
            "nsprof: warning: --clock-control none: on the H200 µs kernels measured 35-80x too long "
            "this way; rows are labelled clock_control=none",
            err=True,
        )
    if backend == "ncu" and graph_profiling == "graph":
        click.echo(
            "nsprof: warning: --graph-profiling graph gives whole-graph workloads, not kernel durations",
            err=True,
        )
    if as_json and csv_path == "-":
        raise click.UsageError("--json and --csv - both write to standard output: choose one")
    ids = _config_ids(config_list)
    settings = ProfileSettings(
        backend=backend,
        modes=_mode_tuple(mode),
        reps=reps,
        warmup=warmup,
        timeout_s=timeout_s,
        clock_control=clock_control,
        cache_control=cache_control,
        graph_profiling=graph_profiling,
        work_dir=work_dir,
        wait_gpu=wait,
    )
    space = _load_target(target)
    truth = GroundTruth(settings)  # a missing tool is one line before any work starts
    try:
        _profile(
            target,
            space,
            settings,
            truth,
            ids,
            backend,
            as_json,
            csv_path,
            _cluster_settings(devices, scheduler, verbose),
        )
    finally:
        _close_clusters()


def _load_target(target: str):
    """TARGET's Space, loaded before nsprof looks for its tools: a missing file or attribute, or a
    module that does not import, is the one line a run gives, not a tool missing too."""
    from nsprof.space import load_target

    with results_only_on_stdout():  # the target's import may print
        return load_target(target)


def _profile(target, space, settings, truth, ids, backend, as_json, csv_path, cluster) -> None:
    from nsprof.cluster import sharded
    from nsprof.profile import check_measured, config_summary, profile_result
    from nsprof.render.json import write_rows
    from nsprof.render.tables import format_config_summary

    truth = sharded(truth, cluster)
    n_configs = len(space.configs)
    if ids is not None:
        from nsprof.profile import check_config_ids

        try:
            ids = check_config_ids(ids, n_configs)
        except NsprofError as exc:
            raise click.BadParameter(str(exc), param_hint="--configs") from None
    n = (len(ids) if ids is not None else n_configs) * max(1, space.n_shapes)
    failures = []
    with click.progressbar(
        length=n, label=f"{backend}", file=sys.stderr, show_pos=True, show_eta=True
    ) as bar:

        def progress(event, config_id, detail):
            bar.update(-1 if event == "retry" else 1)  # a retried config was counted as done
            if event == "fail":
                failures.append((config_id, detail))

        with results_only_on_stdout():
            result = profile_result(
                target, settings, config_ids=ids, on_progress=progress, backend=truth, space=space
            )
    frame = result.frame
    for config_id, detail in failures:
        config_id, shape = space.points.split(config_id)  # a point id for a target with shapes
        where = "" if shape is None else f" at shape {shape}"
        click.echo(f"nsprof: config {config_id}{where} failed: {detail}", err=True)
    _write_exports(frame, csv_path, None)
    if as_json:
        write_rows(frame, sys.stdout)
        check_measured(frame)
        return
    summary = config_summary(frame, result.configs)
    labels = result.labels
    to_stderr = csv_path == "-"  # standard output carries the rows
    click.echo(
        f"{target}: {backend}, clock control {labels['clock_control']}, cache control "
        f"{labels['cache_control']}, {result.wall_s:.1f} s wall; "
        + (
            f"reports kept in {result.work_dir}"
            if result.work_dir
            else "temporary reports removed (pass --work-dir to keep them)"
        ),
        err=to_stderr,
    )
    click.echo(format_config_summary(summary), err=to_stderr)
    check_measured(frame)  # every config failed: the table above says why, and the exit status too


class _StageBars:
    """One progress bar per stage of a long command, on stderr."""

    def __init__(self) -> None:
        self._bar = None

    def __call__(self, name: str, length: int):
        self.close()
        self._bar = click.progressbar(length=length, label=f"{name:<12}", file=sys.stderr, show_pos=True)
        self._bar.__enter__()
        bar = self._bar
        return lambda event, config_id, detail: bar.update(-1 if event == "retry" else 1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


@cli.command()
@click.argument("target")
@click.option(
    "--timers",
    default="event,cupti,graph",
    show_default=True,
    help="Fast timers: families event, cupti, graph (warm and cold L2 each) or exact names "
    "(event, event_cold, cupti, cupti_cold, graph_warm, graph_cold).",
)
@click.option(
    "--external/--no-external",
    default=True,
    show_default=True,
    help="Also TileLang's and Triton's own timers, where installed.",
)
@click.option(
    "--truth",
    default="ncu,nsys",
    show_default=True,
    help="Ground truths: ncu, nsys; ncu also under a condition, TOOL@CLOCK-L2 with CLOCK base|free "
    "and L2 cold|warm (ncu@free-warm: --clock-control none --cache-control none; plain ncu is "
    "ncu@base-cold).",
)
@click.option(
    "--matched",
    is_flag=True,
    help="Also run ncu with clocks free and L2 cold and warm (ncu@free-cold, ncu@free-warm), each "
    "repeated for its floor, and show each timer against the ncu taken under its own L2 state.",
)
@click.option("--mode", default="direct,graph", show_default=True, help="Ground-truth modes: direct, graph.")
@click.option(
    "--reps", type=click.IntRange(1), default=5, show_default=True, help="Ground-truth reps per config."
)
@click.option(
    "--timer-reps", type=click.IntRange(1), default=100, show_default=True, help="Samples per fast timer."
)
@click.option(
    "--repeat/--no-repeat",
    default=True,
    show_default=True,
    help="Run each ground truth twice to measure its own repeatability (the noise floor).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=120,
    show_default=True,
    help="Seconds one config may run before it is killed and recorded as failed.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the agreement plot (png/svg/pdf; - for PNG on standard output).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write a self-contained report page: the tables and the plot, readable offline (- for "
    "standard output).",
)
@click.option("--json", "as_json", is_flag=True, help="Print everything as one JSON object.")
@click.option(
    "--save",
    "save_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Also write that JSON object to a file (- for standard output).",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep reports and logs here (default: a temporary folder).",
)
@click.option(
    "--wait", is_flag=True, help="Wait for another nsprof measuring on this GPU instead of failing."
)
@_cluster_options
def validate(
    target,
    timers,
    external,
    truth,
    matched,
    mode,
    reps,
    timer_reps,
    repeat,
    timeout_s,
    plot_path,
    html_path,
    as_json,
    save_path,
    work_dir,
    wait,
    devices,
    scheduler,
    verbose,
) -> None:
    """Check fast timers against ncu and nsys over TARGET's configs (file.py:space).

    For every timer against every ground truth: median ratio (bias), Kendall τ and
    Spearman ρ over configs, whether it picks the same best config, and regret (how much
    slower, by ground truth, its pick is). Ends with a verdict: which fast timer tracks
    which ground truth on this kernel.
    """
    from nsprof.render.html import validate_page
    from nsprof.render.json import agreement_document
    from nsprof.render.plot import plot, require_matplotlib
    from nsprof.render.plot import plot_path as plot_path_checked
    from nsprof.render.tables import (
        format_agreement,
        format_conditions,
        format_floors,
        format_matched,
        format_per_config,
    )
    from nsprof.timers.specs import expand
    from nsprof.validate import ValidateSettings, resolve_truths
    from nsprof.validate import validate as run_validate

    try:
        expand(list(_split(timers)))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timers") from None
    truths = _split(truth)
    modes = _split(mode)
    try:
        backends = list(dict.fromkeys(Truth.parse(t).backend for t in truths))
    except NsprofError as exc:
        raise click.BadParameter(str(exc), param_hint="--truth") from None
    if not truths or any(b not in registry.ground_truths() for b in backends):
        raise click.BadParameter(f"choose from {', '.join(registry.ground_truths())}", param_hint="--truth")
    if not modes or any(m not in ("direct", "graph") for m in modes):
        raise click.BadParameter("choose from direct, graph", param_hint="--mode")
    _one_on_stdout(
        **{
            "--plot -": plot_path == "-",
            "--html -": html_path == "-",
            "--save -": save_path == "-",
            "--json": as_json,
        }
    )
    tables_to_stderr = "-" in (plot_path, html_path, save_path)
    if plot_path:
        plot_path_checked(plot_path)
        require_matplotlib()
    from dataclasses import replace

    from nsprof.drivers.registry import get_driver

    settings = ValidateSettings(
        timers=_split(timers),
        external=external,
        truths=truths,
        matched=matched,
        modes=modes,
        reps=reps,
        timer_reps=timer_reps,
        repeat_truth=repeat,
        timeout_s=timeout_s,
        work_dir=work_dir,
        wait=wait,
    )
    try:
        resolve_truths(settings)  # a condition a tool cannot take, --matched without ncu: one line
    except NsprofError as exc:
        raise click.BadParameter(
            str(exc), param_hint="--matched" if "--matched" in str(exc) else "--truth"
        ) from None
    space = _load_target(target)
    for backend in backends:
        get_driver(backend)  # a missing tool is one line, before any work
    bars = _StageBars()
    try:
        settings = replace(settings, cluster=_cluster_settings(devices, scheduler, verbose))
        with results_only_on_stdout():
            result = run_validate(target, settings, on_stage=bars, space=space)
    finally:
        bars.close()
        _close_clusters()
    for (method, config_id), reason in sorted(result.failures.items(), key=str):
        click.echo(f"nsprof: {method} failed on config {config_id}: {reason}", err=True)
    if plot_path:
        plot(
            result.per_config, result.agreement, result.timers, result.truths, plot_path, floors=result.floors
        )
        if plot_path != "-":
            click.echo(f"wrote {plot_path}", err=True)
    if html_path:
        _write_html(html_path, lambda: validate_page(result, title=f"nsprof validate {target}"))
    document = agreement_document(
        result.agreement,
        result.per_config,
        result.floors,
        result.verdict,
        matched=result.matched,
        conditions=result.conditions,
        repeat=result.repeat,
    )
    if save_path == "-":
        click.echo(document)
    elif save_path:
        Path(save_path).write_text(document + "\n")
        click.echo(f"wrote {save_path}", err=True)
    if as_json:
        click.echo(document)
        return
    sections = [
        format_per_config(result.per_config, result.configs),
        format_agreement(result.agreement, result.floors),
        format_floors(result.floors),
        format_matched(result.matched),
        result.verdict,
        format_conditions(result.conditions),
    ]
    click.echo("\n\n".join(section for section in sections if section), err=tables_to_stderr)


@cli.command()
@click.argument("target")
@click.option(
    "--backend",
    type=click.Choice(registry.ground_truths() + tuple(TIMER_BACKENDS)),
    default=None,
    help="Ground truth (ncu, nsys) or a fast in-process timer to rank by (default ncu). For several "
    "ground truths use --truth instead.",
)
@click.option(
    "--truth",
    "truth_list",
    metavar="LIST",
    default=None,
    help="Rank under each of these ground truths, e.g. ncu,nsys, and say whether their winners agree "
    "(variants: ncu@base-warm, ncu@free-cold, ncu@free-warm: L2 not flushed, clocks not locked, both).",
)
@click.option(
    "--deploy",
    metavar="TRUTH",
    default=None,
    help="The truth whose winner is fed back and recorded (one of --truth; default the first).",
)
@click.option(
    "--explain/--no-explain",
    default=True,
    show_default=True,
    help="When the truths disagree, measure the contenders again under ncu with warm L2 and with free "
    "clocks to say which condition explains it.",
)
@click.option(
    "--mode",
    type=click.Choice(["direct", "graph"]),
    default="graph",
    show_default=True,
    help="Ground truth of plain launches or of CUDA-graph kernel nodes.",
)
@click.option(
    "--stat",
    type=click.Choice(["median", "min"]),
    default="median",
    show_default=True,
    help="Rank by the median or the minimum over reps.",
)
@click.option(
    "--reps", type=click.IntRange(1), default=5, show_default=True, help="Ground-truth reps per config."
)
@click.option(
    "--max-reps",
    type=click.IntRange(1),
    default=None,
    help="Adaptive reps: the most reps a config still tied with the best gets in all (default 4 x --reps).",
)
@click.option(
    "--budget-s",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    help="Adaptive reps: wall seconds their interleaved sessions may take, per truth (0: none; inf: no limit).",
)
@click.option(
    "--prescreen",
    type=click.Choice(["graph", "graph_cold", "cupti", "cupti_cold", "event", "event_cold"]),
    default=None,
    help="Rank all configs with this fast timer first; measure only the best --top.",
)
@click.option(
    "--top",
    "top",
    type=click.IntRange(1),
    default=4,
    show_default=True,
    help="How many prescreened configs go to ground truth.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=120,
    show_default=True,
    help="Seconds one config may run before it is killed and recorded as failed.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep reports and logs here (default: a temporary folder).",
)
@click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Results store (default .nsprof/results.sqlite).",
)
@click.option("--no-store", is_flag=True, help="Keep no results store.")
@click.option("--resume", is_flag=True, help="Measure only configs the store has no result for (same key).")
@click.option(
    "--retry-failed",
    is_flag=True,
    help="With --resume, measure failed configs again too (failures that say nothing about the "
    "config, such as a timeout shorter than today's, are retried anyway).",
)
@click.option(
    "--wait", is_flag=True, help="Wait for another nsprof measuring on this GPU instead of failing."
)
@click.option(
    "--feed-back/--no-feed-back",
    default=True,
    show_default=True,
    help="Hand the ranking to the target's own autotuner (TileLang's or Triton's cache) when it can take it.",
)
@click.option(
    "--tuner-pick/--no-tuner-pick",
    default=True,
    show_default=True,
    help="Also run the target's own autotuner with its own timer (Triton) and say what it picks.",
)
@click.option("--configs", "config_list", default=None, help="Only these config ids, e.g. 0,3,5.")
@click.option("--json", "as_json", is_flag=True, help="Print the ranked table as JSON.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the ranking plot (png/svg/pdf; - for PNG on standard output): each config's value, "
    "best first, the tie set marked.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write a self-contained report page: the ranked table and the plot, readable offline (- for "
    "standard output).",
)
@_cluster_options
def tune(
    target,
    backend,
    truth_list,
    deploy,
    explain,
    mode,
    stat,
    reps,
    max_reps,
    budget_s,
    prescreen,
    top,
    timeout_s,
    work_dir,
    store_path,
    no_store,
    resume,
    retry_failed,
    wait,
    feed_back,
    tuner_pick,
    config_list,
    as_json,
    plot_path,
    html_path,
    devices,
    scheduler,
    verbose,
) -> None:
    """Rank every config of TARGET (file.py:space) by ground truth and name the best.

    Prints the ranked table (duration, the median's interval from the reps, spread, cycles,
    clock, distance from the best, configs tied with the best) and how the numbers were
    taken; out of a tie the lowest median is fed back. The configs still tied with the best after
    the first pass are measured again, interleaved in one profiled session, until the best is
    separated, --max-reps or --budget-s. With --prescreen, a fast timer ranks all configs and only
    the best --top go to the ground truth. With --truth ncu,nsys, one table per
    truth, then whether the winners agree, by how much they differ, which condition explains it, and
    the --deploy truth fed back.
    """
    from nsprof.drivers.registry import get_driver
    from nsprof.render.json import tune_document
    from nsprof.render.tables import format_tune
    from nsprof.settings import ground_truths, split_truth
    from nsprof.tune import TuneSettings, check_truths
    from nsprof.tune import tune as run_tune

    truths = _truth_list(truth_list, backend)
    backend = backend or "ncu"
    _one_on_stdout(**{"--plot -": plot_path == "-", "--html -": html_path == "-", "--json": as_json})
    tables_to_stderr = plot_path == "-" or html_path == "-"
    if plot_path:
        from nsprof.render.plot import plot_path as plot_path_checked
        from nsprof.render.plot import require_matplotlib

        plot_path_checked(plot_path)
        require_matplotlib()  # one line before any work
    if no_store and resume:
        raise click.UsageError("--resume needs the results store (drop --no-store)")
    if retry_failed and not resume:
        raise click.UsageError("--retry-failed goes with --resume")
    if max_reps is not None and max_reps < reps:
        raise click.UsageError(f"--max-reps ({max_reps}) must be at least --reps ({reps})")
    bars = _StageBars()
    try:
        settings = TuneSettings(
            backend=backend,
            mode=mode,
            stat=stat,
            reps=reps,
            prescreen=prescreen,
            prescreen_top=top,
            timeout_s=timeout_s,
            work_dir=work_dir,
            store=store_path,
            use_store=not no_store,
            resume=resume,
            retry_failed=retry_failed,
            wait=wait,
            feed_back=feed_back,
            tuner_pick=tuner_pick,
            truths=truths,
            deploy=deploy or "",
            max_reps=max_reps,
            budget_s=budget_s,
            explain=explain,
            cluster=_cluster_settings(devices, scheduler, verbose),
        )
        check_truths(settings)
        space = _load_target(target)
        for name in settings.ranked_truths:  # after the options and the target: a missing tool is one line
            if split_truth(name)[0] in ground_truths():
                get_driver(split_truth(name)[0])
        with results_only_on_stdout():
            result = run_tune(
                target, settings, config_ids=_config_ids(config_list), on_stage=bars, space=space
            )
    finally:
        bars.close()
        _close_clusters()
    if plot_path:
        from nsprof.render.tune_plot import plot_tune

        at = (
            ""
            if result.shape is None
            else f" at shape {result.shape} (of {len(result.shapes)}; --json has all)"
        )
        plot_tune(result.table, plot_path, title=f"{target}: ranked by {result.label}{at}")
        if plot_path != "-":
            click.echo(f"wrote {plot_path}", err=True)
    if html_path:
        from nsprof.render.html import tune_page

        _write_html(html_path, lambda: tune_page(result, title=f"nsprof tune {target}"))
    if as_json:
        click.echo(tune_document(result))
    else:
        click.echo(format_tune(result), err=tables_to_stderr)
    for error in result.errors:
        click.echo(f"nsprof: {error}", err=True)
    if result.errors:
        sys.exit(1)


@cli.command()
@click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Results store (default .nsprof/results.sqlite).",
)
@click.option(
    "--export",
    "export_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="Write every stored measurement to a .csv, .json or .parquet file (- for CSV on standard output).",
)
def results(store_path, export_path) -> None:
    """List the runs in the results store, or export its measurements."""
    from nsprof.render.tables import format_runs
    from nsprof.store import DEFAULT_PATH, ResultStore

    path = store_path or DEFAULT_PATH
    if not Path(path).exists():
        raise CliError(f"no results store at {path} (nsprof tune writes one)")
    with ResultStore(path) as store:
        if export_path == "-":
            frame = store.frame()
            frame.to_csv(sys.stdout, index=False)
            click.echo(f"wrote {len(frame)} measurements to standard output (CSV)", err=True)
            return
        if export_path:
            count = store.export(export_path)
            click.echo(f"wrote {count} measurements to {export_path}")
            return
        runs = store.runs()
        counts = store.frame().groupby("run_id").size() if len(runs) else {}
    click.echo(format_runs(runs, counts))


@cli.command()
@click.option(
    "--backend",
    type=click.Choice(registry.ground_truths()),
    default="nsys",
    show_default=True,
    help="The profiler to serve under (nsys only: ncu cannot serve, see docs/serve.md).",
)
@click.option(
    "--idle-exit",
    "idle_exit_s",
    type=click.FloatRange(min=0, min_open=True),
    default=600,
    show_default=True,
    metavar="SECONDS",
    help="End after this long without a job.",
)
@click.option(
    "--wait", is_flag=True, help="Wait for another nsprof measuring on this GPU instead of failing."
)
def serve(backend, idle_exit_s, wait) -> None:
    """Keep one profiled worker running on GPU 0 for the nsprof commands that follow.

    Holds the GPU's lock while it runs. profile, tune and validate with the same backend then
    send their configs to its worker (NSPROF_SERVE=0 turns that off), which pays the profiler's,
    Python's and CUDA's start-up once. Ends after --idle-exit seconds without a job, on
    SIGTERM/SIGINT (after the current job), or when a job's worker dies or hangs.
    """
    from nsprof.serve import serve as run_server

    sys.exit(run_server(backend, idle_exit_s, wait))


@cli.command()
@click.option("--no-run", is_flag=True, help="Only look for the GPU and tools; run no kernel.")
def doctor(no_run) -> None:
    """Check the GPU, ncu, nsys and counter permissions, and run a tiny kernel under each tool.

    Exit status 0 when at least one ground-truth tool works here, 1 when none does.
    """
    from nsprof.doctor import run_doctor

    checks, available = run_doctor(run_kernels=not no_run)
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        click.echo(f"[{mark}] {check.name:<9} {check.detail}")
    sys.exit(0 if available else 1)


def _exit_for_closed_stdout() -> None:
    """The reader of stdout went away (`nsprof analyze ... | head -1`): that is not an error.
    As the Python docs advise, point stdout at devnull so that the flush at exit cannot fail
    again (which would print "Exception ignored" and exit 120), then exit 0."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


def main(args: list[str] | None = None) -> None:
    """nsprof's command line on `args` (sys.argv[1:] when None): errors as one line and an exit status."""
    from nsprof.session import interrupt_on_termination

    # timeout, Slurm and systemd stop nsprof with SIGTERM, a closed terminal with SIGHUP: act as
    # on Ctrl-C (children stopped, what was measured kept), not die leaving the children running.
    interrupt_on_termination()
    try:
        code = cli.main(args=args, prog_name="nsprof", standalone_mode=False)
        sys.stdout.flush()  # inside the try: a closed pipe shows on the last flush too
    except SystemExit:
        # click answers a closed pipe (EPIPE) itself with exit status 1, after wrapping
        # stdout in its PacifyFlushWrapper; that wrapper is how the case is recognised.
        if isinstance(sys.stdout, click.utils.PacifyFlushWrapper):
            _exit_for_closed_stdout()
        raise
    except NsprofError as exc:
        click.echo(f"nsprof: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except click.exceptions.Abort:
        click.echo("nsprof: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (nsprof {exc.ctx.info_name} --help)" if exc.ctx is not None and exc.ctx.parent else ""
        click.echo(f"nsprof: error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _exit_for_closed_stdout()
    except OSError as exc:
        click.echo(f"nsprof: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
        sys.exit(EXIT_ERROR)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        if os.environ.get("NSPROF_DEBUG"):
            raise
        click.echo(
            f"nsprof: internal error: {type(exc).__name__}: {exc} (set NSPROF_DEBUG=1 for the traceback)",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)
