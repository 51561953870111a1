"""What several commands share: the target read (on_target), the Dask cluster of --devices/--scheduler,
the progress bars, which one output takes standard output, the --csv/--parquet exports, the --html page and
the --plot file's checks, and the check of a shell-completion request."""

from __future__ import annotations

import contextlib
import os
import sys
from contextlib import contextmanager

import click

from nsprof.errors import NsprofError, OptionError


def on_target(target: str, run, timeout_s: float):
    """run(TARGET's SpaceView), read without importing it here (nsprof.space_view.read_target, its
    import bounded as a worker's start is under `timeout_s`: nsprof.settings.phase_bound). A run
    refused on a saved view found behind the target (TargetChanged: a data file, an environment
    variable, a library the source does not show) runs once more on the target as it is, saying so."""
    from nsprof.errors import TargetChanged
    from nsprof.settings import phase_bound
    from nsprof.space_view import read_target

    say_device_order()
    view = read_target(target, phase_bound(timeout_s))
    try:
        return run(view)
    except TargetChanged:
        behind = view.refreshed()
        if behind is None:
            raise
        fresh, why = behind
        click.echo(
            f"nsprof: {target} changed since nsprof saved its description ({why}): running again", err=True
        )
        return run(fresh)


def say_device_order() -> None:
    """One line where the environment asks CUDA for another device order than nsprof's children get."""
    from nsprof.host.gpu import device_order_note

    note = device_order_note()
    if note:
        click.echo(f"nsprof: {note}", err=True)


def split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def cluster_settings(devices: list[int] | None, scheduler: str | None, verbose: bool):
    """ClusterSettings from --devices (GPU ids), --scheduler and --verbose, connected; or None (one
    GPU, no Dask)."""
    from nsprof.settings import ClusterSettings

    if devices is None and scheduler is None:
        if verbose:
            raise OptionError(
                "--verbose shows the Dask workers' state: it goes with --devices or --scheduler"
            )
        return None
    try:
        settings = ClusterSettings(devices=tuple(devices or ()), scheduler=scheduler, verbose=verbose)
    except NsprofError as exc:
        raise OptionError(str(exc)) from None
    from nsprof.cluster import connect

    connect(settings)  # Dask missing, a scheduler out of reach: one line before any work
    return settings


@contextmanager
def clusters():
    """Closes the Dask clusters the block started, however it ends."""
    try:
        yield
    finally:
        if "nsprof.cluster" in sys.modules:
            from nsprof.cluster import close

            close()


def one_on_stdout(**claims: bool) -> bool:
    """At most one output may take standard output (`-`, or --json); whether one does. The
    printed tables then go to stderr."""
    taken = [option for option, on_stdout in claims.items() if on_stdout]
    if len(taken) > 1:
        raise OptionError(f"{' and '.join(taken)} would both write to standard output; choose one")
    return bool(taken)


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file: through symbolic and hard links when both exist."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet), or a link loop: compare where they would be
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_clobbering(outputs: dict[str, str | os.PathLike | None], inputs: list[tuple[str, object]]) -> None:
    """Refuse, in one line, an output (option -> its file; "-" is standard output, none) that names the
    file of an input ((what it is, its path): the target's source, the store, a report read) or another
    output's: writing it would lose what the command reads, or the other output."""
    named = [(option, path) for option, path in outputs.items() if path and os.fspath(path) != "-"]
    for option, out in named:
        for what, path in inputs:
            if path and os.fspath(path) != "-" and same_file(out, path):
                raise NsprofError(f"{option} {out} would overwrite {what} {path}; choose another file")
    for index, (option, out) in enumerate(named):
        for other, path in named[index + 1 :]:
            if same_file(out, path):
                raise NsprofError(f"{option} {out} and {other} {path} name one file; choose two")


def target_source(target: str) -> str:
    """The source file of TARGET: file.py:space's file, or module:space's as the worker's import finds it
    (looked for, not imported: nsprof's own process imports no target)."""
    from nsprof.errors import TargetError
    from nsprof.space import target_file
    from nsprof.space_source import module_file, split_target

    where = split_target(target)[0]
    try:
        found = target_file(where) or module_file(where)
    except TargetError:  # no such file: nothing to overwrite (loading the target says so, after the options)
        return where
    return str(found) if found is not None else where


def check_plot(path: str | None) -> None:
    """--plot's file and matplotlib, checked before any work."""
    if path:
        from nsprof.render.plot import plot_path, require_matplotlib

        plot_path(path)
        require_matplotlib()


def wrote(path: str) -> None:
    if path != "-":
        click.echo(f"wrote {path}", err=True)


def write_html(path: str, make_page) -> None:
    """Write the report page `make_page()` returns; says so on stderr (and when its plots were left out)."""
    from nsprof.render.html import NO_MATPLOTLIB, write_page

    text = make_page()
    write_page(text, path)
    if NO_MATPLOTLIB in text:
        click.echo(f"nsprof: warning: --html: {NO_MATPLOTLIB}", err=True)
    wrote(path)


def _wrote_rows(frame, path: str) -> None:
    click.echo(f"wrote {len(frame)} rows to {'standard output' if path == '-' else path}", err=True)


def each_written(*writes) -> None:
    """Each of `writes` (callables that write an output file) called whichever fails, then the first
    failure (one line) raised: one output that cannot be written costs no other."""
    failed = []
    for write in writes:
        try:
            write()
        except NsprofError as exc:
            failed.append(exc)
    if failed:
        raise failed[0]


def write_exports(frame, csv_path: str | None, parquet_path: str | None) -> None:
    """The tidy rows to --csv / --parquet files; `-` is standard output. An output that cannot be written
    is one line that names it, and the rows are kept in a file of this user's that the line names."""
    for path, write in ((csv_path, _write_csv), (parquet_path, _write_parquet)):
        if not path:
            continue
        try:
            write(frame, path)
        except BrokenPipeError:
            raise  # standard output's reader left (| head): nsprof's quiet exit, not a failure
        except OSError as exc:
            raise NsprofError(f"writing {path} failed: {exc.strerror or exc}; {_kept(frame)}") from None
        except NsprofError as exc:
            raise NsprofError(f"{exc}; {_kept(frame)}") from None
        _wrote_rows(frame, path)


def csv_on_stdout(frame) -> None:
    """`frame` as CSV on standard output, which a terminal shows: each text cell as the tables show it, its
    control characters escaped (printable); a CSV file holds the text as it is."""
    from nsprof.errors import printable

    def shown(value):
        return printable(value) if isinstance(value, str) else value

    texts = {
        column: frame[column].map(shown) for column in frame.columns if frame[column].dtype.kind in "OSUT"
    }
    frame.assign(**texts).to_csv(sys.stdout, index=False)  # Series.map: DataFrame.map is pandas 2.1's
    sys.stdout.flush()


def _write_csv(frame, path: str) -> None:
    from nsprof.host.owned import written_over

    if path == "-":
        csv_on_stdout(frame)
        return
    with written_over(path) as out:
        frame.to_csv(out, index=False)


def _write_parquet(frame, path: str) -> None:
    from nsprof.host.owned import written_over

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise NsprofError("--parquet needs pyarrow: pip install 'nsprof[parquet]'") from None
    if path == "-":
        frame.to_parquet(sys.stdout.buffer, index=False)
        sys.stdout.buffer.flush()
        return
    with written_over(path) as out:
        frame.to_parquet(out, index=False)


def _kept(frame) -> str:
    """The rows written to a new file of this user's (mode 0600) in the temporary folder: where they are."""
    import tempfile

    fd, name = tempfile.mkstemp(prefix="nsprof-rows-", suffix=".csv")
    try:
        with os.fdopen(fd, "w") as out:
            frame.to_csv(out, index=False)
    except OSError as exc:
        return f"keeping the rows in {name} failed too ({exc.strerror or exc})"
    return f"the rows are in {name}"


class StageBars:
    """One progress bar per stage of a long command, on stderr when it is a terminal; `width` pads the
    stage's name. Called with (name, length), it starts the stage's bar and returns its progress callback.
    Elsewhere (a log, a pipe) there is no bar: click would still print each stage's name there, a line
    that would stand before a command's one-line error."""

    def __init__(self, width: int = 12) -> None:
        self._bar, self._width = None, width

    def __call__(self, name: str, length: int):
        self.close()
        if not sys.stderr.isatty():
            return lambda event, config_id, detail: None
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
            bar, self._bar = self._bar, None
            with contextlib.suppress(OSError):  # a terminal gone (its SIGHUP): the bar takes nothing with it
                bar.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


COMPLETE_VAR = "_NSPROF_COMPLETE"  # click's shell completion (docs/options.md)


def check_completion() -> None:
    """Refuse in one line (NsprofError) a shell-completion request in $_NSPROF_COMPLETE that click would
    answer with a traceback or a silent exit: SHELL_source or SHELL_complete, SHELL one click knows, and for
    _complete the COMP_WORDS and COMP_CWORD its completion script sets (COMP_CWORD a number but for fish)."""
    from click.shell_completion import get_completion_class

    instruction = os.environ.get(COMPLETE_VAR)
    if not instruction:
        return
    shell, _, what = instruction.partition("_")
    if get_completion_class(shell) is None or what not in ("source", "complete"):
        raise NsprofError(
            f"{COMPLETE_VAR}={instruction}: not a completion request; use bash_source, zsh_source or fish_source"
        )
    words, word = os.environ.get("COMP_WORDS"), os.environ.get("COMP_CWORD")
    if what == "complete" and (words is None or word is None):
        raise NsprofError(
            f"{COMPLETE_VAR}={instruction} needs COMP_WORDS and COMP_CWORD, as its script sets them"
        )
    if what == "complete" and shell != "fish" and not word.strip().isdigit():
        raise NsprofError(f"{COMPLETE_VAR}={instruction}: COMP_CWORD={word} is not a word's index")
