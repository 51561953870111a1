"""The user's regular expressions (--kernel, --range): `searcher`, a search bounded in time per name.

Python's re has no time limit: an expression that backtracks without end ((a|aa)+$ on a long
name) would hang the command. The expressions are the `regex` module's (re's syntax, its VERSION0),
whose searches take a timeout: one past SEARCH_LIMIT_S is one line naming the option. A report
repeats its names: each name is searched once.
"""

from __future__ import annotations

from collections.abc import Callable

import regex

from nsprof.errors import NsprofError

SEARCH_LIMIT_S = 2.0


def compiled(expression: str):
    """The expression compiled as every search here compiles it (regex.error for a bad one)."""
    return regex.compile(expression, flags=regex.VERSION0)


def searcher(expression: str, option: str) -> Callable[[str], bool]:
    """Whether the expression finds a match in a name (re.search's meaning), as a function of the
    name (regex.error for a bad expression, at once); NsprofError where one name's search runs past
    SEARCH_LIMIT_S."""
    pattern = compiled(expression)
    seen: dict[str, bool] = {}

    def search(name: str) -> bool:
        found = seen.get(name)
        if found is None:
            try:
                found = seen[name] = pattern.search(name, timeout=SEARCH_LIMIT_S) is not None
            except TimeoutError:
                raise NsprofError(
                    f"{option} {expression}: the search ran past {SEARCH_LIMIT_S:g} s on one name of "
                    f"{len(name)} characters (the expression backtracks without end: avoid nested "
                    "repeats such as (a|aa)+)"
                ) from None
        return found

    return search
