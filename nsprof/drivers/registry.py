"""The one map from backend names to drivers. A new backend is a driver file and one line here.

    from nsprof.drivers.registry import get_driver
    driver = get_driver("ncu")  # its tool found, or ToolNotFound in one line

ProfileSettings (below this module) checks its backend against these names through
nsprof.settings.backend_names_from, installed when this module is imported (nsprof's
package import does that).
"""

from __future__ import annotations

import importlib

from nsprof.errors import NsprofError
from nsprof.settings import NO_PROFILER, backend_names_from

# name -> a Driver subclass, or "module:Class" (imported when first asked for)
_DRIVERS: dict[str, object] = {}
_TRUTHS: list[str] = []


def register(name: str, driver, ground_truth: bool = True) -> None:
    """Make `name` a backend: `driver` is a Driver subclass (or "module:Class") whose create()
    gives the driver to run. A ground truth can be profiled, tuned by and validated against."""
    _DRIVERS[name] = driver
    if ground_truth and name not in _TRUTHS:
        _TRUTHS.append(name)


def unregister(name: str) -> None:
    """Forget backend `name` (a test's stand-in, say)."""
    _DRIVERS.pop(name, None)
    if name in _TRUTHS:
        _TRUTHS.remove(name)


def names() -> tuple[str, ...]:
    """Every registered backend name, in registration order."""
    return tuple(_DRIVERS)


def ground_truths() -> tuple[str, ...]:
    """The registered backends that measure under a profiler."""
    return tuple(_TRUTHS)


def driver_class(name: str):
    """The Driver subclass registered as `name`, or an NsprofError listing the names."""
    if name not in _DRIVERS:
        raise NsprofError(f"backend must be one of {names()}")
    entry = _DRIVERS[name]
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        entry = _DRIVERS[name] = getattr(importlib.import_module(module), attribute)
    return entry


def get_driver(name: str):
    """The driver for backend `name`, ready to run (its tool found)."""
    return driver_class(name).create()


register("ncu", "nsprof.drivers.ncu:NcuDriver")
register("nsys", "nsprof.drivers.nsys:NsysDriver")
register(NO_PROFILER, "nsprof.drivers.none:PlainDriver", ground_truth=False)
backend_names_from(names, ground_truths)


def controllable() -> list[str]:
    """The ground truths whose drivers control clocks and caches (and so take a condition)."""
    return [name for name in ground_truths() if driver_class(name).controls_conditions]


def check_condition(backend: str, truth: str) -> None:
    """Truth `truth` names a condition (ncu@free-warm): an NsprofError in one line unless `backend`'s
    driver controls clocks and caches."""
    if not driver_class(backend).controls_conditions:
        raise NsprofError(f"unknown truth {truth!r}: {backend} does not control clocks or caches, so it takes no "
                          f"condition (conditions such as @free-warm are for {', '.join(controllable()) or 'ncu'})")
