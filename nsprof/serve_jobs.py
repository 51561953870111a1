"""One job of `nsprof serve`: a job request checked (missing: JOB_FIELDS, PATH_FIELDS), and
JobRunning, the part of nsprof.serve's server that runs a job: the collection started, the job handed
to the serving worker (its FIFO), followed in the session's own loop and bounds
(nsprof.session.supervise.follow; a client that asks to stop it, or goes away, has it stop before its next
config), the collection ended and the client answered; a job's fault
(the worker died, a bound passed, the profiler failed) sets the server's fault, which ends it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from nsprof.errors import NsprofError
from nsprof.serve_client import POLL_S
from nsprof.serve_files import read_or_empty, send_line
from nsprof.serve_identity import session_variable

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


def missing(request: dict) -> str:
    """What a job or lease request lacks, in words ("" when it is whole)."""
    if request.get("op") == "lease":
        bound = request.get("timeout_s")
        ok = isinstance(bound, (int, float)) and not isinstance(bound, bool) and bound > 0
        return "" if ok else "the lease request lacks timeout_s (a positive number)"
    wrong = [name for name, kind in JOB_FIELDS.items() if not isinstance(request.get(name), kind)]
    wrong += [name for name in PATH_FIELDS if name not in wrong and not os.path.isabs(request[name])]
    if "environ" not in wrong and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in request["environ"].items()
    ):
        wrong.append("environ")
    return f"the job request lacks {', '.join(wrong)} (as absolute paths)" if wrong else ""


class JobRunning:
    """The server's job() and lease(); it uses the server's driver, session, log, log_path, dir, fifo,
    proc, worker_pid, worker_alive, listener, closing, now, note, say and answer_waiting (clients
    answered while a job or a lease runs); sets its jobs and fault."""

    def take(self, conn, request: dict) -> None:
        """A queued request's turn: a job, or a lease."""
        (self.lease if request.get("op") == "lease" else self.job)(conn, request)

    def lease(self, conn, request: dict) -> None:
        """A client's own GPU work between its jobs (its tuner's pick, the feed-back: user kernels): no
        job runs until the client closes the connection, or until the lease's bound (timeout_s) passed."""
        import select

        bound = float(request["timeout_s"])
        self.note(f"lease: the GPU is the client's for {bound:g} s at most")
        until = time.monotonic() + bound
        told = False
        try:
            if not send_line(conn, {"leased": True}):
                return
            # A signal to end waits for the lease too: the client's kernels run under this server's GPU
            # lock, which another nsprof would take the moment the server ended.
            while (left := until - time.monotonic()) > 0 and not self.now:
                if self.closing and not told:
                    told = True
                    self.say(
                        f"{self.closing}: ending once its lease ends (at most {left:.0f} s; a second signal ends it now)"
                    )
                readable, _, _ = select.select([conn, self.listener], [], [], min(1.0, left))
                if conn in readable:
                    break  # the client closed it (a byte, or EOF: it is done either way)
                if readable:
                    self.answer_waiting(0)
            self.note("lease: ended")
        finally:
            conn.close()

    def job(self, conn, request: dict) -> None:
        self.jobs += 1
        try:
            if not send_line(conn, {"started": True, "job": self.jobs}):
                self.note(f"job {self.jobs}: its client is gone; not run")
                return
            answer = self._collect(self.jobs, request, conn)
            if not send_line(conn, answer):
                self.note(f"job {self.jobs}: its client went away before the answer")
        finally:
            conn.close()

    def _collect(self, n: int, request: dict, conn) -> dict:
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
                    # what the server's environment holds and the client's no longer does (it removed it
                    # after it started): not the job's, as in a worker the client started itself; a
                    # terminal session's (TMPDIR...), which may differ anyway, stays the server's
                    "unset": sorted(
                        name
                        for name in os.environ
                        if name not in request["environ"] and not session_variable(name)
                    ),
                }
            )
            + "\n"
        )
        self._hand_over(n, line.encode(), float(request["phase_bound_s"]))
        answer = self._follow(
            n, Path(request["status"]), float(request["timeout_s"]), float(request["phase_bound_s"]), conn
        )
        try:
            self._answering(lambda: self.driver.serve_stop(self.session, base, self.log))
        except NsprofError as exc:
            if answer.get("ok"):
                self.fault = f"the profiler could not end a collection: {exc}"
                return {"ok": False, "fault": "tool", "config": None, "reason": str(exc)}
            self.note(f"job {n}: after its fault, {exc}")
        return answer

    def _answering(self, step) -> None:
        """step() (the profiler's stop: nsys writes the job's report meanwhile, seconds for a long job), with
        clients answered as during the job: a ping is told the server is busy at once, not silence."""
        import threading

        raised: list[BaseException] = []

        def run() -> None:
            try:
                step()
            except BaseException as exc:  # noqa: BLE001 - raised again in the server's own thread
                raised.append(exc)

        thread = threading.Thread(target=run, name="nsprof-serve-stop", daemon=True)
        thread.start()
        while thread.is_alive():
            self.answer_waiting(POLL_S)
        if raised:
            raise raised[0]

    def _hand_over(self, n: int, data: bytes, bound_s: float) -> None:
        """Job n's line into the jobs FIFO, in parts where it is longer than the pipe holds (the client's
        environment). The server holds the FIFO's read end too, so a worker that died or stopped reading
        would block a plain write for good: it is written as the pipe takes it, while the worker lives, and
        a worker that takes none of it for `bound_s` is killed. Either way the job's follow then finds
        the worker gone and answers."""
        import select

        from nsprof.host.children import kill_pid

        last = time.monotonic()
        while data and self.worker_alive():
            if select.select([], [self.fifo], [], POLL_S)[1]:
                with contextlib.suppress(BlockingIOError):
                    data, last = data[os.write(self.fifo, data) :], time.monotonic()
            elif time.monotonic() - last > bound_s:
                self.note(f"job {n}: its worker took none of the job for {bound_s:g} s: killed")
                kill_pid(self.worker_pid)

    def _job_code(self, n: int) -> int | None:
        from nsprof.worker.serving import WORKER_STATUS

        for line in read_or_empty(self.dir / WORKER_STATUS).split("\n")[:-1]:  # whole lines only
            words = line.split()
            if len(words) == 3 and words[0] == "job" and words[1] == str(n):
                return int(words[2])
        return None

    def _follow(self, n: int, status_file: Path, timeout_s: float, bound_s: float, conn) -> dict:
        """Follow job n until the worker says it is over, or a bound or the worker's death ends it (the
        session's own loop, nsprof.session.supervise.follow); between polls, clients are answered, and the
        job's own client's stop taken."""
        from nsprof.session.supervise import follow
        from nsprof.worker.serving import stop_file

        stop = stop_file(self.dir, n)

        def decide(code, status, passed) -> dict | None:
            self._stop_if_asked(n, conn, stop)
            answer = self._outcome(n, code, status) or self._bound(n, status, passed, timeout_s, bound_s)
            if answer is None:
                self.answer_waiting(POLL_S)
            return answer

        try:
            return follow(status_file, timeout_s, bound_s, lambda: self._job_code(n), decide)
        finally:
            stop.unlink(missing_ok=True)

    def _stop_if_asked(self, n: int, conn, stop: Path) -> None:
        """A client sends nothing while its job runs but its stop (Ctrl-C), and closes the connection when it
        goes: either way it wants no more of the job, which stops before its next config (the worker checks
        `stop`), the configs done kept whole in the report."""
        import select

        if stop.exists() or not select.select([conn], [], [], 0)[0]:
            return
        stop.touch()
        self.note(f"job {n}: its client asked to stop it, or went away: it stops before its next config")

    def _outcome(self, n: int, code: int | None, status) -> dict | None:
        """Job n's answer once its end line (`code`) came, or its worker died; None while it runs."""
        from nsprof.host.children import exit_code
        from nsprof.worker.protocol import EXIT_CONTEXT_LOST, EXIT_STOPPED
        from nsprof.worker.serving import JOB_ABORTED

        if code == 0:
            return {"ok": True}
        if code == EXIT_STOPPED:
            return {"ok": True, "stopped": True}
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
