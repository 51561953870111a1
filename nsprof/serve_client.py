"""The client's half of `nsprof serve` (the server is nsprof.serve): where a server's files are,
whether one that fits this run is alive, and sending it a job while following the job's status.

The socket speaks JSON lines: a client sends {"op": "ping"} (answer: the server's state and
whether a job runs) or {"op": "job", "job", "status", "report_base", "cwd" (the four
absolute paths; cwd: the client's folder, where the worker runs the job), "environ" (the client's
environment, the job's), "timeout_s", "phase_bound_s", "wait"}; the server answers {"queued": true} while another job runs (only with
"wait"; without it {"ok": false, "busy": true}), {"started": true} when the job starts, and at
the end {"ok": true} or {"ok": false, "fault": "crash"|"timeout"|"stalled"|"tool"|"abort"|"closing",
"config": id or null, "reason": one line}. nsprof.session reads the job's report as a part's.

A client uses a server only when its state names the same backend, driver, tool, Python,
nsprof and environment (identity: every variable but a terminal session's); NSPROF_SERVE=0 in the environment turns serving off for a client.

Only a server of the client's own user is ever used (docs/trust.md): the state file and the socket
lie in a folder of that user's, `<lock dir>/nsprof-serve-<uid>` (serve_paths), mode 0700, which
the client checks (owner, mode, no link) before it reads the state; the state file must be that
user's own regular file (fstat of the file opened with O_NOFOLLOW); and the socket's peer must be of
that user too (SO_PEERCRED, connect), checked before anything is sent, so that a job's request
and the environment in it never reach another user's process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from nsprof.errors import NsprofError
from nsprof.worker.protocol import AT_START

SERVE_ENV = "NSPROF_SERVE"  # 0/off/no/false: never use a server
STATE_SUFFIX = ".serve.json"
SOCKET_SUFFIX = ".serve.sock"
DEFAULT_IDLE_EXIT_S = 600.0
START_BOUND_S = 300.0  # the serving worker's start (the profiler, Python, torch, CUDA)
PING_TIMEOUT_S = 10.0  # a server answers a ping within one poll, or after one `nsys stop` (3 s)
REQUEST_TIMEOUT_S = 5.0  # reading a client's request line
# A client waits this long beyond a job's own bounds (a config's timeout, the phase bound) for the
# server's answer: the server's own bounds, then `nsys stop` (up to 300 s), come first.
SERVE_GRACE_S = 600.0
EXIT_WAIT_S = 180.0  # a client falling back waits this long for the ended server's GPU lock
POLL_S = 0.1


def serve_enabled() -> bool:
    return os.environ.get(SERVE_ENV, "1").strip().lower() not in ("0", "no", "off", "false")


SOCKET_PATH_MAX = (
    100  # a Unix socket's address holds 107 bytes: longer paths go through their folder (unix_address)
)
STATE_LIMIT = 1 << 20


class UntrustedPeer(OSError):
    """A socket whose listening process is another user's: nothing is sent to it."""


def serve_paths(device: int = 0) -> tuple[Path, Path]:
    """(state file, socket) of this user's server of CUDA device `device`'s GPU, in this user's folder beside
    the GPU's lock: one per user (`nsprof-serve-<uid>`), mode 0700 (check_folder)."""
    from nsprof.host.gpu import which_gpu
    from nsprof.host.lock import lock_path

    lock = lock_path(which_gpu(device))
    folder = lock.parent / f"nsprof-serve-{os.geteuid()}"
    # A GPU's UUID alone is 40 characters: the socket is named by a digest of the lock's name, so that its
    # path mostly fits a Unix socket's address (else unix_address goes through its folder).
    digest = hashlib.sha256(lock.stem.encode()).hexdigest()[:8]
    return folder / (lock.stem + STATE_SUFFIX), folder / f"nsprof-{digest}{SOCKET_SUFFIX}"


def check_folder(folder: Path, *, create: bool = False) -> bool:
    """Whether `folder` is there (made, mode 0700, with `create`) as this user's own: a real folder (no
    link), of this user, that nobody else may enter. A folder at its name that is not is refused in one line
    (NsprofError): another user may have made it first, in a folder that all can write."""
    if create:
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)  # the umask may have taken the owner's bits
        except FileExistsError:
            pass
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return False
    mine = os.geteuid()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != mine or st.st_mode & 0o077:
        what = (
            "folder" if stat.S_ISDIR(st.st_mode) else "symbolic link" if stat.S_ISLNK(st.st_mode) else "file"
        )
        raise NsprofError(
            f"nsprof serve's folder {folder} is not this user's own (a {what} of uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):04o}; it must be a folder of uid {mine}, mode 0700): "
            "not used; remove it, or set NSPROF_LOCK_DIR"
        )
    return True


def read_state(path: Path) -> dict:
    """A server's state file, if it is this user's own regular file that nobody else can write (opened
    without following a link); FileNotFoundError where there is none, NsprofError where it is not this
    user's, OSError or ValueError where it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise NsprofError(
                f"nsprof serve's state file {path} is not this user's own (uid {st.st_uid}, "
                f"mode {stat.S_IMODE(st.st_mode):04o}): not used"
            )
        data = os.read(fd, STATE_LIMIT)
    finally:
        os.close(fd)
    state = json.loads(data)
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
    return state


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """The address to bind or connect a Unix socket at `path`: the path itself, or, where it is longer than
    a socket's address holds (a deep lock folder: a long $TMPDIR), a short path to the same file through
    its folder's descriptor (/proc/self/fd/N/name)."""
    if len(os.fsencode(str(path))) <= SOCKET_PATH_MAX:
        yield str(path)
        return
    if not Path("/proc/self/fd").is_dir():
        raise NsprofError(
            f"the socket path {path} is too long for a Unix socket: set NSPROF_LOCK_DIR to a shorter folder"
        )
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def connect(socket_path: str, timeout_s: float):
    """A connection to the server listening at socket_path, within timeout_s, once its peer is known to be
    this user's (SO_PEERCRED: the listening process's uid): UntrustedPeer otherwise, before anything is sent."""
    import socket
    import struct

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout_s)
        with unix_address(Path(socket_path)) as address:
            conn.connect(address)
        pid, uid, _ = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
        if uid != os.geteuid():
            raise UntrustedPeer(
                f"its socket {socket_path} is another user's (uid {uid}, pid {pid}); nothing was sent"
            )
    except BaseException:
        conn.close()
        raise
    return conn


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


def environment(environ=None) -> dict[str, str]:
    """The environment a served worker measures in, as {name: a digest of its value} (no values in the
    state file): the server's worker runs in the server's environment, not the client's, so every
    variable that a target, Python, CUDA or the profiler may read must be the same (CUDA_VISIBLE_DEVICES,
    PYTHONPATH, LD_LIBRARY_PATH, the target's own); only a terminal session's variables may differ.
    Default: this process's environment as it started (_start_environment)."""
    import hashlib

    if environ is None:
        # What a process reads only as it starts (CUDA, the loader, Python, torch's allocator) is what a
        # served job cannot be given: those as a worker started now would get them, less what a target's
        # import here set (the CLI loads it; the worker's own import sets it again: TileLang's PYTHONPATH);
        # the rest as this process started, since a served job gets this process's environment as it is
        # now (the request's "environ").
        from nsprof.space import environ_before_targets

        environ = {
            name: value for name, value in _start_environment().items() if not name.startswith(AT_START)
        }
        environ.update(
            {name: value for name, value in environ_before_targets().items() if name.startswith(AT_START)}
        )
    return {
        name: hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()[:16]
        for name, value in sorted(environ.items())
        if name not in SESSION_VARIABLES and not name.startswith(SESSION_PREFIXES)
    }


def source_digest(package: Path) -> str:
    """A digest of nsprof's own source files: a server started before nsprof was edited (a checkout
    worked on, the same version number) runs the old worker code."""
    import hashlib

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


def _differences(theirs: dict, mine: dict) -> list[str]:
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


def send_line(conn, message: dict) -> bool:
    """Send one JSON line; False when the peer is gone."""
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        return False
    return True


def receive_line(conn, timeout_s: float) -> dict | None:
    """One JSON line from `conn` within timeout_s; None if none came (or it was not JSON)."""

    data = b""
    deadline = time.monotonic() + timeout_s
    try:
        while b"\n" not in data and len(data) < 1 << 20:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            conn.settimeout(left)
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
    except (TimeoutError, OSError):
        return None
    try:
        message = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _ask(socket_path: str, message: dict, timeout_s: float) -> dict:
    """Send one message and read one answer (OSError when there is no answer; UntrustedPeer, before
    sending, when the socket is another user's)."""
    with connect(socket_path, timeout_s) as conn:
        if not send_line(conn, message):
            raise OSError("the server closed the connection")
        answer = receive_line(conn, timeout_s)
    if answer is None:
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    return answer


def _running(pid) -> bool:
    """Alive and not a zombie; False for anything in a state file that is no pid."""
    from nsprof.host.children import pid_alive

    return isinstance(pid, int) and pid > 0 and pid_alive(pid)


def _remove_stale(state_path: Path, state: dict) -> bool:
    """A dead server's files: removed if they still name that server, and only while this client holds
    the GPU lock. A live server holds the lock for its whole life: a pid this process cannot see (a server
    in another pid namespace sharing the lock folder) is no proof of its death, and no new server can write
    its files meanwhile. Whether no server holds the lock (its files are gone)."""
    from nsprof.host.lock import gpu_lock

    try:
        with gpu_lock(0):
            try:
                now = read_state(state_path)
            except (OSError, ValueError, NsprofError):
                return True  # gone already: not that dead server's any more
            if now.get("pid") != state.get("pid"):
                return True  # a new server's, written before this client took the lock: it is dead too
            named = Path(
                str(state.get("socket") or "")
            )  # the socket that server made (an older nsprof named it otherwise)
            mine = [named] if named.name.endswith(SOCKET_SUFFIX) and named.parent == state_path.parent else []
            for path in (state_path, serve_paths()[1], *mine):
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue  # removed already (by another client)
        return True
    except NsprofError:
        return False  # the lock is held (by a server this process cannot see, or a session): its files stay


class Unfit(str):
    """Why a live server of this user does not fit this run (its identity differs), in one line: it never
    will, so what to do is to stop it or start one that fits; waiting for the GPU is waiting for its end."""

    def __new__(cls, state: dict, differ: list[str]):
        self = super().__new__(
            cls, f"nsprof serve (pid {state['pid']}) does not fit this run: its {'; '.join(differ)}"
        )
        self.pid = state["pid"]
        idle = state.get("idle_exit_s")
        self.idle_exit_s = float(idle) if isinstance(idle, (int, float)) and idle > 0 else DEFAULT_IDLE_EXIT_S
        # Another backend, driver or tool: no server started here fits either.
        self.remedy = f"stop it (kill {self.pid})" + (
            " or start `nsprof serve` from this run's environment"
            if all(d.split()[0] in ("environment", "python", "nsprof", "version", "source") for d in differ)
            else ""
        )
        return self

    @property
    def wait_bound_s(self) -> float:
        """How long --wait waits for the GPU behind it: its idle exit, then its end."""
        return self.idle_exit_s + EXIT_WAIT_S

    def refusal(self) -> str:
        return (
            f"{self}, and it holds the GPU; {self.remedy}, or pass --wait to wait for the GPU until it ends "
            f"(after {self.idle_exit_s:g} s without a job)"
        )

    def waiting(self) -> str:
        return (
            f"{self}; {self.remedy}; waiting for the GPU until it ends (after {self.idle_exit_s:g} s "
            f"without a job), at most {self.wait_bound_s:g} s"
        )


def find_server(driver, settings) -> tuple[dict | None, str | None]:
    """(the state of a live server this run can use, None), or (None, why a running server is not used:
    an Unfit where it does not fit this run, or None when there is none). A dead server's files are
    removed."""
    if not serve_enabled() or not driver.serves or not driver.locks_gpu:
        return None, None
    state_path, _ = serve_paths()
    try:
        if not check_folder(state_path.parent):
            return None, None
        state = read_state(state_path)
    except FileNotFoundError:
        return None, None
    except NsprofError as exc:
        return None, str(exc)
    except (OSError, ValueError) as exc:
        return None, f"nsprof serve's state file {state_path} cannot be read ({exc})"
    pid = state.get("pid")
    if not isinstance(pid, int) or not _running(pid):
        _remove_stale(state_path, state)
        return None, None
    theirs, mine = state.get("identity") or {}, identity(driver, settings)
    differ = _differences(theirs, mine)
    if differ:
        return None, Unfit(state, differ)
    try:
        answer = _ask(str(state["socket"]), {"op": "ping"}, PING_TIMEOUT_S)
    except TimeoutError:
        # It took the connection but is in a collection's start or stop (`nsys stop` writes a long job's
        # report before the server answers anyone): busy, and the job request waits in its queue or is
        # refused as busy; the server's own waits are bounded.
        return {**state, "busy": True}, None
    except UntrustedPeer as exc:
        _remove_stale(
            state_path, state
        )  # this user's state naming a socket that is not: no server of its own
        return None, f"nsprof serve (pid {pid}) is not used: {exc}"
    except (OSError, KeyError) as exc:
        if _remove_stale(state_path, state):
            return None, None  # no server holds the lock: its pid was another process's by now
        return None, f"nsprof serve (pid {pid}) did not answer ({exc})"
    return {**state, "busy": bool(answer.get("busy"))}, None


def _vanished(pid: int, why: str) -> dict:
    """The answer of a server that went away (`why`) without one."""
    return {"ok": False, "fault": "vanished", "config": None, "reason": f"nsprof serve (pid {pid}) {why}"}


def submit(state: dict, request: dict, status_file: Path, settings, notify) -> tuple[dict, bool]:
    """Send a job and follow it: (the server's last answer, whether the job started). The status
    file's progress goes to notify as a session's does. A server that vanishes, or stops
    answering past the job's bounds, gives {"ok": False, "fault": "vanished", ...}."""
    import select

    from nsprof.worker.protocol import Progress, parse_status

    pid = state["pid"]
    vanished = functools.partial(_vanished, pid)
    bound = settings.timeout_s + settings.phase_bound_s + SERVE_GRACE_S
    try:
        conn = connect(
            str(state["socket"]), PING_TIMEOUT_S
        )  # its peer this user's: the request holds the environment
    except OSError as exc:
        return vanished(f"could not be reached ({exc})"), False
    started = False
    try:
        try:
            conn.sendall((json.dumps(request) + "\n").encode())
        except OSError as exc:
            return vanished(f"could not be reached ({exc})"), False
        conn.setblocking(False)
        buffer = b""
        progress, seen_lines = Progress(notify), -1
        last_line_at = time.monotonic()
        while True:
            readable, _, _ = select.select([conn], [], [], POLL_S)
            if readable:
                try:
                    chunk = conn.recv(65536)
                except OSError as exc:
                    return vanished(f"closed the connection ({exc})"), started
                if not chunk:
                    return vanished("closed the connection without an answer"), started
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    try:
                        message = json.loads(line)
                    except ValueError:
                        return vanished("answered something else than JSON"), started
                    if message.get("started"):
                        started, last_line_at = True, time.monotonic()
                    elif "ok" in message:
                        progress.tell(parse_status(read_or_empty(status_file)))
                        return message, started
            if started:
                text = read_or_empty(status_file)
                progress.tell(parse_status(text))
                lines = sum(1 for ln in text.splitlines() if not ln.startswith("at "))
                if lines != seen_lines:
                    seen_lines, last_line_at = lines, time.monotonic()
                elif time.monotonic() - last_line_at > bound:
                    return vanished(f"gave no answer and its job no progress for {bound:g} s"), started
            if not _running(pid):
                return vanished("is gone"), started
    finally:
        conn.close()


def read_or_empty(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
