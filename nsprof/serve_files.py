"""The files and the socket of `nsprof serve`, both sides' (nsprof.serve_client, nsprof.serve): where
they are (serve_paths), their checks before a client trusts them (check_folder, read_state, connect:
UntrustedPeer), a socket's address where its path is too long (unix_address), the JSON lines the
socket speaks (send_line, receive_line, LineReader), and a status file read whole (read_or_empty).

Only a server of the client's own user is ever used (docs/trust.md): the state file and the socket
lie in a folder of that user's, `<lock dir>/nsprof-serve-<uid>` (serve_paths), mode 0700, which
the client checks (owner, mode, no link) before it reads the state; the state file must be that
user's own regular file (fstat of the file opened with O_NOFOLLOW); and the socket's peer must be of
that user too (SO_PEERCRED, connect), checked before anything is sent, so that a job's request
and the environment in it never reach another user's process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from nsprof.errors import NsprofError

STATE_SUFFIX = ".serve.json"
SOCKET_SUFFIX = ".serve.sock"
SOCKET_PATH_MAX = (
    100  # a Unix socket's address holds 107 bytes: longer paths go through their folder (unix_address)
)
STATE_LIMIT = 1 << 20
LINE_LIMIT = (
    1 << 20
)  # the longest JSON line a server or client reads (a request holds its client's environment)


class UntrustedPeer(OSError):
    """A socket whose listening process is another user's: nothing is sent to it."""


def serve_paths() -> tuple[Path, Path]:
    """(state file, socket) of this user's server of CUDA device 0's GPU, in this user's folder beside
    the GPU's lock: one per user (`nsprof-serve-<uid>`), mode 0700 (check_folder)."""
    from nsprof.host.gpu import which_gpu
    from nsprof.host.lock import lock_path

    lock = lock_path(which_gpu(0))
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
        from nsprof.host.lock import made_lock_folder

        made_lock_folder(folder.parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
            # the umask may have taken the owner's bits; by its descriptor, never through a link put there
            # since (a link is refused below)
            with contextlib.suppress(OSError):
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    os.fchmod(fd, 0o700)
                finally:
                    os.close(fd)
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
            + (
                "not used; remove it"
                if st.st_uid == mine
                else f"not used; ask uid {st.st_uid} or an administrator to remove it"
            )
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
    deadline = time.monotonic() + timeout_s
    try:
        with unix_address(Path(socket_path)) as address:
            while True:
                conn.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    conn.connect(address)
                    break
                except BlockingIOError:  # the server's accept queue is full: wait for room
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"no room in the server's queue within {timeout_s:g} s") from None
                    time.sleep(0.01)
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


def send_line(conn, message: dict) -> bool:
    """Send one JSON line; False when the peer is gone."""
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        return False
    return True


class LineReader:
    """JSON lines from `conn`, one at a time: what came after a line in the same read is kept for the
    next (a server may send two answers at once). `ended`: the peer closed the connection (or it
    broke), as opposed to sending nothing yet."""

    def __init__(self, conn) -> None:
        self.conn, self.data, self.ended = conn, b"", False

    def next(self, timeout_s: float) -> dict | None:
        """The next JSON line within timeout_s; None if none came (or it was not JSON)."""
        deadline = time.monotonic() + timeout_s
        try:
            while b"\n" not in self.data and len(self.data) < LINE_LIMIT:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.conn.settimeout(left)
                chunk = self.conn.recv(65536)
                if not chunk:
                    self.ended = True
                    return None
                self.data += chunk
        except TimeoutError:
            return None
        except OSError:
            self.ended = True
            return None
        line, _, self.data = self.data.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None


def receive_line(conn, timeout_s: float) -> dict | None:
    """One JSON line from `conn` within timeout_s; None if none came (or it was not JSON)."""
    return LineReader(conn).next(timeout_s)


def read_or_empty(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
