"""`nsprof serve`: one profiled worker kept running for the commands that follow (nsprof.serve)."""

from __future__ import annotations


def serve(backend: str, idle_exit_s: float, wait: bool) -> int:
    """Serve until idle, signalled or a job's fault; the exit status."""
    from nsprof.commands.common import say_device_order
    from nsprof.serve import serve as run_server

    say_device_order()
    return run_server(backend, idle_exit_s, wait)
