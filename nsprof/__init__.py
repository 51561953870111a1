"""nsprof: ground-truth kernel durations from Nsight Compute and Nsight Systems.

Importing this package is deliberately cheap: no torch, no profiler, no subprocess.
The heavy pieces load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "read_report", "summarize"]


def __getattr__(name: str):
    # Lazy re-exports keep `import nsprof` light (pandas loads only when asked for).
    if name == "read_report":
        from nsprof.reports import read_report

        return read_report
    if name == "summarize":
        from nsprof.analysis.summary import summarize

        return summarize
    raise AttributeError(f"module 'nsprof' has no attribute {name!r}")
