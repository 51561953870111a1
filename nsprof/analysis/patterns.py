"""The user's regular expressions (--kernel, --range): `searcher`, a search bounded in time per name.

Python's re has no time limit: an expression that backtracks without end ((a+)+$ on a long name)
would hang the command. Each search runs under a timer (the main thread's SIGALRM), and one
past SEARCH_LIMIT_S is one line naming the option. A report repeats its names: each name is
searched once.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable

from nsprof.errors import NsprofError

SEARCH_LIMIT_S = 2.0


class _TooLong(Exception):
    pass


def searcher(expression: str, option: str) -> Callable[[str], bool]:
    """Whether re.search(expression, name) finds a match, as a function of the name (re.error for a
    bad expression, at once); NsprofError where one name's search runs past SEARCH_LIMIT_S."""
    pattern = re.compile(expression)
    seen: dict[str, bool] = {}

    def search(name: str) -> bool:
        found = seen.get(name)
        if found is None:
            found = seen[name] = _bounded(pattern, name, option)
        return found

    return search


def _bounded(pattern: re.Pattern, name: str, option: str) -> bool:
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        return pattern.search(name) is not None

    def late(signum, frame):
        raise _TooLong

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, SEARCH_LIMIT_S)
    try:
        return pattern.search(name) is not None
    except _TooLong:
        raise NsprofError(
            f"{option} {pattern.pattern}: the search ran past {SEARCH_LIMIT_S:g} s on one name of "
            f"{len(name)} characters (the expression backtracks without end: avoid nested repeats "
            "such as (a+)+)"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
