"""The exceptions nsprof raises. The CLI turns each into one line and exit status 2."""

from __future__ import annotations


class NsprofError(Exception):
    """Base class: every error a user can cause or fix."""


class ReportError(NsprofError):
    """A report file is missing, empty, corrupt, of another kind, or holds no kernels."""


class ToolNotFound(NsprofError):
    """ncu, nsys or one of their helpers could not be found."""


class ToolFailed(NsprofError):
    """A profiler process ran and failed; the message names its log."""
