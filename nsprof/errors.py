"""Every exception nsprof raises. The CLI turns each into one line and exit status 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def error_line(message: object) -> str:
    """`message` as one line of stderr: line breaks in it (a path is the user's text) shown escaped."""
    return str(message).replace("\r", "\\r").replace("\n", "\\n")


class NsprofError(Exception):
    """Base class: every error a user can cause or fix."""


class OptionError(NsprofError):
    """Options that do not go together, or a value an option cannot take. The CLI shows it as a
    usage error (pointing at the command's --help), naming `option` when given."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class ReportError(NsprofError):
    """A report file is missing, empty, corrupt, of another kind, or holds no kernels."""


class ToolNotFound(NsprofError):
    """ncu, nsys or one of their helpers could not be found."""


class ToolFailed(NsprofError):
    """A profiler process ran and failed; the message names its log."""


class TargetError(NsprofError):
    """The target could not be found, loaded or built."""


class TargetChanged(TargetError):
    """The target a worker loaded is not the one nsprof read (it was edited meanwhile): nothing of it
    was measured. Never a config's failure, nor a session's that a run may go on without."""


class StoreError(NsprofError):
    """The results store cannot be opened, is not nsprof's, is from a newer nsprof, or a write failed."""


class GpuBusy(NsprofError):
    """Another process holds the GPU's lock (or this one already does)."""

    def __init__(self, message: str, *, device: int, path: Path, holder: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.device = device
        self.path = path
        self.holder = holder
