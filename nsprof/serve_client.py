"""The client's half of `nsprof serve` (the server is nsprof.serve): whether a live server fits this
run (find_server; Unfit where one does not; a dead server's files removed), and sending it a job
while following the job's status (submit). Its files and socket are nsprof.serve_files'; what a
client must share with a server, nsprof.serve_identity's.

The socket speaks JSON lines: a client sends {"op": "ping"} (answer: the server's state and
whether a job runs) or {"op": "job", "job", "status", "report_base", "cwd" (the four
absolute paths; cwd: the client's folder, where the worker runs the job), "environ" (the client's
environment, the job's), "timeout_s", "phase_bound_s", "wait"}; the server answers {"queued": true} while another job runs (only with
"wait"; without it {"ok": false, "busy": true}), {"started": true} when the job starts, and at
the end {"ok": true} or {"ok": false, "fault": "crash"|"timeout"|"stalled"|"tool"|"abort"|"closing",
"config": id or null, "reason": one line}. nsprof.session reads the job's report as a part's.
A lease ({"op": "lease", "timeout_s", "wait"}: lease, holding_server) keeps the server's jobs off
the GPU while the client runs user kernels of its own (its tuner's pick, the feed-back).

A client uses a server only when its state names the same backend, driver, tool, Python,
nsprof and environment (identity: every variable but a terminal session's); NSPROF_SERVE=0 in the environment turns serving off for a client.

Only a server of the client's own user is ever used (docs/trust.md; the checks: nsprof.serve_files).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from pathlib import Path

from nsprof.errors import NsprofError
from nsprof.serve_files import (
    LINE_LIMIT,
    SOCKET_SUFFIX,
    LineReader,
    UntrustedPeer,
    check_folder,
    connect,
    read_or_empty,
    read_state,
    receive_line,
    send_line,
    serve_paths,
)
from nsprof.serve_identity import differences, identity, serve_enabled

DEFAULT_IDLE_EXIT_S = 600.0
PING_TIMEOUT_S = 10.0  # a server answers a ping within one poll, also while `nsys stop` writes a report
# A client waits this long beyond a job's own bounds (a config's timeout, the phase bound) for the
# server's answer: the server's own bounds, then `nsys stop` (up to 300 s), come first.
SERVE_GRACE_S = 600.0
EXIT_WAIT_S = 180.0  # a client falling back waits this long for the ended server's GPU lock
POLL_S = 0.1
REQUEST_ROOM = 1 << 16  # what a job's request holds besides the environment (its paths and bounds)
INTERRUPT_GRACE_S = 15.0  # Ctrl-C mid-job: how long the served job is followed on, to keep what it measured


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


class ServerEnding(NsprofError):
    """The server is ending: it lends the GPU to no one, and lets it go once its job or lease in hand ends."""


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


def _state(state_path: Path) -> tuple[dict | None, str | None]:
    """(this user's server state at state_path, None), or (None, why it cannot be read: None where
    there is none)."""
    try:
        if not check_folder(state_path.parent):
            return None, None
        return read_state(state_path), None
    except FileNotFoundError:
        return None, None
    except NsprofError as exc:
        return None, str(exc)
    except (OSError, ValueError) as exc:
        return None, f"nsprof serve's state file {state_path} cannot be read ({exc})"


def find_server(driver, settings) -> tuple[dict | None, str | None]:
    """(the state of a live server this run can use, None), or (None, why a running server is not used:
    an Unfit where it does not fit this run, or None when there is none). A dead server's files are
    removed."""
    if not serve_enabled() or not driver.serves or not driver.locks_gpu:
        return None, None
    state_path, _ = serve_paths()
    state, why = _state(state_path)
    if state is None:
        return None, why
    pid = state.get("pid")
    if not isinstance(pid, int) or not _running(pid):
        _remove_stale(state_path, state)
        return None, None
    theirs, mine = state.get("identity"), identity(driver, settings)
    theirs = theirs if isinstance(theirs, dict) else {}  # edited by hand: fits nothing
    differ = differences(theirs, mine)
    size = len(json.dumps(dict(os.environ)))  # a job's request carries it
    if size > LINE_LIMIT - REQUEST_ROOM:
        differ.append(
            f"requests hold at most {LINE_LIMIT:,} bytes, and this run's environment alone takes {size:,} "
            "(unset its largest variables to be served)"
        )
    if differ:
        return None, Unfit(state, differ)
    try:
        answer = _ask(str(state["socket"]), {"op": "ping"}, PING_TIMEOUT_S)
    except TimeoutError:
        # It took the connection but answers nothing (in a collection's start, say): busy, and the job
        # request waits in its queue or is refused as busy; the server's own waits are bounded.
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


def _sent(state: dict, request: dict):
    """(the server's connection, non-blocking, with `request` sent; "") or (None, why it could
    not be reached)."""
    try:
        conn = connect(
            str(state["socket"]), PING_TIMEOUT_S
        )  # its peer this user's: the request holds the environment
    except OSError as exc:
        return None, f"could not be reached ({exc})"
    conn.setblocking(False)
    try:
        _send_while_running(conn, (json.dumps(request) + "\n").encode(), state["pid"])
    except OSError as exc:
        conn.close()
        return None, f"could not be reached ({exc})"
    return conn, ""


def _send_while_running(conn, data: bytes, pid) -> None:
    """All of `data` on a non-blocking connection, as the server reads it: a request larger than the socket's
    buffer waits for a server inside a report's stop (bounded there), for SERVE_GRACE_S at most."""
    import select

    deadline = time.monotonic() + SERVE_GRACE_S
    while data:
        if select.select([], [conn], [], POLL_S)[1]:
            with contextlib.suppress(BlockingIOError):
                data = data[conn.send(data) :]
        elif not _running(pid):
            raise ConnectionError("it ended before it read the request")
        elif time.monotonic() > deadline:
            raise TimeoutError(f"it did not take the whole request within {SERVE_GRACE_S:g} s")


class _Job:
    """A sent job followed: `step()` reads what came (the server's lines, the status file's progress) and
    gives the server's last answer once there is one, else None."""

    def __init__(self, conn, pid: int, status_file: Path, bound: float, notify) -> None:
        from nsprof.worker.protocol import Progress

        self.conn, self.pid, self.status_file, self.bound = conn, pid, status_file, bound
        self.progress, self.seen_lines, self.last_line_at = Progress(notify), -1, time.monotonic()
        self.buffer, self.started = b"", False

    def step(self) -> dict | None:
        import select

        from nsprof.worker.protocol import parse_status

        vanished = functools.partial(_vanished, self.pid)
        readable, _, _ = select.select([self.conn], [], [], POLL_S)
        if readable:
            try:
                chunk = self.conn.recv(65536)
            except OSError as exc:
                return vanished(f"closed the connection ({exc})")
            if not chunk:
                return vanished("closed the connection without an answer")
            self.buffer += chunk
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    return vanished("answered something else than JSON")
                if message.get("started"):
                    self.started, self.last_line_at = True, time.monotonic()
                elif "ok" in message:
                    self.progress.tell(parse_status(read_or_empty(self.status_file)))
                    return message
        if self.started:
            text = read_or_empty(self.status_file)
            self.progress.tell(parse_status(text))
            lines = sum(1 for ln in text.splitlines() if not ln.startswith("at "))
            if lines != self.seen_lines:
                self.seen_lines, self.last_line_at = lines, time.monotonic()
            elif time.monotonic() - self.last_line_at > self.bound:
                return vanished(f"gave no answer and its job no progress for {self.bound:g} s")
        return None if _running(self.pid) else vanished("is gone")


def submit(state: dict, request: dict, status_file: Path, settings, notify) -> tuple[dict, bool, bool]:
    """Send a job and follow it: (the server's last answer, whether the job started, whether nsprof was
    interrupted meanwhile). The status file's progress goes to notify as a session's does. A server that
    vanishes, or stops answering past the job's bounds, gives {"ok": False, "fault": "vanished", ...}.

    Ctrl-C (KeyboardInterrupt, SIGTERM) once the job started: the server is asked to stop the job before its
    next config, and the job is followed to that end for INTERRUPT_GRACE_S more, so that what it measured
    can be kept, as a stopped standalone part's is (the third value True: the caller keeps it, then ends as
    interrupted); a second one, or the bound, goes through at once."""
    conn, why = _sent(state, request)
    if conn is None:
        return _vanished(state["pid"], why), False, False
    job = _Job(
        conn, state["pid"], status_file, settings.timeout_s + settings.phase_bound_s + SERVE_GRACE_S, notify
    )
    interrupted = None
    try:
        while True:
            try:
                answer = job.step()
            except KeyboardInterrupt:
                if not job.started or interrupted is not None:
                    raise
                interrupted = time.monotonic()
                with contextlib.suppress(OSError):  # a server gone meanwhile answers nothing either way
                    conn.send(b'{"op": "stop"}\n')
                print(
                    "nsprof: interrupted: the served job stops after its current config (waiting at most "
                    f"{INTERRUPT_GRACE_S:g} s) to keep what it measured; interrupt again to stop now",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            if answer is not None:
                return answer, job.started, interrupted is not None
            if interrupted is not None and time.monotonic() - interrupted > INTERRUPT_GRACE_S:
                raise KeyboardInterrupt
    finally:
        conn.close()


def holding_server(pid) -> dict | None:
    """The state of this user's nsprof serve if its pid is `pid` (the GPU lock's holder), else None."""
    state, _ = _state(serve_paths()[0])  # none readable: the holder is not one to lease from
    return state if state is not None and state.get("pid") == pid else None


@contextlib.contextmanager
def lease(state: dict, timeout_s: float):
    """No job of the server `state` runs while this holds, for at most timeout_s: the client's own
    user kernels (its tuner's pick, the feed-back) get the GPU between jobs. Waits for a running job."""
    where = f"nsprof serve (pid {state.get('pid')})"
    try:
        conn = connect(str(state["socket"]), PING_TIMEOUT_S)
    except (OSError, KeyError) as exc:
        raise NsprofError(f"{where} could not be reached for the GPU ({exc})") from None
    with conn:
        if not send_line(conn, {"op": "lease", "timeout_s": timeout_s, "wait": True}):
            raise NsprofError(f"{where} closed the connection before lending the GPU")
        answers = LineReader(conn)
        answer = answers.next(SERVE_GRACE_S)
        if answer is not None and answer.get("queued"):  # a job runs: wait for its end while the server lives
            answer = answers.next(SERVE_GRACE_S)
            while answer is None and not answers.ended and _running(state.get("pid")):
                answer = answers.next(SERVE_GRACE_S)
        if not (answer or {}).get("leased"):
            reason = (answer or {}).get("reason") or "no answer"
            ending = (answer or {}).get("fault") == "closing"
            raise (ServerEnding if ending else NsprofError)(f"{where} did not lend the GPU: {reason}")
        yield
