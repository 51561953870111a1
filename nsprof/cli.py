"""The `nsprof` command line: a thin click layer over nsprof.commands.

Holds the options shared by several commands (one definition each: `_option`), and each command
as its options -> settings (nsprof.settings checks them) -> the command (nsprof.commands) -> what
it prints. Library errors (nsprof.errors.NsprofError) become one line on stderr and exit status 2;
an OptionError is shown as a usage error, pointing at the command's --help.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from nsprof import __version__
from nsprof.drivers import registry
from nsprof.errors import NsprofError, OptionError
from nsprof.settings import TIMER_BACKENDS

EXIT_ERROR = 2


def _version_option():
    return click.version_option(__version__, "-V", "--version", prog_name="nsprof")


class _Command(click.Command):
    """A command whose OptionError is click's usage error (naming its option), with the --help hint."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except OptionError as exc:
            if exc.option:
                raise click.BadParameter(str(exc), ctx=ctx, param_hint=exc.option) from None
            raise click.UsageError(str(exc), ctx=ctx) from None


class _Group(click.Group):
    """The command group: every command added to it also takes -V/--version."""

    command_class = _Command

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


def _regex(ctx, param, value: str | None) -> str | None:
    import re

    if value is not None:
        try:
            re.compile(value)
        except re.error as error:
            raise click.BadParameter(f"not a regular expression: {error}") from None
    return value


def _ints(value: str, message: str, option: str) -> list[int]:
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(message, param_hint=option) from None


def _config_ids(ctx, param, value: str | None) -> list[int] | None:
    return _ints(value, "--configs takes integers separated by commas", "--configs") if value else None


def _devices(ctx, param, value: str | None) -> tuple[int, ...] | None:
    message = "--devices takes GPU indices separated by commas, e.g. 0,1"
    ids = None if value is None else tuple(_ints(value, message, "--devices"))
    if ids == ():
        raise click.BadParameter(message, param_hint="--devices")
    return ids


_PATH_OUT = click.Path(dir_okay=False, allow_dash=True)
# The options of several commands: (where click puts the value, its definition); `_option` lets a
# command say more in its own help.
_SHARED = {
    "--wait": (
        "wait",
        {"is_flag": True, "help": "Wait for another nsprof measuring on this GPU instead of failing."},
    ),
    "--timeout": (
        "timeout_s",
        {
            "type": click.FloatRange(min=1),
            "default": 120,
            "show_default": True,
            "help": "Seconds one config may run before it is killed and recorded as failed.",
        },
    ),
    "--reps": (
        "reps",
        {
            "type": click.IntRange(1),
            "default": 5,
            "show_default": True,
            "help": "Ground-truth reps per config.",
        },
    ),
    "--work-dir": (
        "work_dir",
        {
            "type": click.Path(file_okay=False, path_type=Path),
            "default": None,
            "help": "Keep reports and logs here (default: a temporary folder).",
        },
    ),
    "--configs": (
        "ids",
        {"default": None, "callback": _config_ids, "help": "Only these config ids, e.g. 0,3,5."},
    ),
    "--store": (
        "store_path",
        {
            "type": click.Path(dir_okay=False, path_type=Path),
            "default": None,
            "help": "Results store (default .nsprof/results.sqlite).",
        },
    ),
    "--json": ("as_json", {"is_flag": True}),
    "--csv": ("csv_path", {"type": _PATH_OUT}),
    "--plot": ("plot_path", {"type": _PATH_OUT}),
    "--html": ("html_path", {"type": _PATH_OUT}),
}


def _option(name: str, **more):
    """The shared option `name`, with `more` (its help, a default) where the command says more."""
    dest, definition = _SHARED[name]
    return click.option(name, dest, **{**definition, **more})


def _cluster_options(command):
    """--devices, --scheduler and --verbose: spread the configs over several GPUs (nsprof.cluster)."""
    for option in reversed(
        [
            click.option(
                "--devices",
                "devices",
                default=None,
                metavar="IDS",
                callback=_devices,
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


class _StageBars:
    """One progress bar per stage of a long command, on stderr; `width` pads the stage's name."""

    def __init__(self, width: int = 12) -> None:
        self._bar, self._width = None, width

    def __call__(self, name: str, length: int):
        self.close()
        self._bar = click.progressbar(
            length=length, label=f"{name:<{self._width}}", file=sys.stderr, show_pos=True
        )
        self._bar.__enter__()
        bar = self._bar
        return lambda event, config_id, detail: bar.update(
            -1 if event == "retry" else 1
        )  # a retry was counted

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _exit(status: int) -> None:
    if status:
        click.get_current_context().exit(status)


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
@_option(
    "--plot",
    type=None,
    metavar="FILE",
    default=None,
    help="Plot each range's kernel durations (with --compare: the per-range B/A ratios) to FILE "
    "(.png, .svg, .pdf; - for PNG on standard output; needs matplotlib).",
)
@_option("--json", help="Print the tidy rows as a JSON array.")
@_option("--csv", help="Write the tidy rows to a CSV file (- for standard output).")
@click.option(
    "--parquet",
    "parquet_path",
    type=_PATH_OUT,
    help="Write the tidy rows to a Parquet file (needs pyarrow; - for standard output).",
)
@click.option("--compare", is_flag=True, help="Show exactly two reports side by side with B/A ratios.")
@click.option("--domain", default=None, help="Attribute kernels only to NVTX ranges of this domain.")
def analyze(files, plot_path, as_json, csv_path, parquet_path, compare, domain, **view) -> None:
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
    from nsprof.commands.analyze import View
    from nsprof.commands.analyze import analyze as run

    outputs = {"plot_path": plot_path, "as_json": as_json, "csv_path": csv_path, "parquet_path": parquet_path}
    _exit(run(files, View(**view), compare=compare, domain=domain, **outputs))


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
@_option("--reps", help="Measurements per config and mode.")
@click.option(
    "--warmup",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Unmeasured calls per config first.",
)
@_option("--timeout")
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
@_option("--configs")
@_option("--work-dir", help="Keep reports and logs here (default: a temporary folder, named at the end).")
@_option("--json", help="Print the tidy rows as a JSON array.")
@_option(
    "--csv", help="Write the tidy rows to a CSV file (- for standard output, the table then goes to stderr)."
)
@_option("--wait")
@_cluster_options
def profile(target, mode, ids, wait, as_json, csv_path, devices, scheduler, verbose, **choices) -> None:
    """Measure every config of TARGET (file.py:space) under ncu or nsys.

    All configs run in one profiled child process, each inside its own NVTX ranges; a
    config that crashes or hangs is recorded as failed and the rest are still measured.
    Prints per config and mode the median, min and spread over reps of the summed kernel
    durations, with cycles and clock.
    """
    from nsprof.commands import profile as command
    from nsprof.settings import ProfileSettings

    modes = ("direct", "graph") if mode == "both" else (mode,)
    settings = ProfileSettings(modes=modes, wait_gpu=wait, **choices)
    cluster = {"devices": devices, "scheduler": scheduler, "verbose": verbose}
    with _StageBars(width=0) as bars:
        result, failures = command.profile(
            target, settings, ids, as_json=as_json, csv_path=csv_path, on_stage=bars, **cluster
        )
    command.show(target, settings, result, failures, as_json=as_json, csv_path=csv_path)


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
@_option("--reps")
@click.option(
    "--timer-reps", type=click.IntRange(1), default=100, show_default=True, help="Samples per fast timer."
)
@click.option(
    "--repeat/--no-repeat",
    default=True,
    show_default=True,
    help="Run each ground truth twice to measure its own repeatability (the noise floor).",
)
@_option("--timeout")
@_option("--plot", help="Write the agreement plot (png/svg/pdf; - for PNG on standard output).")
@_option(
    "--html",
    help="Write a self-contained report page: the tables and the plot, readable offline (- for "
    "standard output).",
)
@_option("--json", help="Print everything as one JSON object.")
@click.option(
    "--save",
    "save_path",
    type=_PATH_OUT,
    help="Also write that JSON object to a file (- for standard output).",
)
@_option("--work-dir")
@_option("--wait")
@_cluster_options
def validate(target, timers, truth, mode, repeat, devices, scheduler, verbose, **options) -> None:
    """Check fast timers against ncu and nsys over TARGET's configs (file.py:space).

    For every timer against every ground truth: median ratio (bias), Kendall τ and
    Spearman ρ over configs, whether it picks the same best config, and regret (how much
    slower, by ground truth, its pick is). Ends with a verdict: which fast timer tracks
    which ground truth on this kernel.
    """
    from nsprof.commands import validate as command
    from nsprof.commands.common import split
    from nsprof.settings import ValidateSettings

    outputs = {name: options.pop(name) for name in ("plot_path", "html_path", "save_path", "as_json")}
    settings = ValidateSettings(
        timers=split(timers), truths=split(truth), modes=split(mode), repeat_truth=repeat, **options
    )
    command.check(settings, **outputs)
    with _StageBars() as bars:
        cluster = {"devices": devices, "scheduler": scheduler, "verbose": verbose}
        result = command.validate(target, settings, on_stage=bars, **cluster)
    command.show(target, result, **outputs)


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
    default="",
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
@_option("--reps")
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
    "prescreen_top",
    type=click.IntRange(1),
    default=4,
    show_default=True,
    help="How many prescreened configs go to ground truth.",
)
@_option("--timeout")
@_option("--work-dir")
@_option("--store")
@click.option("--no-store", is_flag=True, help="Keep no results store.")
@click.option("--resume", is_flag=True, help="Measure only configs the store has no result for (same key).")
@click.option(
    "--retry-failed",
    is_flag=True,
    help="With --resume, measure failed configs again too (failures that say nothing about the "
    "config, such as a timeout shorter than today's, are retried anyway).",
)
@_option("--wait")
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
@_option("--configs")
@_option("--json", help="Print the ranked table as JSON.")
@_option(
    "--plot",
    help="Write the ranking plot (png/svg/pdf; - for PNG on standard output): each config's value, "
    "best first, the tie set marked.",
)
@_option(
    "--html",
    help="Write a self-contained report page: the ranked table and the plot, readable offline (- for "
    "standard output).",
)
@_cluster_options
def tune(
    target, backend, truth_list, store_path, no_store, ids, devices, scheduler, verbose, **options
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
    from nsprof.commands import tune as command
    from nsprof.settings import TuneSettings

    outputs = {name: options.pop(name) for name in ("plot_path", "html_path", "as_json")}
    truths = command.truth_list(truth_list, backend)
    settings = TuneSettings(
        backend=backend or "ncu", truths=truths, store=store_path, use_store=not no_store, **options
    )
    with _StageBars() as bars:
        cluster = {"devices": devices, "scheduler": scheduler, "verbose": verbose}
        result = command.tune(target, settings, ids, on_stage=bars, **outputs, **cluster)
    _exit(command.show(target, result, **outputs))


@cli.command()
@_option("--store")
@click.option(
    "--export",
    "export_path",
    type=_PATH_OUT,
    default=None,
    help="Write every stored measurement to a .csv, .json or .parquet file (- for CSV on standard output).",
)
def results(store_path, export_path) -> None:
    """List the runs in the results store, or export its measurements."""
    from nsprof.commands.results import results as run

    run(store_path, export_path)


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
@_option("--wait")
def serve(backend, idle_exit_s, wait) -> None:
    """Keep one profiled worker running on GPU 0 for the nsprof commands that follow.

    Holds the GPU's lock while it runs. profile, tune and validate with the same backend then
    send their configs to its worker (NSPROF_SERVE=0 turns that off), which pays the profiler's,
    Python's and CUDA's start-up once. Ends after --idle-exit seconds without a job, on
    SIGTERM/SIGINT (after the current job), or when a job's worker dies or hangs.
    """
    from nsprof.commands.serve import serve as run

    _exit(run(backend, idle_exit_s, wait))


@cli.command()
@click.option("--no-run", is_flag=True, help="Only look for the GPU and tools; run no kernel.")
def doctor(no_run) -> None:
    """Check the GPU, ncu, nsys and counter permissions, and run a tiny kernel under each tool.

    Exit status 0 when at least one ground-truth tool works here, 1 when none does.
    """
    from nsprof.commands.doctor import doctor as run

    _exit(run(run_kernels=not no_run))


def _exit_for_closed_stdout() -> None:
    """The reader of stdout went away (`nsprof analyze ... | head -1`): that is not an error.
    As the Python docs advise, point stdout at devnull so that the flush at exit cannot fail
    again (which would print "Exception ignored" and exit 120), then exit 0."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


def main() -> None:
    from nsprof.session import interrupt_on_termination

    # timeout, Slurm and systemd stop nsprof with SIGTERM, a closed terminal with SIGHUP: act as
    # on Ctrl-C (children stopped, what was measured kept), not die leaving the children running.
    interrupt_on_termination()
    try:
        code = cli.main(prog_name="nsprof", standalone_mode=False)
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
