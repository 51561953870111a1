"""NVTX state as ncu prints it, and the choice of one "innermost" range.

ncu records no times for NVTX ranges, only each domain's push/pop stack and the open
start/end ranges. When several domains have a stack, the innermost range is taken from the
deepest stack (ties: the default domain, whose ranges are usually the user's own, innermost
annotations); push/pop ranges win over start/end ranges. Passing `domain` restricts the
choice to that domain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nsprof.schema import DEFAULT_DOMAIN

# One entry of ncu's CSV NVTX cell: domain:range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg.
# Msg repeats the range name for registered/ASCII messages; the back-reference lets range
# names contain ':' in that case.
_ENTRY_SAME_MSG = re.compile(r"^(?P<domain>[^:]*):(?P<range>.*):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:(?P=range)$")
_ENTRY_ANY = re.compile(r"^(?P<domain>[^:]*):(?P<range>.*?):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:.*$")
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')


@dataclass
class NvtxState:
    push_pop: dict[str, list[str]] = field(default_factory=dict)  # domain -> outer..inner
    start_end: dict[str, list[str]] = field(default_factory=dict)  # domain -> open ranges

    def innermost(self, domain: str | None = None) -> tuple[str | None, str | None]:
        """(range, domain) of the innermost range, or (None, None)."""
        stacks = {d: s for d, s in self.push_pop.items() if s and (domain is None or d == domain)}
        if stacks:
            best = max(stacks, key=lambda d: (len(stacks[d]), d == DEFAULT_DOMAIN))
            return stacks[best][-1], best
        opened = {d: s for d, s in self.start_end.items() if s and (domain is None or d == domain)}
        if opened:
            best = max(opened, key=lambda d: (len(opened[d]), d == DEFAULT_DOMAIN))
            return opened[best][-1], best
        return None, None

    def path(self) -> str | None:
        parts = [f"{d}@{'/'.join(s)}" for d, s in self.push_pop.items() if s]
        parts += [f"{d}@{','.join(s)}" for d, s in self.start_end.items() if s]
        return ";".join(parts) or None


def _split_entry(entry: str) -> tuple[str, str] | None:
    match = _ENTRY_SAME_MSG.match(entry) or _ENTRY_ANY.match(entry)
    if not match:
        return None
    return match["domain"] or DEFAULT_DOMAIN, match["range"]


def parse_csv_cells(push_pop_cell: str | None, start_end_cell: str | None) -> NvtxState:
    """Parse the two NVTX columns of `ncu --csv` (raw or details page).

    Push/pop:  `452  "nsprof:outer:none:...:outer"  "nsprof:cfg0.direct.r0:...:cfg0.direct.r0" `
    (thread id, then one quoted entry per open range, grouped by domain, outer first).
    Start/end: ` "0:<default domain>:startend:none:none:none:none:none:none" ` (id first).
    """
    state = NvtxState()
    for raw in _QUOTED.findall(push_pop_cell or ""):
        parsed = _split_entry(raw.replace('""', '"'))
        if parsed:
            state.push_pop.setdefault(parsed[0], []).append(parsed[1])
    for raw in _QUOTED.findall(start_end_cell or ""):
        entry = raw.replace('""', '"')
        _, _, rest = entry.partition(":")  # drop the range id
        parsed = _split_entry(rest)
        if parsed:
            state.start_end.setdefault(parsed[0], []).append(parsed[1])
    return state


def thread_id(push_pop_cell: str | None) -> int | None:
    head = (push_pop_cell or "").strip().split(" ", 1)[0]
    return int(head) if head.isdigit() else None
