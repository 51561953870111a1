"""Nothing another local user can make nsprof do, with a real second user.

Each attack runs in a sticky world-writable folder that stands for /tmp (the GPU-lock folder here), and
the other user is a real process of another uid: a child forked from this test (so that it needs no
Python of its own: /root is mode 700, so another uid cannot start this Python) that drops to uid and
gid OTHER with setgroups/setgid/setuid before it plants links, writes files or listens on a socket.
The victim is root, through nsprof's real CLI (tests/standins.py, the stand-in profilers) or its lock
API. These tests need root (to become another uid) and are skipped with the reason where that fails.

None of them leans on the kernel's link protection: they pass with fs.protected_symlinks=0 (this
machine's setting when they were written; /proc/sys/fs/protected_symlinks), since nsprof opens its
files with O_NOFOLLOW and creates them with O_EXCL, and never writes another user's file. With 1 they
pass too, but then the kernel refuses to follow those links as well, and the link tests prove less.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest
from conftest import FIXTURES, run_nsprof, wait_for

from nsprof.errors import GpuBusy, NsprofError
from nsprof.host.gpu import which_gpu
from nsprof.host.lock import gpu_lock, lock_path
from nsprof.serve_files import serve_paths

OTHER = 54321  # the other local user's uid and gid (no passwd entry needed)
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
STANDINS = TESTS / "standins.py"
HEALTHY = str(FIXTURES.parent / "targets" / "faulty_cpu.py") + ":space"  # configs 0, 2, 4 are healthy
SECRET = "SECRET_API_TOKEN"
WAIT_S = 120.0  # generous: a busy machine must not fail these; a hang never ends at all


def _traversable(folder: Path) -> bool:
    """Whether every folder from / down to `folder` lets other users pass (o+x)."""
    return all(os.stat(p).st_mode & 0o001 for p in [folder, *folder.parents])


def _setuid_works() -> str:
    """'' when a forked child can become uid OTHER here, else why not."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            code = 0 if os.getuid() == OTHER else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return "" if os.waitstatus_to_exitcode(status) == 0 else f"setuid({OTHER}) failed in a forked child"


@pytest.fixture
def shared(monkeypatch) -> Path:
    """A sticky, world-writable folder (mode 1777, as /tmp) under a root-owned 0755 folder of this test's
    own, set as the GPU-lock folder (NSPROF_LOCK_DIR): the lock, and where serve's files go."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the other local user is a forked child that drops to another uid")
    why = _setuid_works()
    if why:
        pytest.skip(why)
    parent = Path(tempfile.gettempdir())
    if not _traversable(parent):
        parent = Path("/tmp")
    if not parent.is_dir() or not _traversable(parent):
        pytest.skip(f"no temporary folder that uid {OTHER} can reach ({tempfile.gettempdir()} is not)")
    base = Path(tempfile.mkdtemp(prefix="nsprof-shared-", dir=parent))
    base.chmod(0o755)
    folder = base / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(folder))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    which_gpu(0)  # nvidia-smi's answer is cached (the other user's child cannot start it from here)
    yield folder
    shutil.rmtree(base, ignore_errors=True)


class OtherUser:
    """A real process of uid OTHER running act(self) in a fork of this process. It reports to the test
    with say() (one JSON line each), and waits for the test's word with hear()."""

    def __init__(self, act, *args) -> None:
        self._from_child, to_test = os.pipe()
        from_test, self._to_child = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                os.close(self._from_child)
                os.close(self._to_child)
                self._out, self._in = to_test, from_test
                os.setgroups([])
                os.setgid(OTHER)
                os.setuid(OTHER)
                os.umask(0o022)
                act(self, *args)
                code = 0
            except BaseException:  # noqa: BLE001 - the test reads why
                with contextlib.suppress(BaseException):
                    self.say({"error": traceback.format_exc()})
            finally:
                os._exit(code)
        os.close(to_test)
        os.close(from_test)
        self._buffer = b""

    # -- in the other user's process

    def say(self, message: dict) -> None:
        os.write(self._out, (json.dumps(message) + "\n").encode())

    def hear(self, timeout_s: float = WAIT_S) -> str:
        readable, _, _ = select.select([self._in], [], [], timeout_s)
        return os.read(self._in, 4096).decode().strip() if readable else ""

    # -- in the test

    def tell(self, word: str) -> None:
        os.write(self._to_child, word.encode() + b"\n")

    def read(self, timeout_s: float = WAIT_S) -> dict:
        """The other user's next message (AssertionError after timeout_s or when it is gone)."""
        while b"\n" not in self._buffer:
            readable, _, _ = select.select([self._from_child], [], [], timeout_s)
            chunk = os.read(self._from_child, 65536) if readable else b""
            assert chunk, "the other user's process said nothing more"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        assert "error" not in message, message["error"]
        return message

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        os.close(self._from_child)
        os.close(self._to_child)


@pytest.fixture
def other_user():
    """other_user(act, *args): start act in a process of uid OTHER; every one is killed at the end."""
    started: list[OtherUser] = []

    def start(act, *args) -> OtherUser:
        started.append(OtherUser(act, *args))
        return started[-1]

    yield start
    for user in started:
        user.stop()


# --- what the other user does (in its own process) ------------------------------------------------------


def _fake_server(me: OtherUser, socket_path: str, files: dict[str, str], answer_pings: bool) -> None:
    """Write `files` (creating their folders, open to all), listen on socket_path (mode 0777), and record
    what any client sends: with answer_pings, answer a ping with the copied state and hang up on a job
    once it came; else answer nothing. On
    the word "report": {"connections", "bytes", "secret"} (whether SECRET's value came)."""
    for path, text in files.items():
        folder = Path(path).parent
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o777)
            folder.chmod(0o777)
        Path(path).write_text(text)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    os.chmod(socket_path, 0o777)
    listener.listen(16)
    me.say({"ready": True})
    conns: list[socket.socket] = []
    got = {"connections": 0, "bytes": 0, "secret": False}
    data: dict[int, bytes] = {}
    while True:
        readable, _, _ = select.select([listener, me._in, *conns], [], [], 1.0)
        for ready in readable:
            if ready is me._in:
                os.read(me._in, 4096)
                me.say(got)
            elif ready is listener:
                conn, _ = listener.accept()
                conns.append(conn)
                got["connections"] += 1
            else:
                chunk = ready.recv(65536)
                if not chunk:
                    conns.remove(ready)
                    continue
                got["bytes"] += len(chunk)
                data[ready.fileno()] = data.get(ready.fileno(), b"") + chunk
                got["secret"] = got["secret"] or b"stolen-by-nobody" in data[ready.fileno()]
                if answer_pings and b'"op": "ping"' in data[ready.fileno()]:
                    state = json.loads(next(iter(files.values())))
                    ready.sendall((json.dumps({**state, "busy": False}) + "\n").encode())
                elif answer_pings and b"\n" in data[ready.fileno()]:  # the job, taken: hang up
                    conns.remove(ready)
                    ready.close()


def _plant_links(me: OtherUser, links: dict[str, str]) -> None:
    """Symbolic links at `links`' names, to their targets (which this user cannot read: it needs not)."""
    for name, target in links.items():
        os.symlink(target, name)
    me.say({"planted": len(links)})
    for word in iter(me.hear, ""):  # "pid N": one more link, for that pid's name
        _, pid, template = word.split(" ", 2)
        with contextlib.suppress(FileExistsError):
            os.symlink(links[next(iter(links))], template.replace("{pid}", pid))
        me.say({"planted": pid})


def _hold_the_lock(me: OtherUser, argv: list[str]) -> None:
    """Take GPU 0's lock through nsprof's own lock, in this process, and hold it until told "release"."""
    sys.argv = argv
    with gpu_lock(0):
        me.say({"held": os.getpid()})
        me.hear()
    me.say({"released": True})


def _try(me: OtherUser, paths: dict[str, str]) -> None:
    """Try to read each file / connect to each socket of `paths` ({path: "read"|"connect"}): what happened."""
    results = {}
    for path, how in paths.items():
        try:
            if how == "read":
                Path(path).read_bytes()
            else:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.connect(path)
            results[path] = "ok"
        except OSError as exc:
            results[path] = type(exc).__name__
    me.say(results)


# --- helpers of the victim (root) ----------------------------------------------------------------------


def _client_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, SECRET: "stolen-by-nobody", "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}


def _profile(
    tmp_path: Path, name: str, *args, backend: str = "nsys", configs: str = "0,2,4", timeout_s: float = WAIT_S
) -> subprocess.CompletedProcess:
    """nsprof's real CLI (stand-in profilers) as root: `nsprof profile` of the healthy configs."""
    return run_nsprof(
        "profile",
        HEALTHY,
        "--backend",
        backend,
        "--configs",
        configs,
        "--mode",
        "direct",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--json",
        "--work-dir",
        str(tmp_path / name),
        *args,
        timeout=timeout_s,
        env=_client_env(tmp_path),
        standins=True,
    )


IDENTITY = (
    "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport standins\nstandins.install()\n"
    "from nsprof.drivers import registry\nfrom nsprof.settings import ProfileSettings\n"
    "from nsprof.serve_identity import identity\n"
    "print(json.dumps(identity(registry.get_driver('nsys'), ProfileSettings(backend='nsys'))))\n"
)


def _identity(tmp_path: Path) -> dict:
    """What a client of _profile's environment asks of a server (readable by anyone who sees a state file)."""
    done = subprocess.run(
        [sys.executable, "-c", IDENTITY, str(TESTS)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env=_client_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _measured(done: subprocess.CompletedProcess) -> list[int]:
    return sorted({row["config_id"] for row in json.loads(done.stdout) if row["error"] is None})


def _victim(tmp_path: Path) -> Path:
    """A file of root's that nobody else can read or write."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    return victim


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line]
    assert lines and lines[-1].startswith("nsprof: error:"), stderr
    assert "Traceback" not in stderr, stderr
    return lines[-1]


# --- serve: the client talks only to a server of its own uid ------------------------------------------


def test_a_state_file_and_socket_of_another_user_get_no_job_and_the_run_is_standalone(
    tmp_path, shared, other_user
):
    """The issue's repro: the other user wrote a state file of their own (a copied identity, their pid and
    their socket) where a client looks for a server, and answered its ping: root's job request went to that
    socket with its whole environment. Planted both where nsprof looked (beside the lock) and as the
    per-user folder's name (serve_paths()), before root ever made that folder."""
    state_paths = sorted({str(shared / (lock_path(0).stem + ".serve.json")), str(serve_paths()[0])})
    sock = str(shared / "evil.sock")
    identity = _identity(tmp_path)

    def spoof(me):
        state = {
            "pid": os.getpid(),
            "worker_pid": os.getpid(),
            "identity": identity,
            "socket": sock,
            "log": "",
        }
        _fake_server(me, sock, dict.fromkeys(state_paths, json.dumps(state)), True)

    attacker = other_user(spoof)
    assert attacker.read() == {"ready": True}
    done = _profile(tmp_path, "run")
    attacker.tell("report")
    got = attacker.read()
    assert got["bytes"] == 0 and not got["secret"], (
        f"the other user's socket received {got['bytes']} bytes of root's job (secret sent: {got['secret']})"
    )
    assert done.returncode == 0, done.stderr
    assert _measured(done) == [0, 2, 4]
    assert "measured by nsprof serve" not in done.stderr
    assert (tmp_path / "run" / "part0.status").exists(), "measured standalone"


def test_a_never_answering_socket_of_another_user_gets_nothing_and_costs_a_short_bound(
    tmp_path, shared, other_user
):
    """root's own state file names a socket that another user listens on and never answers (SO_PEERCRED is
    the check: the state file is root's). Today's client waited out the ping, took the silence for a busy
    server, sent its job (and environment) and waited for the job's whole bound."""
    sock = str(shared / "silent.sock")
    attacker = other_user(_fake_server, sock, {}, False)
    assert attacker.read() == {"ready": True}
    state_file = serve_paths()[0]
    state_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    state_file.write_text(
        json.dumps(
            {
                "pid": attacker.pid,
                "worker_pid": attacker.pid,
                "identity": _identity(tmp_path),
                "socket": sock,
                "log": "",
            }
        )
    )
    done = _profile(tmp_path, "run")  # on today's main this ran past WAIT_S (TimeoutExpired)
    attacker.tell("report")
    got = attacker.read()
    assert got["bytes"] == 0 and not got["secret"], (
        f"root's client sent {got['bytes']} bytes to another user's socket"
    )
    assert done.returncode == 0, done.stderr
    assert _measured(done) == [0, 2, 4] and "measured by nsprof serve" not in done.stderr


def test_serve_keeps_its_files_in_a_folder_only_its_user_can_enter(tmp_path, shared, other_user):
    """A real server in the shared folder: its state file (0600) and socket lie in a per-user folder
    (0700), which the other user can neither read nor connect into; root's own client is served."""
    scratch = tmp_path / "server.tmp"
    scratch.mkdir()
    err = open(tmp_path / "server.err", "w")
    server = subprocess.Popen(
        [sys.executable, str(STANDINS), "serve", "--backend", "nsys", "--idle-exit", "60"],
        stdout=subprocess.DEVNULL,
        stderr=err,
        env={**_client_env(tmp_path), "TMPDIR": str(scratch)},
    )
    try:
        state_file, sock = serve_paths()
        assert wait_for(lambda: state_file.exists() or server.poll() is not None, WAIT_S)
        assert server.poll() is None, (tmp_path / "server.err").read_text()
        folder = state_file.parent
        assert folder != shared and folder.parent == shared
        assert folder.stat().st_uid == os.geteuid() and folder.stat().st_mode & 0o777 == 0o700
        assert state_file.stat().st_mode & 0o777 == 0o600 and sock.stat().st_mode & 0o777 == 0o600
        attacker = other_user(_try, {str(state_file): "read", str(sock): "connect"})
        assert attacker.read() == {str(state_file): "PermissionError", str(sock): "PermissionError"}
        done = _profile(tmp_path, "served")
        assert done.returncode == 0, done.stderr
        assert _measured(done) == [0, 2, 4] and "measured by nsprof serve" in done.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=WAIT_S)
        err.close()


def test_serve_refuses_a_per_user_folder_that_another_user_made(tmp_path, shared, other_user):
    """The other user made serve's per-user folder first (its name is known): `nsprof serve` refuses it in
    one line (today's main kept its state in the shared folder itself, readable by all)."""
    folder = serve_paths()[0].parent

    def squat(me):
        if folder != shared:
            folder.mkdir(mode=0o777)
            folder.chmod(0o777)
        me.say({"made": folder != shared})

    assert other_user(squat).read()["made"], f"serve's files lie in the shared folder {shared} itself"
    done = subprocess.run(
        [sys.executable, str(STANDINS), "serve", "--backend", "nsys", "--idle-exit", "5"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env=_client_env(tmp_path),
    )
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert str(folder) in line and f"uid {OTHER}" in line
    # what to do: the other user or an administrator removes it; another lock folder would split the GPU lock
    assert f"ask uid {OTHER}" in line and "NSPROF_LOCK_DIR" not in line
    assert sorted(p.name for p in folder.iterdir()) == [], "nothing written into the other user's folder"


def test_serve_never_writes_its_state_through_links_planted_at_guessable_names(tmp_path, shared, other_user):
    """The state's temporary file was `<lock name>.serve.json.<pid>.tmp` beside the lock, written through
    links: links planted under the next 3,000 pids (and the server's own, once known) overwrote root's file."""
    victim = _victim(tmp_path)
    template = str(shared / (lock_path(0).stem + ".serve.json.{pid}.tmp"))
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    links = {
        template.replace("{pid}", str(pid)): str(victim) for pid in range(last + 1, min(last + 3000, pid_max))
    }
    attacker = other_user(_plant_links, links)
    assert attacker.read() == {"planted": len(links)}
    scratch = tmp_path / "server.tmp"
    scratch.mkdir()
    server = subprocess.Popen(
        [sys.executable, str(STANDINS), "serve", "--backend", "nsys", "--idle-exit", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**_client_env(tmp_path), "TMPDIR": str(scratch)},
    )
    try:
        attacker.tell(f"pid {server.pid} {template}")
        assert attacker.read() == {"planted": str(server.pid)}
        state_file = serve_paths()[0]
        assert wait_for(lambda: state_file.exists() or server.poll() is not None, WAIT_S)
        assert victim.read_text() == "precious\n", "serve wrote its state through another user's link"
        assert server.poll() is None, server.stderr.read()
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=WAIT_S)
    assert victim.read_text() == "precious\n"


# --- the GPU lock -----------------------------------------------------------------------------------------


def test_a_link_planted_at_the_lock_name_is_never_written_through(tmp_path, shared, other_user):
    """`ln -s ~root/victim.txt /tmp/nsprof-gpu0.lock` by the other user: root's tune emptied the victim
    (O_RDWR followed the link, then ftruncate). Now: one clear line, exit 2, the victim untouched."""
    victim = _victim(tmp_path)
    attacker = other_user(_plant_links, {str(lock_path(0)): str(victim)})
    assert attacker.read() == {"planted": 1}
    done = _profile(tmp_path, "run", backend="ncu")
    assert victim.read_text() == "precious\n" and victim.stat().st_mode & 0o777 == 0o600
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert str(lock_path(0)) in line and "symbolic link" in line and f"uid {OTHER}" in line
    with pytest.raises(NsprofError, match="symbolic link"):  # the API says the same
        with gpu_lock(0):
            pytest.fail("took a lock through a link")
    assert victim.read_text() == "precious\n"


def test_a_fifo_planted_at_the_lock_name_is_refused_in_one_line(tmp_path, shared, other_user):
    """A FIFO at the lock's name: today's main said only "nsprof: error: Invalid argument" (its ftruncate),
    and a read-only open without O_NONBLOCK would wait for a writer forever. It is refused, named."""

    def plant(me):
        os.mkfifo(lock_path(0), 0o666)
        me.say({"planted": 1})

    assert other_user(plant).read() == {"planted": 1}
    done = _profile(tmp_path, "run", backend="ncu")
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert str(lock_path(0)) in line and "not a regular file" in line and f"uid {OTHER}" in line


def test_links_planted_at_the_holder_records_name_are_never_written_through(tmp_path, shared, other_user):
    """The holder's record lies beside the lock, one file per user; a link planted at root's record's name
    is replaced (a rename), never followed: the lock is taken and the victim untouched."""
    from nsprof.host.lock import holder_record, record_path

    victim = _victim(tmp_path)
    attacker = other_user(_plant_links, {str(record_path(lock_path(0), os.geteuid())): str(victim)})
    assert attacker.read() == {"planted": 1}
    with gpu_lock(0) as path:
        assert holder_record(path)["pid"] == os.getpid()
    assert victim.read_text() == "precious\n"
    assert not record_path(lock_path(0), os.geteuid()).exists(), "released: nobody named"


def test_a_holder_record_with_control_characters_is_printed_escaped(tmp_path, shared, other_user):
    """The other user's command line holds terminal escapes (the lock file was 0666: anyone could also write
    the record). The busy message shows them escaped: nothing reaches root's terminal as a control sequence."""
    nasty = "\x1b]0;owned\x07\x1b[2J\x1b[31mgpu free\r\u202e"
    attacker = other_user(_hold_the_lock, ["nsprof", "tune", nasty])
    held = attacker.read()["held"]
    done = _profile(tmp_path, "run", backend="ncu")
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert f"pid {held}" in line
    assert not any(c in done.stderr for c in "\x1b\x07\r\u202e"), repr(done.stderr)
    assert "\\x1b]0;owned\\x07\\x1b[2J" in line and "\\r\\u202e" in line, line
    with pytest.raises(GpuBusy) as caught:
        with gpu_lock(0):
            pytest.fail("took a lock another user holds")
    assert "\x1b" not in str(caught.value) and "\\x1b" in str(caught.value)


@pytest.mark.parametrize("maker", ["the other user", "root"])
def test_two_users_share_one_gpu(tmp_path, shared, other_user, maker):
    """One uid holds GPU 0's lock (through nsprof's lock, in its own process); root is told who holds it,
    by the CLI and by the API, and with --wait gets it once the first lets go. Whoever made the lock file."""
    if maker == "root":
        with gpu_lock(0):
            pass
    attacker = other_user(_hold_the_lock, ["nsprof", "tune", "x.py:space"])
    held = attacker.read()["held"]
    lock = lock_path(0)
    assert lock.stat().st_uid == (OTHER if maker != "root" else 0)
    assert lock.stat().st_mode & 0o777 == 0o644, "only its maker can write the lock file"
    busy = _profile(tmp_path, "busy", backend="ncu")
    assert busy.returncode == 2
    line = _one_error_line(busy.stderr)
    assert (
        f"being profiled by another nsprof (pid {held}, uid {OTHER}" in line and "tune x.py:space" in line
    ), line
    with pytest.raises(GpuBusy) as caught:
        with gpu_lock(0):
            pytest.fail("took a lock another user holds")
    assert caught.value.holder["pid"] == held
    waiting = subprocess.Popen(
        [
            sys.executable,
            str(STANDINS),
            "profile",
            HEALTHY,
            "--backend",
            "ncu",
            "--configs",
            "0",
            "--mode",
            "direct",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
            "--wait",
            "--work-dir",
            str(tmp_path / "waits"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_client_env(tmp_path),
    )
    try:
        inode = lock.stat().st_ino
        # --wait blocks in flock: the kernel lists the waiter (/proc/locks "->" lines) before the lock is free
        assert wait_for(
            lambda: (
                any(
                    line.split()[1] == "->" and line.split()[6].endswith(f":{inode}")
                    for line in Path("/proc/locks").read_text().splitlines()
                    if len(line.split()) > 6
                )
                or waiting.poll() is not None
            ),
            WAIT_S,
        )
        assert waiting.poll() is None, waiting.communicate()
        attacker.tell("release")
        assert attacker.read() == {"released": True}
        out, err = waiting.communicate(timeout=WAIT_S)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert waiting.returncode == 0, err
    assert sorted({row["config_id"] for row in json.loads(out) if row["error"] is None}) == [0]
    with gpu_lock(0, wait=True, timeout_s=WAIT_S):  # and the API takes it, now free
        pass


@pytest.mark.parametrize("mode", [0o1777, 0o755], ids=["sticky, open to all", "her own"])
def test_a_lock_folder_another_user_made_is_refused_in_one_line(
    tmp_path, shared, other_user, monkeypatch, mode
):
    """NSPROF_LOCK_DIR names a folder not made yet, and the other user makes it first: a folder's owner may
    remove any file in it, sticky or not, so she could delete the lock, its claims and its record while root
    holds it, and the next nsprof would take the GPU beside the holder. Such a folder is refused, named."""
    folder = shared / "nsprof-locks"

    def make(me):
        folder.mkdir()
        folder.chmod(mode)
        me.say({"made": 1})

    assert other_user(make).read() == {"made": 1}
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(folder))
    with pytest.raises(NsprofError, match=f"uid {OTHER}") as caught:
        with gpu_lock(0):
            pytest.fail("took a lock in a folder another user owns")
    assert str(folder) in str(caught.value) and "\n" not in str(caught.value)
    assert list(folder.iterdir()) == [], "nothing of root's is left in her folder"
    done = _profile(tmp_path, "run", backend="ncu", timeout_s=WAIT_S)  # the CLI, with the env of the test
    assert done.returncode == 2, done.stderr
    assert str(folder) in _one_error_line(done.stderr)


def test_an_output_over_another_users_file_takes_none_of_its_mode(tmp_path, shared, other_user):
    """The other user leaves a setuid, world-writable file at the name of root's --csv: root's rows took its
    mode (-rwsrwsrwx root), and she could then rewrite root's measurements. Root's output gets the umask's
    mode, as a new file does."""
    out = shared / "res.csv"

    def plant(me):
        out.write_text("x\n")
        out.chmod(0o6777)
        me.say({"planted": 1})

    assert other_user(plant).read() == {"planted": 1}
    done = _profile(tmp_path, "run", "--csv", str(out))
    assert done.returncode == 0, done.stderr
    st = out.stat()
    umask = os.umask(0o022)
    os.umask(umask)
    assert st.st_uid == 0 and "config_id" in out.read_text()
    assert stat.S_IMODE(st.st_mode) == 0o666 & ~umask, oct(st.st_mode)


def test_serve_makes_no_folder_through_a_link_planted_above_the_lock_folder(tmp_path, shared, other_user):
    """NSPROF_LOCK_DIR names a folder not made yet, <shared>/x/locks, and the other user has planted
    <shared>/x -> a private folder of this user's: `nsprof serve` refuses in one line and makes nothing where
    her link leads (the first folder there is checked before anything is made in it)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link = shared / "x"

    def plant(me):
        os.symlink(private, link)
        me.say({"planted": 1})

    assert other_user(plant).read() == {"planted": 1}
    env = {**_client_env(tmp_path), "NSPROF_LOCK_DIR": str(link / "locks")}
    done = subprocess.run(
        [sys.executable, str(STANDINS), "serve", "--backend", "nsys", "--idle-exit", "5"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert f"uid {OTHER}" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(private.iterdir()) == [], "a folder was made where her link leads"


def test_an_output_folder_linked_after_the_check_is_refused_not_written_through(
    tmp_path, shared, other_user, monkeypatch
):
    """An output <shared>/new/rows.csv whose folder is not there yet: the other user who plants
    <shared>/new -> a folder of this user's just after the way was checked (stood in for: she plants it at
    the next call, _standard_stream) has the output refused, never written over this user's file there."""
    import nsprof.host.owned as owned

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    precious = private / "rows.csv"
    precious.write_text("precious\n")
    link = shared / "new"

    def plant(me):
        me.say({"ready": 1})
        me.hear()
        os.symlink(private, link)
        me.say({"planted": 1})

    attacker = other_user(plant)
    assert attacker.read() == {"ready": 1}
    original = owned._standard_stream

    def race(path):
        attacker.tell("go")
        assert attacker.read() == {"planted": 1}
        return original(path)

    monkeypatch.setattr(owned, "_standard_stream", race)
    with pytest.raises(NsprofError, match=f"uid {OTHER}"):
        with owned.written_over(link / "rows.csv") as out:
            out.write(b"config_id\n0\n")
    assert precious.read_text() == "precious\n"
    assert sorted(p.name for p in private.iterdir()) == ["rows.csv"]  # no temporary file left there
