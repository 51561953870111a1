"""The one map from backend names to drivers. A new backend is a driver file and one line here.

    from nsprof.drivers.registry import get_driver
    driver = get_driver("ncu")  # its tool found, or ToolNotFound in one line

The names themselves are nsprof.truth's (below this module, so that settings check them without
importing the drivers): register() adds one there, and the built-in ones are checked against
truth.BUILTIN_BACKENDS here.
"""

from __future__ import annotations

import importlib

from nsprof import truth
from nsprof.errors import NsprofError
from nsprof.truth import NO_PROFILER

# name -> a Driver subclass, or "module:Class" (imported when first asked for)
_DRIVERS: dict[str, object] = {
    "ncu": "nsprof.drivers.ncu:NcuDriver",
    "nsys": "nsprof.drivers.nsys:NsysDriver",
    NO_PROFILER: "nsprof.drivers.none:PlainDriver",
}
if set(_DRIVERS) != set(truth.BUILTIN_BACKENDS):
    raise ImportError(
        f"the driver registry's built-in backends {sorted(_DRIVERS)} are not nsprof.truth's "
        f"{sorted(truth.BUILTIN_BACKENDS)}"
    )


def register(name: str, driver, ground_truth: bool = True) -> None:
    """Make `name` a backend: `driver` is a Driver subclass (or "module:Class") whose create()
    gives the driver to run. A ground truth can be profiled, tuned by and validated against."""
    _DRIVERS[name] = driver
    truth.add_backend(name, ground_truth, driver_class(name).controls_conditions)


def unregister(name: str) -> None:
    """Forget backend `name` (a test's stand-in, say)."""
    _DRIVERS.pop(name, None)
    truth.remove_backend(name)


names = truth.backends  # every backend name, in registration order
ground_truths = truth.ground_truths  # the backends that measure under a profiler


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
