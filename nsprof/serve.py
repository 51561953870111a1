"""`nsprof serve`: one long-lived profiled worker that several nsprof commands share (nsys only).

The server holds GPU 0's lock for its whole life, starts the serving worker once under the
profiler (Driver.serve_command: `nsys launch`, nsprof.worker.serving), and then runs one job at a
time: it starts a collection into the client's report base (Driver.serve_start: `nsys start`),
hands the job to the worker, follows the job's status file with the same bounds as a session
(a config's --timeout, the phase bound outside configs), ends the collection (Driver.serve_stop:
`nsys stop`, which writes the report) and answers the client. The client reads the report with
its own driver (finish, read), exactly as a standalone session reads a part.

Files, next to the GPU lock (nsprof.host.lock.lock_dir): `<lock name>.serve.json` (the state:
pids, backend, tool, what a client must share with it, the socket) and `<lock name>.serve.sock`
(a Unix socket, mode 0600). The socket speaks JSON lines: a client sends {"op": "ping"} (answer:
the state and whether a job runs) or {"op": "job", "job", "status", "report_base", "timeout_s",
"phase_bound_s", "wait"}; the server answers {"queued": true} while another job runs (only with
"wait"; without it {"ok": false, "busy": true}), {"started": true} when the job starts, and at the
end {"ok": true} or {"ok": false, "fault": "crash"|"timeout"|"stalled"|"tool"|"abort"|"closing",
"config": id or null, "reason": one line}.

Faults are kept simple: when a job goes wrong (the worker died, a config ran past its timeout,
the worker stalled, nsys failed) the server answers, then ends itself (nsys shutdown, its files
removed, the lock released); the client keeps the whole configs the report holds and measures
the rest standalone (nsprof.session). A job whose target does not load ("abort") ends nothing.
With no job for --idle-exit seconds, or on SIGTERM/SIGINT/SIGHUP (after the current job), the
server ends the same way and exits 0. If the server is SIGKILLed, the profiler dies by the
parent-death signal, the worker by its death pipe, and clients find a dead pid (they remove
the stale files) and run standalone.

A client uses a server only when its state names the same backend, driver, tool, Python and
nsprof; NSPROF_SERVE=0 in the environment turns serving off for a client.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from nsprof.errors import GpuBusy, NsprofError, ToolFailed

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
EXIT_FAULT = 1  # the server's exit status when a job's fault ended it


def serve_enabled() -> bool:
    return os.environ.get(SERVE_ENV, "1").strip().lower() not in ("0", "no", "off", "false")


def serve_paths(device: int = 0) -> tuple[Path, Path]:
    """(state file, socket) of the server of CUDA device `device`'s GPU, beside its lock file."""
    from nsprof.host.gpu import which_gpu
    from nsprof.host.lock import lock_path

    lock = lock_path(which_gpu(device))
    return lock.with_name(lock.stem + STATE_SUFFIX), lock.with_name(lock.stem + SOCKET_SUFFIX)


def identity(driver, settings) -> dict:
    """What a client must share with a server to use it."""
    import nsprof

    return {"backend": settings.backend, **driver.serve_identity(), "python": settings.python,
            "nsprof": str(Path(nsprof.__file__).resolve().parent), "version": nsprof.__version__}


def _send(conn, message: dict) -> bool:
    """Send one JSON line; False when the peer is gone."""
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        return False
    return True


def _receive(conn, timeout_s: float) -> dict | None:
    """One JSON line from `conn` within timeout_s; None if none came (or it was not JSON)."""
    import socket

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
    except (OSError, socket.timeout):
        return None
    try:
        message = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _ask(socket_path: str, message: dict, timeout_s: float) -> dict:
    """Send one message and read one answer (OSError when there is no answer)."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(socket_path)
        if not _send(conn, message):
            raise OSError("the server closed the connection")
        answer = _receive(conn, timeout_s)
    if answer is None:
        raise OSError(f"no answer within {timeout_s:g} s")
    return answer


# ---------------------------------------------------------------- the client side


def _remove_stale(state_path: Path, state: dict) -> None:
    """A dead server's files: removed if they still name that server."""
    try:
        now = json.loads(state_path.read_text())
    except (OSError, ValueError):
        return
    if now.get("pid") != state.get("pid"):
        return  # a new server wrote its own meanwhile
    for path in (state_path, Path(str(state.get("socket") or ""))):
        if str(path):
            try:
                path.unlink()
            except FileNotFoundError:
                continue


def find_server(driver, settings) -> tuple[dict | None, str | None]:
    """(the state of a live server this run can use, None), or (None, why a running server does not
    fit, or None when there is none). A dead server's files are removed."""
    from nsprof.session import _alive

    if not serve_enabled() or not driver.serves or not driver.locks_gpu:
        return None, None
    state_path, _ = serve_paths()
    try:
        state = json.loads(state_path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"nsprof serve's state file {state_path} cannot be read ({exc})"
    pid = state.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        _remove_stale(state_path, state)
        return None, None
    theirs, mine = state.get("identity") or {}, identity(driver, settings)
    differ = [f"{key} {theirs.get(key)!r}, not {value!r}" for key, value in mine.items() if theirs.get(key) != value]
    if differ:
        return None, f"nsprof serve (pid {pid}) does not fit this run: its {'; '.join(differ)}"
    try:
        answer = _ask(str(state["socket"]), {"op": "ping"}, PING_TIMEOUT_S)
    except (OSError, KeyError) as exc:
        return None, f"nsprof serve (pid {pid}) did not answer ({exc})"
    return {**state, "busy": bool(answer.get("busy"))}, None


def _submit(state: dict, request: dict, status_file: Path, settings, notify) -> tuple[dict, bool]:
    """Send a job and follow it: (the server's last answer, whether the job started). The status
    file's progress goes to notify as a session's does. A server that vanishes, or stops
    answering past the job's bounds, gives {"ok": False, "fault": "vanished", ...}."""
    import select
    import socket

    from nsprof.session import _alive
    from nsprof.worker.protocol import RunStatus, parse_status

    pid = state["pid"]

    def vanished(why: str) -> dict:
        return {"ok": False, "fault": "vanished", "config": None, "reason": f"nsprof serve (pid {pid}) {why}"}

    bound = settings.timeout_s + settings.phase_bound_s + SERVE_GRACE_S
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    started = False
    try:
        try:
            conn.settimeout(PING_TIMEOUT_S)
            conn.connect(str(state["socket"]))
            conn.sendall((json.dumps(request) + "\n").encode())
        except OSError as exc:
            return vanished(f"could not be reached ({exc})"), False
        conn.setblocking(False)
        buffer = b""
        seen, seen_lines = RunStatus(), -1
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
                        _progress(status_file, seen, notify)
                        return message, started
            if started:
                text = _read(status_file)
                seen = _progress(status_file, seen, notify, text)
                lines = sum(1 for ln in text.splitlines() if not ln.startswith("at "))
                if lines != seen_lines:
                    seen_lines, last_line_at = lines, time.monotonic()
                elif time.monotonic() - last_line_at > bound:
                    return vanished(f"gave no answer and its job no progress for {bound:g} s"), started
            if not _alive(pid):
                return vanished("is gone"), started
    finally:
        conn.close()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _progress(status_file: Path, seen, notify, text: str | None = None):
    """Notify what the status file says beyond `seen`; the status now."""
    from nsprof.worker.protocol import parse_status

    status = parse_status(_read(status_file) if text is None else text)
    for cfg in status.done[len(seen.done):]:
        notify("done", cfg, "")
    for cfg in status.failed:
        if cfg not in seen.failed:
            notify("fail", cfg, status.failed[cfg])
    return status


def run_served(state: dict, driver, target: str, n_configs: int, settings, config_ids, on_progress, job_extra,
               on_rows, work_dir: Path, points):
    """A session through the server of `state` (nsprof.session.run_session found it): one job, read
    as a session reads a part; what a fault left unmeasured is measured standalone, under the GPU
    lock once the server has released it. Returns nsprof.session.Measured."""
    import pandas as pd

    from nsprof import session as ses
    from nsprof.host.lock import gpu_lock
    from nsprof.reports.checks import one_line
    from nsprof.schema import make_frame
    from nsprof.worker.protocol import Job

    ids = list(config_ids if config_ids is not None else range(n_configs))
    notify = on_progress or (lambda event, cfg, detail: None)
    hand_over = on_rows or (lambda frame: None)
    shapes = {"n_configs": points.n_configs, "n_shapes": points.n_shapes} if points.shaped else {}
    began = time.monotonic()
    base = work_dir / "served"
    status_file = base.with_suffix(".status")
    status_file.write_text("")
    log = base.with_suffix(".log")
    log.write_text(f"==NSPROF== measured by nsprof serve (pid {state['pid']}, worker pid {state.get('worker_pid')}); "
                   f"the worker's log: {state.get('log')}\n")
    job = Job(target=target, config_ids=ids, status=str(status_file), modes=list(settings.modes),
              reps=settings.reps, warmup=settings.warmup, **shapes, **(job_extra or {}))
    job_file = job.write(base.with_suffix(".job.json"))
    request = {"op": "job", "job": str(job_file), "status": str(status_file), "report_base": str(base),
               "timeout_s": settings.timeout_s, "phase_bound_s": settings.phase_bound_s, "wait": settings.wait_gpu}
    answer, started = _submit(state, request, status_file, settings, notify)
    answered = time.monotonic()
    if answer.get("busy"):
        raise GpuBusy(f"nsprof serve (pid {state['pid']}) is measuring another job on this GPU; wait for it or "
                      "pass --wait", device=0, path=Path(state.get("socket", "")), holder={"pid": state["pid"]})
    fault = None if answer.get("ok") else answer.get("fault") or "vanished"
    status = ses.parse_status(_read(status_file))
    if fault == "abort" or status.abort:
        raise ToolFailed(f"the profiled worker measured nothing: {status.abort or answer.get('reason')} "
                         f"(log: {state.get('log')})")
    end = ses._RunEnd(returncode=0 if fault is None else -int(signal.SIGKILL),
                      timed_out=answer.get("config") if fault == "timeout" else None,
                      stalled="between" if fault == "stalled" else None,
                      launched=began, exited=answered, cleaned=answered)
    frames, failures = [], {}
    kept_ids: set[int] = set()
    part = None
    if started:
        part = ses._read_part(driver, settings, base, log, end, points)
        crashed = status.current
        if crashed is not None and crashed not in status.failed:
            if fault in ("crash", "timeout") and answer.get("config") == crashed:
                part.failures[crashed] = answer.get("reason") or part.failures[crashed]
                notify("fail", crashed, part.failures[crashed])
            else:  # the server went away under it: not this config's fault, it is measured again
                part.failures.pop(crashed, None)
        failures = dict(part.failures)
        if part.kept is not None and len(part.kept):
            frames.append(part.kept)
            kept_ids = set(int(c) for c in points.of_frame(part.kept).dropna())
        if failures:
            frames.append(ses.failure_frame(failures, settings, driver, points))
        if frames:
            hand_over(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    remaining = [c for c in ids if c not in kept_ids and c not in failures]
    for config_id in status.done:
        if config_id in remaining:
            notify("retry", config_id, "not measured whole by nsprof serve; measuring again without it")
    timing = ses._Timing()
    if part is not None:
        timing.add(part, end, log)
    words = f"measured by nsprof serve (pid {state['pid']}, worker pid {state.get('worker_pid')})"
    notes = [words]
    print(f"nsprof: {words}", file=sys.stderr, flush=True)
    measured = ses.Measured(frame=pd.concat(frames, ignore_index=True) if frames else make_frame([]),
                            failures=failures, device=status.device,
                            reports=[part.report] if part is not None and part.report is not None else [],
                            work_dir=work_dir, notes=notes, phases=timing.total(), config_phases=timing.configs)
    if remaining:
        why = one_line(str(answer.get("reason") or fault), 200)
        words = (f"nsprof serve ended during this run ({why}); {len(remaining)} configs measured without it")
        notes.append(words)
        print(f"nsprof: {words}", file=sys.stderr, flush=True)
        # The server releases the GPU once it has shut its worker down.
        with gpu_lock(0, wait=True, timeout_s=None if settings.wait_gpu else EXIT_WAIT_S):
            rest = ses._run_parts(target, n_configs, settings, remaining, on_progress, job_extra, driver, work_dir,
                                  on_rows, points)
        measured = _merged(measured, rest)
    measured.wall_s = time.monotonic() - began
    if not remaining:
        timing.write(work_dir / ses.PHASES_FILE, began, time.monotonic())
    return measured


def _merged(first, second):
    """One Measured of a served part and the standalone session after it."""
    import pandas as pd

    frames = [f for f in (first.frame, second.frame) if len(f)]
    first.frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else first.frame)
    first.failures.update(second.failures)
    first.device = first.device or second.device
    first.reports.extend(second.reports)
    first.notes.extend(second.notes)
    for name, seconds in second.phases.items():
        first.phases[name] = first.phases.get(name, 0.0) + seconds
    for config_id, times in second.config_phases.items():
        entry = first.config_phases.setdefault(config_id, {})
        for name, seconds in times.items():
            entry[name] = entry.get(name, 0.0) + seconds
    return first


# ---------------------------------------------------------------- the server side


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
        self.busy = False
        self.queue: list = []  # (connection, request) of clients waiting for the current job
        self.closing: str | None = None  # the signal that asked the server to end
        self.fault: str | None = None  # why a job's fault ends the server
        self.state: dict = {}

    def note(self, text: str) -> None:
        from nsprof.session import _note

        _note(self.log, text)

    def say(self, text: str) -> None:
        print(f"nsprof serve: {text}", file=sys.stderr, flush=True)

    # -- start

    def start(self, pipe) -> None:
        from nsprof.session import _launch
        from nsprof.worker.serving import JOBS_FIFO, WORKER_INFO, WORKER_STATUS

        # This process holds the GPU lock: any server files left are a dead server's.
        for path in (self.state_path, self.socket_path):
            if path.exists() or path.is_symlink():
                path.unlink()
        if len(os.fsencode(str(self.socket_path))) > 100:
            raise NsprofError(f"the socket path {self.socket_path} is too long for a Unix socket: set "
                              "NSPROF_LOCK_DIR to a shorter folder")
        (self.dir / WORKER_INFO).write_text(json.dumps({"watch_fd": pipe.read_fd, "watch_inode": pipe.inode,
                                                        "server": os.getpid()}))
        os.mkfifo(self.dir / JOBS_FIFO, 0o600)
        (self.dir / WORKER_STATUS).write_text("")
        command = self.driver.serve_command(self.settings, self.dir, self.session)
        self.note(f"serve command: {' '.join(command)}")
        self.proc = _launch(command, self.log, pipe)
        ready = self._wait_ready()
        self.fifo = os.open(self.dir / JOBS_FIFO, os.O_RDWR)
        self.listener = self._listen()
        from datetime import datetime

        self.state = {"pid": os.getpid(), "worker_pid": self.worker_pid, "backend": self.settings.backend,
                      "tool_version": self.driver.tool_version(), "identity": identity(self.driver, self.settings),
                      "command": command, "session": self.session, "device": ready.get("device"),
                      "started_unix": time.time(), "started": datetime.now().astimezone().isoformat(timespec="seconds"),
                      "idle_exit_s": self.idle_exit_s, "socket": str(self.socket_path), "log": str(self.log_path)}
        temporary = self.state_path.with_name(self.state_path.name + f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(self.state, indent=1) + "\n")
        os.replace(temporary, self.state_path)

    def _wait_ready(self) -> dict:
        from nsprof.worker.protocol import parse_status
        from nsprof.worker.serving import WORKER_STATUS

        deadline = time.monotonic() + START_BOUND_S
        while True:
            text = _read(self.dir / WORKER_STATUS)
            self.worker_pid = parse_status(text).pid
            for line in text.splitlines():
                if line.startswith("ready "):
                    return json.loads(line[len("ready "):])
            if self.proc.poll() is not None:
                raise ToolFailed(f"the serving worker did not start: {self.driver.diagnose(self.log_path, self.proc.returncode)} "
                                 f"(log: {self.log_path})")
            if self.closing:
                raise NsprofError(f"{self.closing} while the serving worker started")
            if time.monotonic() > deadline:
                raise ToolFailed(f"the serving worker did not start within {START_BOUND_S:g} s (log: {self.log_path})")
            time.sleep(POLL_S)

    def _listen(self):
        import socket

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        umask = os.umask(0o177)
        try:
            listener.bind(str(self.socket_path))
        finally:
            os.umask(umask)
        os.chmod(self.socket_path, 0o600)
        listener.listen(16)
        return listener

    # -- serve

    def worker_alive(self) -> bool:
        from nsprof.session import _alive

        return _alive(self.worker_pid)

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
            request = _receive(conn, REQUEST_TIMEOUT_S)
            if request is None or request.get("op") != "job":
                if request is not None and request.get("op") == "ping":
                    _send(conn, {**self.state, "busy": False})
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
        request = _receive(conn, REQUEST_TIMEOUT_S) or {}
        if request.get("op") == "job" and request.get("wait"):
            self.queue.append((conn, request))
            _send(conn, {"queued": True})
            return
        if request.get("op") == "job":
            _send(conn, {"ok": False, "busy": True, "reason": "another job is running"})
        elif request.get("op") == "ping":
            _send(conn, {**self.state, "busy": True})
        conn.close()

    def job(self, conn, request: dict) -> None:
        self.jobs += 1
        self.busy = True
        try:
            if not _send(conn, {"started": True, "job": self.jobs}):
                self.note(f"job {self.jobs}: its client is gone; not run")
                return
            answer = self._collect(self.jobs, request)
            if not _send(conn, answer):
                self.note(f"job {self.jobs}: its client went away before the answer")
        finally:
            self.busy = False
            conn.close()

    def _collect(self, n: int, request: dict) -> dict:
        base = Path(request["report_base"])
        self.note(f"job {n}: {request['job']}")
        try:
            self.driver.serve_start(self.session, base, self.log)
        except NsprofError as exc:
            self.fault = f"the profiler could not start a collection: {exc}"
            return {"ok": False, "fault": "tool", "config": None, "reason": str(exc)}
        line = json.dumps({"job": request["job"], "n": n, "server": os.getpid()}) + "\n"
        os.write(self.fifo, line.encode())
        answer = self._follow(n, Path(request["status"]), float(request["timeout_s"]), float(request["phase_bound_s"]))
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

        for line in _read(self.dir / WORKER_STATUS).splitlines():
            words = line.split()
            if len(words) == 3 and words[0] == "job" and words[1] == str(n):
                return int(words[2])
        return None

    def _follow(self, n: int, status_file: Path, timeout_s: float, bound_s: float) -> dict:
        """Follow job n until the worker says it is over, or a bound or the worker's death ends it."""
        from nsprof.session import _kill
        from nsprof.worker.protocol import EXIT_CONTEXT_LOST, parse_status
        from nsprof.worker.serving import JOB_ABORTED

        seen = parse_status("")
        seen_lines = -1
        current_since = last_line_at = time.monotonic()
        while True:
            code = self._job_code(n)
            text = _read(status_file)
            status = parse_status(text)
            if code == 0:
                return {"ok": True}
            if code == JOB_ABORTED:
                return {"ok": False, "fault": "abort", "config": None,
                        "reason": status.abort or f"the job could not run (log: {self.log_path})"}
            if code is not None or not self.worker_alive():
                code = self._job_code(n) if code is None else code
                if code == 0:
                    return {"ok": True}
                lost = "lost its CUDA context" if code == EXIT_CONTEXT_LOST else "died"
                self.fault = f"the worker {lost} in job {n}"
                reason = self.driver.crash_reason(self.log_path, self.proc.poll())
                return {"ok": False, "fault": "crash", "config": status.current, "reason": reason}
            now = time.monotonic()
            if status.current != seen.current or len(status.started) != len(seen.started):
                current_since = now
            lines = sum(1 for ln in text.splitlines() if not ln.startswith("at "))
            if lines != seen_lines:
                seen_lines, last_line_at = lines, now
            seen = status
            if status.current is not None and now - current_since > timeout_s:
                _kill(self.worker_pid)
                self.fault = f"config {status.current} of job {n} ran past its timeout ({timeout_s:g} s)"
                return {"ok": False, "fault": "timeout", "config": status.current,
                        "reason": f"timeout: still running after {timeout_s:g} s"}
            if status.current is None and now - last_line_at > bound_s:
                _kill(self.worker_pid)
                self.fault = f"job {n} made no progress for {bound_s:g} s"
                return {"ok": False, "fault": "stalled", "config": None, "reason": self.fault}
            self.answer_waiting(POLL_S)

    # -- end

    def end(self, pipe) -> None:
        from nsprof.session import _kill, _kill_group, _kill_lock_holders_left

        # Clients must stop finding this server first.
        if self.state and _read(self.state_path).strip() == json.dumps(self.state, indent=1):
            self.state_path.unlink()  # only this server's own state file
        if self.listener is not None:
            self.listener.close()
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                self.note("its socket was removed already")
        why = self.fault or self.closing or "ending"
        for conn, _ in self.queue:
            _send(conn, {"ok": False, "fault": "closing", "config": None, "reason": f"nsprof serve ended: {why}"})
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
            import subprocess

            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.note("the profiler did not exit within 30 s of the shutdown: killed")
            _kill_group(self.proc)
            if self.worker_alive():
                _kill(self.worker_pid)
            _kill_lock_holders_left(self.log)
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
    from nsprof.host.lock import gpu_lock
    from nsprof.session import _DeathPipe
    from nsprof.settings import ProfileSettings

    cls = registry.driver_class(backend)
    if not cls.serves:
        raise NsprofError(cls.serve_refusal)
    if idle_exit_s <= 0:
        raise NsprofError("--idle-exit must be positive")
    settings = ProfileSettings(backend=backend)
    driver = registry.get_driver(backend)
    with gpu_lock(0, wait=wait):
        server = _Server(driver, settings, idle_exit_s)

        def close(signum, frame) -> None:
            server.closing = signal.Signals(signum).name

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, close)
        pipe = _DeathPipe()
        try:
            try:
                server.start(pipe)
            except BaseException:
                server.fault = server.fault or "it did not start"
                raise
            server.say(f"pid {os.getpid()}, worker pid {server.worker_pid} under {backend}; "
                       f"listening on {server.socket_path}; ends after {idle_exit_s:g} s without a job")
            code = server.loop()
        finally:
            server.end(pipe)
        if server.fault:
            server.say(f"ended: {server.fault} (log kept: {server.log_path})")
        return code
