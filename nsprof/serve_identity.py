"""What a client must share with an `nsprof serve` to use it (nsprof.serve_client), since the server's
worker measures in the server's environment and runs the code it started with: identity (backend,
driver, tool, Python, nsprof's folder, version and source digest, environment), environment (every
variable as a digest, but a terminal session's: SESSION_VARIABLES, SESSION_PREFIXES), source_digest
(nsprof's own source files), differences (two identities' in words); and serve_enabled:
NSPROF_SERVE=0 in the environment turns serving off for a client.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from nsprof.errors import NsprofError
from nsprof.worker.protocol import AT_START

SERVE_ENV = "NSPROF_SERVE"  # 0/off/no/false: never use a server


def serve_enabled() -> bool:
    value = os.environ.get(SERVE_ENV, "1").strip().lower()
    if value not in ("0", "no", "off", "false", "1", "yes", "on", "true", ""):
        raise NsprofError(
            f"{SERVE_ENV}={value!r} is neither on nor off: set it to 0 (never use an nsprof serve) or 1, or unset it"
        )
    return value not in ("0", "no", "off", "false")


# Variables of a shell or terminal session, not of a measurement: a server started in another terminal
# (or by the tests, with a folder of its own for its temporary files) may differ in these.
SESSION_VARIABLES = frozenset(
    {
        "_",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "TERM",
        "COLORTERM",
        "TERM_PROGRAM",
        "TERM_PROGRAM_VERSION",
        "TERM_SESSION_ID",
        "TMUX",
        "TMUX_PANE",
        "STY",
        "WINDOW",
        "WINDOWID",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "GPG_TTY",
        "DISPLAY",
        "XAUTHORITY",
        "LINES",
        "COLUMNS",
        "PS1",
        "PS2",
        "PS4",
        "PROMPT_COMMAND",
        "HISTFILE",
        "HISTSIZE",
        "HISTFILESIZE",
        "HISTCONTROL",
        "LS_COLORS",
        "LESSOPEN",
        "LESSCLOSE",
        "MAIL",
        "XDG_SESSION_ID",
        "XDG_VTNR",
        "WT_SESSION",
        "TMPDIR",
        "TMP",
        "TEMP",
        "PYTEST_CURRENT_TEST",
        SERVE_ENV,
    }
)
SESSION_PREFIXES = ("VSCODE_", "KITTY_", "ITERM_", "KONSOLE_", "GNOME_TERMINAL_", "VTE_")


def session_variable(name: str) -> bool:
    """Whether variable `name` is a terminal session's, which may differ between a server and its clients."""
    return name in SESSION_VARIABLES or name.startswith(SESSION_PREFIXES)


def _start_environment() -> dict[str, str]:
    """This process's environment as it started (Linux: /proc/self/environ), before a target imported
    here (the CLI loads it) set variables of its own, which its import in a worker sets again; else
    os.environ."""
    try:
        data = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    pairs = (entry.partition(b"=") for entry in data.split(b"\0") if b"=" in entry)
    return {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}


def environment() -> dict[str, str]:
    """The environment a served worker measures in, as {name: a digest of its value} (no values in the
    state file): the server's worker runs in the server's environment, not the client's, so every
    variable that a target, Python, CUDA or the profiler may read must be the same (CUDA_VISIBLE_DEVICES,
    PYTHONPATH, LD_LIBRARY_PATH, the target's own); only a terminal session's variables may differ.
    Default: this process's environment as it started (_start_environment)."""
    # What a process reads only as it starts (CUDA, the loader, Python, torch's allocator) is what a
    # served job cannot be given: those as a worker started now would get them, less what a target's
    # import here set (the CLI loads it; the worker's own import sets it again: TileLang's PYTHONPATH);
    # the rest as this process started, since a served job gets this process's environment as it is
    # now (the request's "environ").
    from nsprof.host.gpu import PCI_ORDER
    from nsprof.space import environ_before_targets

    environ = {name: value for name, value in _start_environment().items() if not name.startswith(AT_START)}
    environ.update(
        {name: value for name, value in environ_before_targets().items() if name.startswith(AT_START)}
    )
    environ["CUDA_DEVICE_ORDER"] = PCI_ORDER  # every worker's (host.gpu.child_environ)
    return {
        name: hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()[:16]
        for name, value in sorted(environ.items())
        if not session_variable(name)
    }


def source_digest(package: Path) -> str:
    """A digest of nsprof's own source files: a server started before nsprof was edited (a checkout
    worked on, the same version number) runs the old worker code."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"unreadable")
    return digest.hexdigest()[:16]


def identity(driver, settings) -> dict:
    """What a client must share with a server to use it."""
    import nsprof

    package = Path(nsprof.__file__).resolve().parent
    return {
        "backend": settings.backend,
        **driver.serve_identity(),
        "python": settings.python,
        "nsprof": str(package),
        "version": nsprof.__version__,
        "source": source_digest(package),
        "environment": environment(),
    }


def differences(theirs: dict, mine: dict) -> list[str]:
    """How a server's identity differs from this client's, in words (environment: the variables' names)."""
    differ = []
    for key, value in mine.items():
        if key == "environment":
            other = theirs.get(key) if isinstance(theirs.get(key), dict) else {}
            names = sorted(n for n in set(value) | set(other) if value.get(n) != other.get(n))
            if names:
                shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
                differ.append(f"environment differs in {shown}")
        elif theirs.get(key) != value:
            differ.append(f"{key} {theirs.get(key)!r}, not {value!r}")
    return differ
