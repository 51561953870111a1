"""Starting `nsprof serve`: Starting, the part of nsprof.serve's server that starts it (a dead server's
files removed, the serving worker launched under the profiler and waited for until it is ready,
within START_BOUND_S), and its files made: the socket (listen: mode 0600) and the state file
(write_state: a temporary file of mkstemp's, renamed).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

from nsprof.errors import NsprofError, ToolFailed
from nsprof.serve_client import POLL_S
from nsprof.serve_files import check_folder, read_or_empty, unix_address
from nsprof.serve_identity import identity

START_BOUND_S = 300.0  # the serving worker's start (the profiler, Python, torch, CUDA)


class Starting:
    """The server's start(); it uses the server's driver, settings, session, dir, log, state_path and socket_path;
    sets its proc, worker_pid, fifo, listener and state."""

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
        self.fifo = os.open(
            self.dir / JOBS_FIFO, os.O_RDWR | os.O_NONBLOCK
        )  # written as it takes: _hand_over
        self.listener = listen(self.socket_path)
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
        write_state(self.state_path, self.state)

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


def listen(socket_path: Path):
    """A Unix socket listening at socket_path, mode 0600 (made so: no moment where others may connect)."""
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        with unix_address(socket_path) as address:
            listener.bind(address)
    finally:
        os.umask(umask)
    os.chmod(socket_path, 0o600)
    listener.listen(16)
    return listener


def write_state(path: Path, state: dict) -> None:
    """The state file written whole: O_EXCL, mode 0600, a name nobody can guess, then renamed, so that it
    is never written through a link, never readable by others, never read half-written."""
    handle, temporary = tempfile.mkstemp(prefix=".state.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(json.dumps(state, indent=1) + "\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
