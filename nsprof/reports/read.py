"""The one entry point for reading a report: any input (file, stream, `-`), any kind.

The input becomes a file parsers may read again (inputs.local_copy), the registry
(kinds.py) names its kind and reads it, messages name the input as the user gave it, and
warnings say what the report lacks.
"""

from __future__ import annotations

import os
from pathlib import Path

from nsprof.errors import ReportError
from nsprof.reports.inputs import local_copy, shown_name
from nsprof.reports.kinds import BY_NAME, sniff_kind


def read_report(
    path: str | os.PathLike,
    *,
    domain: str | None = None,
    as_rows: bool = False,
    launches: bool = False,
    **labels,
):
    """Read any supported report into the tidy table (see nsprof.schema).

    With `as_rows`, a small plain ncu CSV (without `domain`) comes as a ListTable (nsprof.schema:
    the same table as plain lists, for printing it as a table); any other report as a DataFrame.

    `path` may be a regular file, a FIFO or other stream (read once into a temporary copy),
    or "-" for standard input. `domain` restricts NVTX attribution to one domain; `labels`
    (clock_control, cache_control) label ncu rows whose settings the file itself does not
    record. Warnings (frame.attrs["warnings"]) say what the report lacks and what it costs. With
    `launches`, frame.attrs["launch_configs"] holds each launch's configuration, where the report
    has it (nsprof.reports.launch_config).
    """
    shown = shown_name(path)
    with local_copy(path) as local:
        try:
            kind = sniff_kind(local, shown=shown)
            rows = {"as_rows": True} if as_rows and kind == "ncu-csv" and domain is None else {}
            frame = BY_NAME[kind].read(local, domain=domain, **labels, **rows)
            if launches and "launch_configs" not in frame.attrs:  # an .ncu-rep's reader sets them
                from nsprof.reports.launch_config import read_launch_configs

                frame.attrs["launch_configs"] = read_launch_configs(local, kind)
        except ReportError as exc:
            raise ReportError(_named_as_given(str(exc), local, shown)) from None
    frame.attrs["report"] = os.fspath(path)
    frame.attrs["kind"] = kind
    warnings = list(frame.attrs.get("warnings", []))
    if domain is not None:
        warnings += _domain_warnings(frame, domain)
    frame.attrs["warnings"] = warnings
    return frame


def _named_as_given(message: str, local: Path, shown: str) -> str:
    """A parser's message naming the report as the user gave it: parsers see a temporary
    copy of a stream, and some name a file by its base name only."""
    message = message.replace(str(local), shown)
    for prefix in (str(local), local.name):
        if message.startswith(prefix + ":"):
            return shown + message[len(prefix) :]
    return message


def _domain_warnings(frame, domain: str) -> list[str]:
    """One line when `domain` names no NVTX range of the report (a typo, or the wrong report)."""
    if frame["domain"].eq(domain).any():
        return []
    seen = set()
    for path in frame["nvtx_path"].dropna().unique():
        seen.update(part.split("@", 1)[0] for part in str(path).split(";") if "@" in part)
    known = ", ".join(sorted(seen)) or "none"
    return [
        f"no kernel ran inside an NVTX range of domain {domain!r} (domains here: {known}); "
        "every kernel is '(no range)'"
    ]
