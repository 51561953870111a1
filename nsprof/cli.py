"""The `nsprof` command line, a thin click layer over nsprof.commands: the options (`_option`; one
definition of those several commands take, _SHARED; their help texts, nsprof.commands.help), then
each command as its options -> settings (nsprof.settings checks them) -> the command -> what it prints. An
NsprofError becomes one line on stderr and exit status 2; an OptionError a usage error too."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from nsprof import __version__
from nsprof.commands.common import check_completion, split
from nsprof.commands.help import HELP
from nsprof.commands.option_types import CONFIG_IDS, DEVICES, Named, OutPath, not_nan, regex_option, words
from nsprof.drivers import registry
from nsprof.errors import NsprofError, OptionError, error_line
from nsprof.host.children import MAX_WAIT_S
from nsprof.host.redirect import exit_for_closed_stdout
from nsprof.settings import TIMER_BACKENDS, ProfileSettings, TuneSettings, ValidateSettings

EXIT_ERROR = 2


def _version_option():
    return click.version_option(__version__, "-V", "--version", prog_name="nsprof")


class _Command(click.Command):
    """A command that also takes -V/--version; its OptionError is click's usage error (--help hint)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _version_option()(self)

    def invoke(self, ctx: click.Context):
        from nsprof.reports.ncu_cells import csv_engine
        from nsprof.serve_identity import serve_enabled

        try:
            if ctx.info_name != "doctor":  # nsprof's settings in the environment, before a command starts
                csv_engine()
                serve_enabled()
            return super().invoke(ctx)
        except OptionError as exc:
            if exc.option:
                raise click.BadParameter(str(exc), ctx=ctx, param_hint=exc.option) from None
            raise click.UsageError(str(exc), ctx=ctx) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@_version_option()
def cli() -> None:
    """nsprof: ground-truth kernel durations from Nsight Compute (ncu) and Nsight Systems (nsys).

    Runs candidate kernel configs under ncu and nsys, directly and inside CUDA graphs, and
    reads the reports into one table of pure kernel durations, each labelled with how it
    was taken.
    """


cli.command_class = _Command


def _choice(words: str) -> click.Choice:
    return click.Choice(words.split())


class _Registered(click.Choice):
    """The ground truths registered when an option is read (nsprof.drivers.registry), then `more`: a
    driver registered after this module's import is a choice too, and one unregistered is none."""

    def __init__(self, more: tuple = ()) -> None:
        self.more = tuple(more)
        super().__init__(())

    @property
    def choices(self) -> tuple:
        return registry.ground_truths() + self.more

    @choices.setter
    def choices(self, value) -> None:  # click.Choice's own __init__ sets it
        pass


_OUT = OutPath()
# The options several commands take: their one definition (where click puts the value, the rest).
_SHARED = {
    "--wait": (None, {"is_flag": True}),
    "--timeout": (
        "timeout_s",
        {"type": click.FloatRange(1, MAX_WAIT_S), "default": 120, "callback": not_nan},
    ),
    "--reps": (None, {"type": click.IntRange(1), "default": 5}),
    "--work-dir": (None, {"type": Named(file_okay=False, path_type=Path), "default": None}),
    "--configs": ("ids", {"default": None, "callback": CONFIG_IDS}),
    "--store": ("store_path", {"type": Named(dir_okay=False, path_type=Path), "default": None}),
    "--json": ("as_json", {"is_flag": True}),
    "--csv": ("csv_path", {"type": _OUT}),
    "--plot": ("plot_path", {"type": _OUT}),
    "--html": ("html_path", {"type": _OUT}),
    "--devices": (None, {"default": None, "metavar": "IDS", "callback": DEVICES}),
    "--scheduler": (None, {"default": None, "metavar": "ADDRESS"}),
    "--verbose": (None, {"is_flag": True}),
}


def _option(name: str, dest: str | None = None, **attrs):
    """click.option `name`: _SHARED's definition where several commands take it, `attrs` over it,
    the help from nsprof.commands.help; a default is shown in the help."""
    shared_dest, shared = _SHARED.get(name, (None, {}))
    attrs = {**shared, **attrs}
    if attrs.get("default") is not None:
        attrs.setdefault("show_default", True)
    decls = [name] + [d for d in [dest or shared_dest] if d]
    flag = name.partition("/")[0]

    def decorate(command):
        text = HELP.get(f"{command.__name__} {flag}", HELP.get(flag))
        return click.option(*decls, help=text, **attrs)(command)

    return decorate


def _cluster_options(command):
    """--devices, --scheduler and --verbose: spread the configs over several GPUs (nsprof.cluster)."""
    for name in ("--verbose", "--scheduler", "--devices"):
        command = _option(name)(command)
    return command


def _exit(status: int) -> None:
    click.get_current_context().exit(status)


def _take(options: dict, *names: str) -> dict:
    return {name: options.pop(name) for name in names}


_CLUSTER = ("devices", "scheduler", "verbose")


@cli.command()
@click.argument("files", nargs=-1, required=True, type=Named(path_type=Path))
@_option("--kernel", "kernel_re", metavar="REGEX", callback=regex_option)
@_option("--range", "range_re", metavar="REGEX", callback=regex_option)
@_option("--sort", "sort_by", type=_choice("range median total count name"), default="range")
@_option("--reverse", is_flag=True)
@_option("--top", type=click.IntRange(1), default=None, metavar="N")
@_option("--timeunit", type=_choice("ns us ms"), default="us")
@_option("--no-warmup", is_flag=True)
@_option("--names", type=_choice("short demangled"), default="short")
@_option("--wide", is_flag=True)
@_option("--format", "style", type=_choice("table csv json markdown"), default="table")
@_option("--plot", metavar="FILE", default=None)
@_option("--json")
@_option("--csv")
@_option("--parquet", "parquet_path", type=_OUT)
@_option("--compare", is_flag=True)
@_option("--domain", default=None)
@_option("--by", type=_choice("range kernel"), default="range")
def analyze(files, plot_path, as_json, csv_path, parquet_path, compare, domain, **view) -> None:
    """Read ncu CSV, .ncu-rep, nsys .sqlite or .nsys-rep reports and summarise them.

    FILES may be FIFOs or pipes (`<(...)`, /dev/stdin) and `-` for standard input: each is
    read once into a temporary copy (NSPROF_MAX_STREAM_BYTES bounds it, NSPROF_STREAM_WAIT_S
    bounds the wait for data).

    Prints one table per report: per NVTX range (nsprof's per-config ranges pool their reps) and
    kernel, the count, median, min, max, mean, std and CV of the duration, its total and share of
    the report's kernel time (filters keep it), median cycles and clock, empty columns left out.
    --kernel, --range, --no-warmup, --sort, --reverse and --top choose the rows, of --compare too.
    """
    from nsprof.commands import analyze as analyze_command

    outputs = {"plot_path": plot_path, "as_json": as_json, "csv_path": csv_path, "parquet_path": parquet_path}
    chosen = analyze_command.View(**view)
    _exit(analyze_command.analyze(files, chosen, compare=compare, domain=domain, **outputs))


@cli.command()
@click.argument("target")
@_option("--backend", type=_Registered(), default="ncu")
@_option("--mode", type=_choice("direct graph both"), default="both")
@_option("--reps")
@_option("--warmup", type=click.IntRange(0), default=3)
@_option("--timeout")
@_option("--clock-control", type=_choice("base none"), default="base")
@_option("--cache-control", type=_choice("all none"), default="all")
@_option("--graph-profiling", type=_choice("node graph"), default="node")
@_option("--configs")
@_option("--work-dir")
@_option("--json")
@_option("--csv")
@_option("--wait")
@_cluster_options
def profile(target, mode, ids, wait, **choices) -> None:
    """Measure every config of TARGET (file.py:space) under ncu or nsys.

    All configs run in one profiled child process, each inside its own NVTX ranges; a
    config that crashes or hangs is recorded as failed and the rest are still measured.
    Prints per config and mode the median, min and spread over reps of the summed kernel
    durations, with cycles and clock.
    """
    from nsprof.commands import profile as profile_command

    modes = ("direct", "graph") if mode == "both" else (mode,)
    outputs, cluster = _take(choices, "as_json", "csv_path"), _take(choices, *_CLUSTER)
    settings = ProfileSettings(modes=modes, wait_gpu=wait, **choices)
    measured = profile_command.profile(target, settings, ids, **outputs, **cluster)
    profile_command.show(target, settings, *measured, **outputs)


@cli.command()
@click.argument("target")
@_option("--timers", default="event,cupti,graph", callback=words("--timers"))
@_option("--external/--no-external", default=True)
@_option("--truth", default="ncu,nsys", callback=words("--truth"))
@_option("--matched", is_flag=True)
@_option("--l2-check", is_flag=True)
@_option("--mode", default="direct,graph", callback=words("--mode"))
@_option("--reps")
@_option("--timer-reps", type=click.IntRange(1), default=100)
@_option("--repeat/--no-repeat", "repeat_truth", default=True)
@_option("--timeout")
@_option("--plot")
@_option("--html")
@_option("--json")
@_option("--save", "save_path", type=_OUT)
@_option("--work-dir")
@_option("--wait")
@_cluster_options
def validate(target, timers, truth, mode, **options) -> None:
    """Check fast timers against ncu and nsys over TARGET's configs (file.py:space).

    For every timer against every ground truth: median ratio (bias), Kendall τ and
    Spearman ρ over configs, whether it picks the same best config, and regret (how much
    slower, by ground truth, its pick is). Ends with a verdict: which fast timer tracks
    which ground truth on this kernel.
    """
    from nsprof.commands import validate as validate_command

    outputs = _take(options, "plot_path", "html_path", "save_path", "as_json")
    cluster = _take(options, *_CLUSTER)
    settings = ValidateSettings(timers=split(timers), truths=split(truth), modes=split(mode), **options)
    validate_command.check(target, settings, **outputs)
    validate_command.validate(target, settings, outputs=outputs, **cluster)


@cli.command()
@click.argument("target")
@_option("--backend", type=_Registered(tuple(TIMER_BACKENDS)), default=None)
@_option("--truth", "truth_list", metavar="LIST", default=None, callback=words("--truth"))
@_option("--deploy", metavar="TRUTH", default=None)
@_option("--explain/--no-explain", default=True)
@_option("--mode", type=_choice("direct graph"), default="graph")
@_option("--stat", type=_choice("median min"), default="median")
@_option("--reps")
@_option("--max-reps", type=click.IntRange(1), default=None)
@_option("--budget-s", type=click.FloatRange(min=0), default=30)
@_option(
    "--equivalence",
    "equivalence_pct",
    type=click.FloatRange(0, 100, max_open=True),
    default=1.0,
    metavar="PCT",
)
@_option("--prescreen", type=click.Choice(list(TIMER_BACKENDS)), default=None)
@_option("--top", "prescreen_top", type=click.IntRange(1), default=None)
@_option("--timeout")
@_option("--work-dir")
@_option("--store")
@_option("--no-store", is_flag=True)
@_option("--resume", is_flag=True)
@_option("--retry-failed", is_flag=True)
@_option("--wait")
@_option("--feed-back/--no-feed-back", default=True)
@_option("--tuner-pick/--no-tuner-pick", default=True)
@_option("--configs")
@_option("--json")
@_option("--plot")
@_option("--html")
@_cluster_options
def tune(target, backend, truth_list, deploy, store_path, no_store, ids, **options) -> None:
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
    from nsprof.commands import tune as tune_command

    outputs, cluster = _take(options, "plot_path", "html_path", "as_json"), _take(options, *_CLUSTER)
    truths = tune_command.truth_list(truth_list, backend)
    store = {"store": store_path, "use_store": not no_store}
    settings = TuneSettings(backend=backend or "ncu", truths=truths, deploy=deploy or "", **store, **options)
    result = tune_command.tune(target, settings, ids, **outputs, **cluster)
    _exit(tune_command.show(target, result, **outputs))


@cli.command()
@click.argument("store", required=False, type=Named(dir_okay=False, path_type=Path))
@_option("--store")
@_option("--export", "export_path", type=_OUT, default=None)
@_option("--target", metavar="TARGET", default=None)
@_option("--run", "run_id", type=click.IntRange(1), metavar="ID", default=None)
@_option("--json")
@_option("--plot")
@_option("--html")
def results(store, store_path, **options) -> None:
    """List the runs of results store STORE (or --store), export them, rank a stored tune again (--target,
    --run), or read STORE.json saved by tune --json or validate --save; print, plot or page it again, no GPU."""
    from nsprof.commands import results as results_command

    _exit(results_command.results(store, store_path, **options))


@cli.command()
@_option("--backend", type=_Registered(), default="nsys")
@_option(
    "--idle-exit",
    "idle_exit_s",
    type=click.FloatRange(0, MAX_WAIT_S, min_open=True),
    default=600,
    metavar="SECONDS",
    callback=not_nan,
)
@_option("--wait")
def serve(backend, idle_exit_s, wait) -> None:
    """Keep one profiled worker running on GPU 0 for the nsprof commands that follow.

    Holds the GPU's lock while it runs. profile, tune and validate with the same backend then
    send their configs to its worker (NSPROF_SERVE=0 turns that off), which pays the profiler's,
    Python's and CUDA's start-up once. Ends after --idle-exit seconds without a job, on
    SIGTERM/SIGINT (after the current job), or when a job's worker dies or hangs.
    """
    from nsprof.commands import serve as serve_command

    _exit(serve_command.serve(backend, idle_exit_s, wait))


@cli.command()
@_option("--no-run", is_flag=True)
def doctor(no_run) -> None:
    """Check the GPU, ncu, nsys and counter permissions, and run a tiny kernel under each tool.

    Exit status 0 when at least one ground-truth tool works here, 1 when none does.
    """
    from nsprof.commands import doctor as doctor_command

    _exit(doctor_command.doctor(run_kernels=not no_run))


def _null_for_closed_streams() -> None:
    """Started with standard input, output or error closed (`>&-`): Python has None there. /dev/null takes
    that descriptor (else the next file opened would, a report or the store), and what would go there goes
    nowhere."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 - for the process's life


def main(args: list[str] | None = None) -> None:
    """nsprof's command line on `args` (sys.argv[1:] when None): errors as one line and an exit status."""
    from nsprof.host.children import interrupt_on_termination

    # timeout, Slurm and systemd stop nsprof with SIGTERM, a closed terminal with SIGHUP: act as
    # on Ctrl-C (children stopped, what was measured kept), not die leaving the children running.
    interrupt_on_termination()
    _null_for_closed_streams()
    try:
        check_completion()
        code = cli.main(args=args, prog_name="nsprof", standalone_mode=False)
        sys.stdout.flush()  # inside the try: a closed pipe shows on the last flush too
    except SystemExit:
        # click answers a closed pipe (EPIPE) itself with exit status 1, after wrapping
        # stdout in its PacifyFlushWrapper; that wrapper is how the case is recognised.
        if isinstance(sys.stdout, click.utils.PacifyFlushWrapper):
            exit_for_closed_stdout()
        raise
    except NsprofError as exc:
        click.echo(error_line(f"nsprof: error: {exc}"), err=True)
        sys.exit(EXIT_ERROR)
    except click.exceptions.Abort:
        with contextlib.suppress(OSError):  # a terminal gone with its SIGHUP: the exit status says it
            click.echo("nsprof: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (nsprof {exc.ctx.info_name} --help)" if exc.ctx is not None and exc.ctx.parent else ""
        click.echo(error_line(f"nsprof: error: {exc.format_message()}{hint}"), err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except OSError as exc:
        interrupted = isinstance(exc.__context__, KeyboardInterrupt)  # click's newline on Ctrl-C, output gone
        if isinstance(exc, BrokenPipeError):
            exit_for_closed_stdout(130 if interrupted else 0)
        if interrupted:
            sys.exit(130)
        with contextlib.suppress(OSError):  # stderr itself gone: the exit status says it
            click.echo(
                error_line(f"nsprof: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")),
                err=True,
            )
        sys.exit(EXIT_ERROR)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        if os.environ.get("NSPROF_DEBUG"):
            raise
        click.echo(
            error_line(
                f"nsprof: internal error: {type(exc).__name__}: {exc} (set NSPROF_DEBUG=1 for the traceback)"
            ),
            err=True,
        )
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)
