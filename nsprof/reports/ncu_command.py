"""What an .ncu-rep's recorded ncu command line says: clock_control, cache_control and
graph_profiling as its options set them (`recorded_settings`), read from the file's bytes, since
ncu_report does not expose the command line; `ncu_options` parses one such line."""

from __future__ import annotations

import re
from pathlib import Path

# ncu's options that take no value. Any other option is taken to take one; an option this
# list lacks stops the reading where its value and the program could be confused.
_NCU_FLAGS = frozenset(
    {
        "-h",
        "--help",
        "-v",
        "--version",
        "--nvtx",
        "--call-stack",
        "--support-32bit",
        "-f",
        "--force-overwrite",
        "--open-in-ui",
        "--quiet",
        "--csv",
        "--list-sets",
        "--list-sections",
        "--list-rules",
        "--list-metrics",
        "--list-chips",
        "--query-metrics",
        "--disable-extra-suffixes",
        "--null-stdin",
        "--details-all",
        "--fp",
        "--print-fp",
        "--print-rule-details",
        "--verbose",
        "--lockstep-kernel-launch",
        "--print-metric-attribution",
    }
)
_NCU_VALUE_OPTIONS = frozenset(
    {
        "--metrics",
        "--section",
        "--set",
        "--nvtx-include",
        "--nvtx-exclude",
        "-o",
        "--export",
        "--graph-profiling",
        "--cache-control",
        "--clock-control",
        "-k",
        "--kernel-name",
        "--kernel-id",
        "-c",
        "--launch-count",
        "-s",
        "--launch-skip",
        "--launch-skip-before-match",
        "--target-processes",
        "--target-processes-filter",
        "--replay-mode",
        "--app-replay-buffer",
        "--app-replay-match",
        "--app-replay-mode",
        "--range-replay-options",
        "--mode",
        "--devices",
        "--kernel-name-base",
        "--filter-mode",
        "--range-filter",
        "--section-folder",
        "--section-folder-recursive",
        "--import-source",
        "--source-folders",
        "--config-file",
        "--config-file-path",
        "--log-file",
        "--page",
        "--print-summary",
        "--print-units",
        "--print-nvtx-rename",
        "--print-kernel-base",
        "--apply-rules",
        "--rule",
        "--call-stack-type",
        "--hostname",
        "-p",
        "--port",
        "--max-connections",
        "--check-exit-code",
        "--preload-library",
        "--injection-path-64",
        "--pm-sampling-interval",
        "--pm-sampling-buffer-size",
        "--pm-sampling-max-passes",
        "--warp-sampling-interval",
        "--warp-sampling-max-passes",
        "--warp-sampling-buffer-size",
        "--kill",
        "--resolve-source-file",
    }
)
# What the report's own command line can say about the labels of its rows.
RECORDED_OPTIONS = {
    "--clock-control": "clock_control",
    "--cache-control": "cache_control",
    "--graph-profiling": "graph_profiling",
}
# The ncu command line is one protobuf string near the start of the report (70 KB into the
# fixtures); reading a bounded prefix keeps a multi-GB report cheap.
COMMAND_SCAN_BYTES = 64 * 2**20
_NCU_ARGV0 = re.compile(rb"(?:^|[/\\])ncu(?:\.exe)?\"? ")


def ncu_options(command: str) -> dict[str, str] | None:
    """{option: value} for the RECORDED_OPTIONS given on one ncu command line, before the
    profiled program; None when the text is not an ncu command line with options."""
    import shlex

    try:
        tokens = shlex.split(command)
    except ValueError:  # an unbalanced quote in the program's arguments
        tokens = command.split()
    if not tokens or not re.search(r"(?:^|[/\\])ncu(?:\.exe)?$", tokens[0]):
        return None
    found: dict[str, str] = {}
    index = 1
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("-") or token == "--":
            break  # the profiled program: its own options are not ncu's
        name, equals, value = token.partition("=")
        if equals:
            index += 1
        elif name in _NCU_FLAGS:
            index += 1
            continue
        elif name in _NCU_VALUE_OPTIONS and index + 1 < len(tokens):
            value = tokens[index + 1]
            index += 2
        else:
            # Unknown: a flag or an option with a value; past it the program may begin.
            index += 1
            if index < len(tokens) and not tokens[index].startswith("-"):
                break
            continue
        if name in RECORDED_OPTIONS:
            found[name] = value
    return found


def recorded_settings(path: Path) -> dict:
    """clock_control, cache_control and graph_profiling as the report's ncu command line gives
    them; None for each the command line does not set (ncu's default then applies, unless a
    config file changed it) and for all three when no command line is found ("found": False).

    ncu_report does not expose the command line, so it is read from the file: each printable
    run of bytes that starts with the path of an `ncu` executable.
    """
    import mmap

    settings: dict[str, set[str]] = {key: set() for key in RECORDED_OPTIONS.values()}
    lines = 0
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            end = min(len(data), COMMAND_SCAN_BYTES)
            position = data.find(b"ncu", 0, end)
            while position != -1:
                start = position
                while start > 0 and data[start - 1] >= 0x20 and position - start < 4096:
                    start -= 1
                stop = position
                while stop < len(data) and data[stop] >= 0x20 and stop - position < 65536:
                    stop += 1
                text = bytes(data[start:stop])
                argv0 = _NCU_ARGV0.search(text, 0, position - start + 8)
                if argv0:
                    command = text[_path_start(text, argv0.start()) :].decode("utf-8", "replace")
                    options = ncu_options(command)
                    if options is not None:
                        lines += 1
                        for option, key in RECORDED_OPTIONS.items():
                            settings[key].add(options.get(option, ""))
                position = data.find(b"ncu", max(stop, position + 3), end)
    except (OSError, ValueError):  # unreadable, or empty (mmap of 0 bytes)
        return {"found": False, **{key: None for key in RECORDED_OPTIONS.values()}}
    out: dict = {"found": lines > 0}
    for key, values in settings.items():
        # One value across every recorded command line, or not known.
        out[key] = values.pop() or None if lines and len(values) == 1 else None
    return out


def _path_start(text: bytes, argv0_start: int) -> int:
    """Where the path ending in `ncu` begins: after the last space before it, or the run's start."""
    space = text.rfind(b" ", 0, argv0_start + 1)
    return space + 1 if space != -1 else 0
