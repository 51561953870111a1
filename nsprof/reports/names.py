"""Kernel names: one short form across ncu CSV (demangled), ncu_report and nsys shortName."""

from __future__ import annotations

_OPEN = {"<": ">", "(": ")", "[": "]"}


def short_kernel_name(name: str | None) -> str | None:
    """`void at::foo_kernel<8, T>(int, T2)` -> `foo_kernel`; plain names pass through."""
    if not name or not any(ch in name for ch in "<(: "):
        return name
    depth: list[str] = []
    top = []
    for ch in name:
        if depth:
            if ch == depth[-1]:
                depth.pop()
            elif ch in _OPEN:
                depth.append(_OPEN[ch])
            continue
        if ch in _OPEN:
            depth.append(_OPEN[ch])
            continue
        top.append(ch)
    flat = "".join(top).strip()
    if not flat:
        return name
    last = flat.split()[-1]
    return last.rsplit("::", 1)[-1] or name
