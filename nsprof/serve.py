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
the state, whether a job runs, and while one does how many requests wait) or {"op": "job", "job", "status", "report_base", "cwd" (the four
absolute paths; cwd: the client's folder, where the worker runs the job), "environ" (the client's
environment, the job's), "timeout_s", "phase_bound_s", "wait"}; the server answers {"queued": true} while another job runs (only with
"wait"; without it {"ok": false, "busy": true}), {"started": true} when the job starts, and at the
end {"ok": true} or {"ok": false, "fault": "crash"|"timeout"|"stalled"|"tool"|"abort"|"closing",
"config": id or null, "reason": one line}, a crash's with "kind" too (nsprof.schema.FAILURE_KINDS, as the
server's driver read it from the log). While its job runs, a client sends {"op": "stop"} (Ctrl-C), or
closes its connection: the job stops before its next config, answered {"ok": true, "stopped": true}. A
client's own GPU work between its jobs (its tuner's pick, the feed-back) asks {"op": "lease", "timeout_s",
"wait"}: queued as a job is, then {"leased": true}, and no job runs until the client closes the connection
or timeout_s passed.

Faults are kept simple: when a job goes wrong (the worker died, a config ran past its timeout,
the worker stalled, nsys failed) the server answers, then ends itself (nsys shutdown, its files
removed, the lock released); the client keeps the whole configs the report holds and measures
the rest standalone (nsprof.session). A job whose target does not load ("abort") ends nothing.
With no job for --idle-exit seconds, or on SIGTERM/SIGINT/SIGHUP (after the current job), the
server ends the same way and exits 0. If the server is SIGKILLed, the profiler dies by the
parent-death signal, the worker by its death pipe, and clients find a dead pid (they remove
the stale files) and run standalone.

A client uses a server only when its state names the same backend, driver, tool, Python,
nsprof and environment (nsprof.serve_identity.identity); NSPROF_SERVE=0 in the environment turns
serving off for a client.

This module holds serve() and the server itself (its loop, the clients answered while a job runs, its
end); the server's start is nsprof.serve_start's, a job's run nsprof.serve_jobs'.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from nsprof.errors import NsprofError
from nsprof.serve_client import DEFAULT_IDLE_EXIT_S, POLL_S
from nsprof.serve_files import check_folder, read_or_empty, receive_line, send_line, serve_paths
from nsprof.serve_jobs import JobRunning, missing
from nsprof.serve_start import Starting

EXIT_FAULT = 1  # the server's exit status when a job's fault ended it
REQUEST_TIMEOUT_S = 5.0  # reading a client's request line


class _Server(Starting, JobRunning):
    """One server's run, start (Starting) to end; its jobs run through JobRunning."""

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
        self.now = False  # a second signal came: end without waiting for a client's lease
        self.fault: str | None = None  # why a job's fault ends the server
        self.state: dict = {}

    def note(self, text: str) -> None:
        from nsprof.host.children import note

        note(self.log, text)

    def say(self, text: str) -> None:
        with contextlib.suppress(OSError):  # a terminal hung up (SIGHUP): the server still ends in order
            print(f"nsprof serve: {text}", file=sys.stderr, flush=True)

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
            if request is None or request.get("op") not in ("job", "lease"):
                if request is not None and request.get("op") == "ping":
                    send_line(conn, {**self.state, "busy": False})
                conn.close()
                continue
            missing_fields = missing(request)
            if missing_fields:
                send_line(conn, {"ok": False, "fault": "request", "config": None, "reason": missing_fields})
                conn.close()
                continue
            self.queue.append((conn, request))
            while self.queue and not self.fault and not self.closing:
                self.take(*self.queue.pop(0))
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
        queued = request.get("op") in ("job", "lease")
        if queued and self.closing:  # ending once the lease or job in hand is done: none to queue behind
            send_line(conn, _closing(f"nsprof serve is ending: {self.closing}"))
        elif queued and missing(request):
            send_line(conn, {"ok": False, "fault": "request", "config": None, "reason": missing(request)})
        elif queued and request.get("wait"):
            self.queue.append((conn, request))
            send_line(conn, {"queued": True})
            return
        elif queued:
            send_line(conn, {"ok": False, "busy": True, "reason": "another job is running"})
        elif request.get("op") == "ping":
            send_line(conn, {**self.state, "busy": True, "waiting": len(self.queue)})
        conn.close()

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
            send_line(conn, _closing(f"nsprof serve ended: {why}"))
            conn.close()
        self.queue = []
        if self.proc is not None:
            if self.fifo >= 0 and self.worker_alive():
                with contextlib.suppress(BlockingIOError):  # a FIFO left full: the worker is killed below
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


def _closing(reason: str) -> dict:
    """The answer to a client whose job or lease a server that is ending will not take."""
    return {"ok": False, "fault": "closing", "config": None, "reason": reason}


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
            server.now = server.closing is not None  # a second signal: no more waiting for a lease
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
