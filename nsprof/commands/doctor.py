"""`nsprof doctor`: the checks of nsprof.doctor, one line each."""

from __future__ import annotations

import click

from nsprof.errors import printable


def doctor(run_kernels: bool) -> int:
    """Print each check; the exit status: 0 when at least one ground-truth tool works here."""
    from nsprof.doctor import run_doctor

    checks, available = run_doctor(run_kernels=run_kernels)
    for check in checks:
        mark = "ok  " if check.ok else "--  " if check.optional else "FAIL"
        click.echo(f"[{mark}] {check.name:<9} {printable(check.detail)}")  # what the tools themselves said
    return 0 if available else 1
