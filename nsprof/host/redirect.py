"""This process's own output descriptors, redirected for a while: user code (targets, TileLang,
Triton, compilers) prints from Python and from C alike, and nsprof's results need stdout alone; and
stdout pointed at devnull for good once its reader went away (exit_for_closed_stdout)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


def _flush_c_stdio() -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None)
    except OSError:  # no C library to load by that name (Windows): nothing buffered to flush
        return
    libc.fflush(None)


@contextlib.contextmanager
def redirected(targets: dict[int, int]) -> Iterator[None]:
    """Point each descriptor of `targets` (1, 2) at its target descriptor for the body; C's
    buffered output written meanwhile belongs to the redirect too."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in targets}
    for fd, target in targets.items():
        os.dup2(target, fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _flush_c_stdio()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def results_only_on_stdout() -> contextlib.AbstractContextManager[None]:
    """While user code runs, send what it prints to stderr, so that stdout carries nsprof's
    results alone (`--json` stays parseable)."""
    return redirected({1: 2})


def exit_for_closed_stdout(code: int = 0) -> None:
    """The reader of stdout went away (`nsprof analyze ... | head -1`): that is not an error (`code`
    0; 130 where an interrupt came first). As the Python docs advise, point stdout at devnull so that
    the flush at exit cannot fail again (which would print "Exception ignored" and exit 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(code)
