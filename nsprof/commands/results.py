"""`nsprof results`: list the runs of the results store, or export its measurements."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nsprof.errors import NsprofError


def results(store_path: Path | None, export_path: str | None) -> None:
    from nsprof.render.tables import format_runs
    from nsprof.store import DEFAULT_PATH, ResultStore

    path = store_path or DEFAULT_PATH
    if not Path(path).exists():
        raise NsprofError(f"no results store at {path} (nsprof tune writes one)")
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
