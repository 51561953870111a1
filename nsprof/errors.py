"""Every exception nsprof raises. The CLI turns each into one line and exit status 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# What a terminal acts on beyond the C0 controls: DEL and C1 (a C1 CSI starts an escape sequence), the
# line separators, and the marks and overrides that reorder the rest of a line (U+202E, say).
ACTIVE = (127, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x2028, 0x202F), *range(0x2066, 0x206A))
# lone surrogates (text from a store or a saved run): no encoding writes them, stdout's would raise
SURROGATES = range(0xD800, 0xE000)
# Control characters shown escaped wherever text from outside nsprof is printed (a config's values, what a
# target raised, a kernel's name): a terminal would act on them (colours, clearing the screen), and a line
# break would start a line of its own. Tabs too: they would shift a table's columns.
CONTROL_ESCAPES = str.maketrans(
    {
        **{c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in (*range(32), *ACTIVE, *SURROGATES)},
        **{ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"},
    }
)
# The same inside JSON text, as JSON's own escapes: they occur only in its strings, where a reader
# takes "\\u202e" for the very character (json.dumps escapes C0 itself).
JSON_ESCAPES = str.maketrans({c: f"\\u{c:04x}" for c in (*ACTIVE, *SURROGATES)})


def printable(text: object) -> str:
    """`text` with its control characters shown escaped (CONTROL_ESCAPES): one line, nothing a terminal acts on."""
    return str(text).translate(CONTROL_ESCAPES)


def error_line(message: object) -> str:
    """`message` as one line of stderr (printable)."""
    return printable(message)


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


class Interrupted(KeyboardInterrupt):
    """An interrupt (Ctrl-C, SIGTERM, SIGHUP) that carries what was ranked before it (`part`): a tune
    without a results store shows it, since nothing else holds it."""

    def __init__(self, part: Any) -> None:
        super().__init__()
        self.part = part


class StoreError(NsprofError):
    """The results store cannot be opened, is not nsprof's, is from a newer nsprof, or a write failed."""


class GpuBusy(NsprofError):
    """Another process holds the GPU's lock (or this one already does)."""

    def __init__(self, message: str, *, device: int, path: Path, holder: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.device = device
        self.path = path
        self.holder = holder
