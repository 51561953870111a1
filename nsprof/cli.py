"""The `nsprof` command line: a thin click layer over the library.

Library errors (nsprof.errors.NsprofError) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from nsprof import __version__
from nsprof.errors import NsprofError

EXIT_ERROR = 2


class CliError(click.ClickException):
    exit_code = EXIT_ERROR

    def show(self, file=None) -> None:
        click.echo(f"nsprof: error: {self.format_message()}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsprof")
def cli() -> None:
    """nsprof: ground-truth kernel durations from Nsight Compute (ncu) and Nsight Systems (nsys).

    Runs candidate kernel configs under ncu and nsys, directly and inside CUDA graphs, and
    reads the reports into one table of pure kernel durations, each labelled with how it
    was taken.
    """


def _write_exports(frame, csv_path: str | None, parquet_path: str | None) -> None:
    if csv_path:
        frame.to_csv(csv_path, index=False)
        click.echo(f"wrote {len(frame)} rows to {csv_path}", err=True)
    if parquet_path:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise CliError("--parquet needs pyarrow: pip install 'nsprof[parquet]'") from None
        frame.to_parquet(parquet_path, index=False)
        click.echo(f"wrote {len(frame)} rows to {parquet_path}", err=True)


def _describe(frame) -> str:
    kind = frame.attrs.get("kind", "?")
    notes = [f"{len(frame)} rows", kind]
    if frame["source"].eq("ncu").any():
        clock = frame["clock_control"].dropna().unique().tolist()
        cache = frame["cache_control"].dropna().unique().tolist()
        notes.append("clock control " + (",".join(clock) if clock else "not recorded (ncu's default: base)"))
        notes.append("cache control " + (",".join(cache) if cache else "not recorded (ncu's default: all)"))
    else:
        notes.append("nsys: CUPTI kernel trace at the run's own clocks and cache state")
    return ", ".join(notes)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the tidy rows as a JSON array.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the tidy rows to a CSV file.")
@click.option("--parquet", "parquet_path", type=click.Path(dir_okay=False),
              help="Write the tidy rows to a Parquet file (needs pyarrow).")
@click.option("--compare", is_flag=True, help="Show exactly two reports side by side with B/A ratios.")
@click.option("--domain", default=None, help="Attribute kernels only to NVTX ranges of this domain.")
def analyze(files, as_json, csv_path, parquet_path, compare, domain) -> None:
    """Read ncu CSV, .ncu-rep, nsys .sqlite or .nsys-rep reports and summarise them.

    Prints one table per report: per NVTX range (nsprof's own per-config ranges pool
    their reps) and kernel, the count, median, min, mean, std and coefficient of
    variation of the kernel duration, median cycles and clock.
    """
    import pandas as pd

    from nsprof.analysis import compare as compare_frames
    from nsprof.analysis import format_compare, format_summary, summarize
    from nsprof.reports import read_report

    if compare and len(files) != 2:
        raise click.UsageError("--compare takes exactly two report files")
    frames = []
    for path in files:
        frame = read_report(path, domain=domain)
        for warning in frame.attrs.get("warnings", []):
            click.echo(f"nsprof: warning: {path}: {warning}", err=True)
        frame.insert(0, "file", str(path))
        frames.append(frame)
    tidy = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    _write_exports(tidy, csv_path, parquet_path)
    if as_json:
        click.echo(tidy.to_json(orient="records", force_ascii=False))
        return
    if compare:
        a, b = frames
        click.echo(f"A: {files[0]}  ({_describe(a)})")
        click.echo(f"B: {files[1]}  ({_describe(b)})")
        click.echo(format_compare(compare_frames(a, b), files[0].name, files[1].name))
        return
    for path, frame in zip(files, frames):
        click.echo(f"{path}  ({_describe(frame)})")
        click.echo(format_summary(summarize(frame)))
        if frame["workload"].eq("graph").any():
            click.echo("note: 'graph' rows are whole-graph workloads (ncu --graph-profiling graph): "
                       "not per-kernel durations; for µs kernels they were measured far above the "
                       "kernels' own time (DESIGN.md). Use --graph-profiling node for per-kernel truth.")
        click.echo("")


def main() -> None:
    try:
        cli.main(prog_name="nsprof", standalone_mode=False)
    except NsprofError as exc:
        click.echo(f"nsprof: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except click.exceptions.Abort:
        click.echo("nsprof: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:
        click.echo(f"nsprof: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
        sys.exit(EXIT_ERROR)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        if os.environ.get("NSPROF_DEBUG"):
            raise
        click.echo(f"nsprof: internal error: {type(exc).__name__}: {exc} "
                   "(set NSPROF_DEBUG=1 for the traceback)", err=True)
        sys.exit(EXIT_ERROR)
