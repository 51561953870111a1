"""The command line's option types and callbacks (nsprof.cli): each turns bad input into one usage line
before anything is measured. regex_option, once_each, ints (CONFIG_IDS, DEVICES), words, Named, OutPath, not_nan."""

from __future__ import annotations

import math
import os
from pathlib import Path

import click


def regex_option(ctx, param, value: str | None) -> str | None:
    """A callback: a regular expression nsprof can use (nsprof.analysis.patterns), or the reason not."""
    if value is not None:
        import regex

        from nsprof.analysis.patterns import compiled

        try:
            compiled(value)
        except regex.error as error:
            raise click.BadParameter(f"not a regular expression: {error}") from None
    return value


def _items(value: str) -> list[str]:
    """The items of a comma-separated list; ValueError where one is empty (`1,,2`, `ncu,`: a slip that
    would otherwise measure less than asked, silently)."""
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise ValueError(value)
    return items


def once_each(option: str, items: list) -> None:
    """A list option names each item once: a config or mode named twice would be measured twice."""
    twice = list(dict.fromkeys(i for i in items if items.count(i) > 1))
    if twice:
        raise click.BadParameter(f"names {', '.join(map(str, twice))} more than once", param_hint=option)


def ints(option: str, message: str, once: bool = False):
    """A callback: the integers separated by commas (with `once`, each once); None when not given."""

    def parse(ctx, param, value: str | None) -> list[int] | None:
        if value is None:
            return None
        try:
            ids = [int(x) for x in _items(value)]
        except ValueError:
            raise click.BadParameter(f"{message} (not {value!r})", param_hint=option) from None
        if once:
            once_each(option, ids)
        return ids

    return parse


def words(option: str):
    """A callback: a comma-separated list of at least one word, each once (kept as the text given)."""

    def parse(ctx, param, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            once_each(option, _items(value))
        except ValueError:
            raise click.BadParameter(
                f"{option} takes one or more names separated by commas (not {value!r})", param_hint=option
            ) from None
        return value

    return parse


def _is_standard_output(value: str) -> bool:
    """Whether `value` names the file standard output is open on (/dev/stdout, /proc/self/fd/1)."""
    try:
        return os.path.samefile(value, "/proc/self/fd/1")
    except (OSError, ValueError):
        return False


class Named(click.Path):
    """A path that names something: an empty one is refused (click takes "" for the current folder, and an
    output option of "" would be skipped as one not given)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            self.fail(
                "an empty name: name a file or folder"
                + (", or - for standard output" if self.allow_dash else ""),
                param,
                ctx,
            )
        return super().convert(value, param, ctx)


class OutPath(Named):
    """An output file: not a folder, and under a folder that exists or can be made (no file on the
    way), checked before anything is measured."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, allow_dash=True)

    def convert(self, value, param, ctx):
        # Path("out/") and Path("out/.") are "out": a file where a folder was meant
        if isinstance(value, str) and value != "-" and os.path.basename(value) in ("", ".", ".."):
            self.fail(f"{value} names a folder: name a file in it", param, ctx)
        value = super().convert(value, param, ctx)
        if value != "-" and _is_standard_output(value):
            return "-"  # /dev/stdout, say: standard output, as "-" (the tables then go to stderr)
        if value != "-":
            folder = Path(value).absolute().parent
            while not folder.exists() and folder != folder.parent:
                folder = folder.parent
            if not folder.is_dir():
                self.fail(f"{value}: {folder} is a file, not a folder", param, ctx)
        return value


def not_nan(ctx, param, value):
    """A callback: a number of seconds that is a number (click's FloatRange lets nan through; inf: never)."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("takes a number of seconds (inf: never)")
    return value


CONFIG_IDS = ints("--configs", "--configs takes integers separated by commas", once=True)
# (a GPU named twice: ClusterSettings says so)
DEVICES = ints("--devices", "--devices takes GPU indices separated by commas, e.g. 0,1")
