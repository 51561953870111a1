"""`nsprof serve`: one long-lived profiled worker that several nsprof commands share (nsys only).

The server holds GPU 0's lock for its whole life, starts the serving worker once under the
profiler (Driver.serve_command: `nsys launch`, nsprof.worker.serving), and then runs one job at a
time: it starts a collection into the client's report base (Driver.serve_start: `nsys start`),
hands the job to the worker, follows the job's status file in the session's own loop and bounds
(nsprof.session.supervise.follow: a config's --timeout, the phase bound outside configs), ends the collection (Driver.serve_stop:
`nsys stop`, which writes the report) and answers the client. The client reads the report with
its own driver (finish, read), exactly as a standalone session reads a part.

Files, in this user's own folder beside the GPU lock (nsprof.host.lock.lock_dir), `nsprof-serve-<uid>`
(mode 0700; one that another user made first is refused in one line): `<lock name>.serve.json` (the
state, mode 0600: pids, backend, tool, what a client must share with it, the socket; written as a
temporary file of mkstemp's, renamed) and `nsprof-<8 hex of the lock name>.serve.sock` (a Unix socket,
mode 0600; through a short path to its folder where its own is too long for a socket's address). Only a
client of the same user uses it (nsprof.serve_client; docs/trust.md). The socket speaks JSON lines: a client sends {"op": "ping"} (answer:
the state and whether a job runs) or {"op": "job", "job", "status", "report_base", "cwd" (the four
absolute paths; cwd: the client's folder, where the worker runs the job), "environ" (the client's
environment, the job's), "timeout_s", "phase_bound_s", "wait"}; the server answers {"queued": true} while another job runs (only with
"wait"; without it {"ok": false, "busy": true}), {"started": true} when the job starts, and at the
end {"ok": true} or {"ok": false, "fault": "crash"|"timeout"|"stalled"|"tool"|"abort"|"closing",
"config": id or null, "reason": one line}, a crash's with "kind" too (nsprof.schema.FAILURE_KINDS, as the
server's driver read it from the log).

Faults are kept simple: when a job goes wrong (the worker died, a config ran past its timeout,
the worker stalled, nsys failed) the server answers, then ends itself (nsys shutdown, its files
removed, the lock released); the client keeps the whole configs the report holds and measures
the rest standalone (nsprof.session). A job whose target does not load ("abort") ends nothing.
With no job for --idle-exit seconds, or on SIGTERM/SIGINT/SIGHUP (after the current job), the
server ends the same way and exits 0. If the server is SIGKILLed, the profiler dies by the
parent-death signal, the worker by its death pipe, and clients find a dead pid (they remove
the stale files) and run standalone.

A client uses a server only when its state names the same backend, driver, tool, Python,
nsprof and environment (nsprof.serve_client.identity); NSPROF_SERVE=0 in the environment turns
serving off for a client.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from nsprof.errors import NsprofError, ToolFailed
from nsprof.serve_client import (
    DEFAULT_IDLE_EXIT_S,
    POLL_S,
    REQUEST_TIMEOUT_S,
    START_BOUND_S,
    check_folder,
    identity,
    read_or_empty,
    receive_line,
    send_line,
    serve_paths,
    unix_address,
)

EXIT_FAULT = 1  # the server's exit status when a job's fault ended it


JOB_FIELDS = {
    "job": str,
    "status": str,
    "report_base": str,
    "cwd": str,
    "environ": dict,
    "timeout_s": (int, float),
    "phase_bound_s": (int, float),
}
PATH_FIELDS = ("job", "status", "report_base", "cwd")  # absolute: the server's folder is not the client's


def _missing(request: dict) -> str:
    """What a job request lacks, in words ("" when it is whole)."""
    wrong = [name for name, kind in JOB_FIELDS.items() if not isinstance(request.get(name), kind)]
    wrong += [name for name in PATH_FIELDS if name not in wrong and not os.path.isabs(request[name])]
    if "environ" not in wrong and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in request["environ"].items()
    ):
        wrong.append("environ")
    return f"the job request lacks {', '.join(wrong)} (as absolute paths)" if wrong else ""


class _Server:
    def __init__(self, driver, settings, idle_exit_s: float) -> None:
        import tempfile

        self.driver, self.settings, self.idle_exit_s = driver, settings, idle_exit_s
        self.session = f"nsprof-serve-{os.getpid()}"
        self.state_path, self.socket_path = serve_paths()
        self.dir = Path(tempfile.mkdtemp(prefix="nsprof-serve-"))
        self.log_path = self.dir / "worker.log"
        self.log = open(self.log_path, "w")
        self.proc = None
        self.worker_pid: int | None = None
        self.fifo = -1
        self.listener = None
        self.jobs = 0
        self.queue: list = []  # (connection, request) of clients waiting for the current job
        self.closing: str | None = None  # the signal that asked the server to end
        self.fault: str | None = None  # why a job's fault ends the server
        self.state: dict = {}

    def note(self, text: str) -> None:
        from nsprof.host.children import note

        note(self.log, text)

    def say(self, text: str) -> None:
        print(f"nsprof serve: {text}", file=sys.stderr, flush=True)

    # -- start

    def start(self, pipe) -> None:
        from nsprof.host.children import launch_child
        from nsprof.worker.serving import JOBS_FIFO, WORKER_INFO, WORKER_STATUS

        # This process holds the GPU lock: any server files left are a dead server's.
        for path in (self.state_path, self.socket_path):
            if path.exists() or path.is_symlink():
                path.unlink()
        (self.dir / WORKER_INFO).write_text(
            json.dumps({"watch_fd": pipe.read_fd, "watch_inode": pipe.inode, "server": os.getpid()})
        )
        os.mkfifo(self.dir / JOBS_FIFO, 0o600)
        (self.dir / WORKER_STATUS).write_text("")
        command = self.driver.serve_command(self.settings, self.dir, self.session)
        self.note(f"serve command: {' '.join(command)}")
        self.proc = launch_child(command, self.log, pipe)
        ready = self._wait_ready()
        self.fifo = os.open(self.dir / JOBS_FIFO, os.O_RDWR)
        self.listener = self._listen()
        import tempfile
        from datetime import datetime

        self.state = {
            "pid": os.getpid(),
            "worker_pid": self.worker_pid,
            "backend": self.settings.backend,
            "tool_version": self.driver.tool_version(),
            "identity": identity(self.driver, self.settings),
            "command": command,
            "session": self.session,
            "device": ready.get("device"),
            "started_unix": time.time(),
            "started": datetime.now().astimezone().isoformat(timespec="seconds"),
            "idle_exit_s": self.idle_exit_s,
            "socket": str(self.socket_path),
            "log": str(self.log_path),
        }
        check_folder(self.state_path.parent)  # still this user's own
        # O_EXCL, mode 0600, a name nobody can guess: never written through a link, never readable by others
        handle, temporary = tempfile.mkstemp(prefix=".state.", suffix=".tmp", dir=self.state_path.parent)
        try:
            with os.fdopen(handle, "w") as out:
                out.write(json.dumps(self.state, indent=1) + "\n")
            os.replace(temporary, self.state_path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _wait_ready(self) -> dict:
        from nsprof.host.children import exit_code
        from nsprof.worker.protocol import parse_status
        from nsprof.worker.serving import WORKER_STATUS

        deadline = time.monotonic() + START_BOUND_S
        while True:
            text = read_or_empty(self.dir / WORKER_STATUS)
            self.worker_pid = parse_status(text).pid
            for line in text.split("\n")[:-1]:  # whole lines only
                if line.startswith("ready "):
                    return json.loads(line[len("ready ") :])
            # A profiler that exits with 0 may have left its worker running on its own (a launcher):
            # then only the worker's own lines, and the bound, say whether it started.
            started = self.worker_pid is not None
            gone = (
                started
                and not self.worker_alive()
                or exit_code(self.proc) is not None
                and (self.proc.returncode != 0 or started)
            )
            if gone:
                raise ToolFailed(
                    f"the serving worker did not start: "
                    f"{self.driver.diagnose(self.log_path, self.proc.returncode)} (log: {self.log_path})"
                )
            if self.closing:
                raise NsprofError(f"{self.closing} while the serving worker started")
            if time.monotonic() > deadline:
                raise ToolFailed(
                    f"the serving worker did not start within {START_BOUND_S:g} s (log: {self.log_path})"
                )
            time.sleep(POLL_S)

    def _listen(self):
        import socket

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        umask = os.umask(0o177)
        try:
            with unix_address(self.socket_path) as address:
                listener.bind(address)
        finally:
            os.umask(umask)
        os.chmod(self.socket_path, 0o600)
        listener.listen(16)
        return listener

    # -- serve

    def worker_alive(self) -> bool:
        from nsprof.host.children import pid_alive

        return pid_alive(self.worker_pid)

    def loop(self) -> int:
        import select

        idle_since = time.monotonic()
        while True:
            if self.closing:
                self.say(f"{self.closing}: ending")
                return 0
            if not self.worker_alive():
                self.fault = "the worker died while no job ran"
                return EXIT_FAULT
            left = self.idle_exit_s - (time.monotonic() - idle_since)
            if left <= 0:
                self.say(f"no job for {self.idle_exit_s:g} s: ending")
                return 0
            readable, _, _ = select.select([self.listener], [], [], min(1.0, left))
            if not readable:
                continue
            conn, _ = self.listener.accept()
            request = receive_line(conn, REQUEST_TIMEOUT_S)
            if request is None or request.get("op") != "job":
                if request is not None and request.get("op") == "ping":
                    send_line(conn, {**self.state, "busy": False})
                conn.close()
                continue
            missing = _missing(request)
            if missing:
                send_line(conn, {"ok": False, "fault": "request", "config": None, "reason": missing})
                conn.close()
                continue
            self.queue.append((conn, request))
            while self.queue and not self.fault and not self.closing:
                self.job(*self.queue.pop(0))
            idle_since = time.monotonic()
            if self.fault:
                return EXIT_FAULT

    def answer_waiting(self, timeout_s: float) -> None:
        """While a job runs: pings are told so, jobs wait in the queue (with "wait") or are refused."""
        import select

        readable, _, _ = select.select([self.listener], [], [], timeout_s)
        if not readable:
            return
        conn, _ = self.listener.accept()
        request = receive_line(conn, REQUEST_TIMEOUT_S) or {}
        if request.get("op") == "job" and _missing(request):
            send_line(conn, {"ok": False, "fault": "request", "config": None, "reason": _missing(request)})
        elif request.get("op") == "job" and request.get("wait"):
            self.queue.append((conn, request))
            send_line(conn, {"queued": True})
            return
        elif request.get("op") == "job":
            send_line(conn, {"ok": False, "busy": True, "reason": "another job is running"})
        elif request.get("op") == "ping":
            send_line(conn, {**self.state, "busy": True})
        conn.close()

    def job(self, conn, request: dict) -> None:
        self.jobs += 1
        try:
            if not send_line(conn, {"started": True, "job": self.jobs}):
                self.note(f"job {self.jobs}: its client is gone; not run")
                return
            answer = self._collect(self.jobs, request)
            if not send_line(conn, answer):
                self.note(f"job {self.jobs}: its client went away before the answer")
        finally:
            conn.close()

    def _collect(self, n: int, request: dict) -> dict:
        base = Path(request["report_base"])
        self.note(f"job {n}: {request['job']}")
        try:
            self.driver.serve_start(self.session, base, self.log)
        except NsprofError as exc:
            self.fault = f"the profiler could not start a collection: {exc}"
            return {"ok": False, "fault": "tool", "config": None, "reason": str(exc)}
        line = (
            json.dumps(
                {
                    "job": request["job"],
                    "n": n,
                    "server": os.getpid(),
                    "cwd": request["cwd"],
                    "environ": request["environ"],
                }
            )
            + "\n"
        )
        data = line.encode()
        while data:  # a line longer than the pipe's atomic size (the client's environment) may go in parts
            data = data[os.write(self.fifo, data) :]
        answer = self._follow(
            n, Path(request["status"]), float(request["timeout_s"]), float(request["phase_bound_s"])
        )
        try:
            self.driver.serve_stop(self.session, base, self.log)
        except NsprofError as exc:
            if answer.get("ok"):
                self.fault = f"the profiler could not end a collection: {exc}"
                return {"ok": False, "fault": "tool", "config": None, "reason": str(exc)}
            self.note(f"job {n}: after its fault, {exc}")
        return answer

    def _job_code(self, n: int) -> int | None:
        from nsprof.worker.serving import WORKER_STATUS

        for line in read_or_empty(self.dir / WORKER_STATUS).split("\n")[:-1]:  # whole lines only
            words = line.split()
            if len(words) == 3 and words[0] == "job" and words[1] == str(n):
                return int(words[2])
        return None

    def _follow(self, n: int, status_file: Path, timeout_s: float, bound_s: float) -> dict:
        """Follow job n until the worker says it is over, or a bound or the worker's death ends it (the
        session's own loop, nsprof.session.supervise.follow); between polls, clients are answered."""
        from nsprof.session.supervise import follow

        def decide(code, status, passed) -> dict | None:
            answer = self._outcome(n, code, status) or self._bound(n, status, passed, timeout_s, bound_s)
            if answer is None:
                self.answer_waiting(POLL_S)
            return answer

        return follow(status_file, timeout_s, bound_s, lambda: self._job_code(n), decide)

    def _outcome(self, n: int, code: int | None, status) -> dict | None:
        """Job n's answer once its end line (`code`) came, or its worker died; None while it runs."""
        from nsprof.host.children import exit_code
        from nsprof.worker.protocol import EXIT_CONTEXT_LOST
        from nsprof.worker.serving import JOB_ABORTED

        if code == 0:
            return {"ok": True}
        if code == JOB_ABORTED:
            return {
                "ok": False,
                "fault": "abort",
                "config": None,
                "reason": status.abort or f"the job could not run (log: {self.log_path})",
            }
        if code is None and self.worker_alive():
            return None
        code = self._job_code(n) if code is None else code
        if code == 0:
            return {"ok": True}
        lost = "lost its CUDA context" if code == EXIT_CONTEXT_LOST else "died"
        self.fault = f"the worker {lost} in job {n}"
        reason = self.driver.crash_reason(self.log_path, exit_code(self.proc))
        return {
            "ok": False,
            "fault": "crash",
            "config": status.current,
            "reason": str(reason),
            "kind": reason.kind,
        }

    def _bound(self, n: int, status, passed: str | None, timeout_s: float, bound_s: float) -> dict | None:
        """Job n's answer when its worker went past a bound (the worker is killed); None otherwise."""
        from nsprof.host.children import kill_pid

        if passed == "timeout":
            kill_pid(self.worker_pid)
            self.fault = f"config {status.current} of job {n} ran past its timeout ({timeout_s:g} s)"
            return {
                "ok": False,
                "fault": "timeout",
                "config": status.current,
                "reason": f"timeout: still running after {timeout_s:g} s",
            }
        if passed == "stalled":
            kill_pid(self.worker_pid)
            self.fault = f"job {n} made no progress for {bound_s:g} s"
            return {"ok": False, "fault": "stalled", "config": None, "reason": self.fault}
        return None

    # -- end

    def end(self, pipe) -> None:
        from nsprof.host.children import kill_group, kill_lock_holders_left, kill_pid, wait_exit

        # Clients must stop finding this server first.
        if self.state and read_or_empty(self.state_path).strip() == json.dumps(self.state, indent=1):
            self.state_path.unlink()  # only this server's own state file
        if self.listener is not None:
            self.listener.close()
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                self.note("its socket was removed already")
        why = self.fault or self.closing or "ending"
        for conn, _ in self.queue:
            send_line(
                conn,
                {"ok": False, "fault": "closing", "config": None, "reason": f"nsprof serve ended: {why}"},
            )
            conn.close()
        self.queue = []
        if self.proc is not None:
            if self.fifo >= 0 and self.worker_alive():
                os.write(self.fifo, b"exit\n")
                deadline = time.monotonic() + 10.0
                while self.worker_alive() and time.monotonic() < deadline:
                    time.sleep(POLL_S)
            try:
                self.driver.serve_shutdown(self.session, self.log)
            except NsprofError as exc:
                self.note(f"shutdown: {exc}")
            if wait_exit(self.proc, 30) is None:
                self.note("the profiler did not exit within 30 s of the shutdown: killed")
            kill_group(self.proc)
            if self.worker_alive():
                kill_pid(self.worker_pid)
            kill_lock_holders_left(self.log)
        if self.fifo >= 0:
            os.close(self.fifo)
        pipe.close()
        self.log.close()
        if self.fault is None:
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)


def serve(backend: str, idle_exit_s: float = DEFAULT_IDLE_EXIT_S, wait: bool = False) -> int:
    """Run a server until it is idle for idle_exit_s, signalled, or a job's fault ends it; its exit status."""
    from nsprof.drivers import registry
    from nsprof.host.children import DeathPipe
    from nsprof.host.lock import gpu_lock
    from nsprof.settings import ProfileSettings

    cls = registry.driver_class(backend)
    if not cls.serves:
        raise NsprofError(cls.serve_refusal)
    if idle_exit_s <= 0:
        raise NsprofError("--idle-exit must be positive")
    settings = ProfileSettings(backend=backend)
    driver = registry.get_driver(backend)
    check_folder(serve_paths()[0].parent, create=True)  # this user's own, before anything starts
    with gpu_lock(0, wait=wait):
        server = _Server(driver, settings, idle_exit_s)

        def close(signum, frame) -> None:
            server.closing = signal.Signals(signum).name

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, close)
        pipe = DeathPipe()
        try:
            try:
                server.start(pipe)
            except BaseException:
                server.fault = server.fault or "it did not start"
                raise
            server.say(
                f"pid {os.getpid()}, worker pid {server.worker_pid} under {backend}; "
                f"listening on {server.socket_path}; ends after {idle_exit_s:g} s without a job"
            )
            code = server.loop()
        finally:
            server.end(pipe)
        if server.fault:
            server.say(f"ended: {server.fault} (log kept: {server.log_path})")
        return code
