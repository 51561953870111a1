"""The ways to what nsprof writes: an output named in a folder of another user's, $XDG_CACHE_HOME (the saved
target views) in a folder she may write or one nsprof cannot use, and an output that is a standard stream
(/dev/stdout, root's link, never replaced by a file). She is a real second user
(tests/test_shared_machine.py's OtherUser: a forked child of uid OTHER), root the victim.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, run_nsprof, wait_for
from test_shared_machine import OTHER, WAIT_S, other_user, shared  # noqa: F401 - fixtures

import nsprof.host.owned  # noqa: F401 - imported here: the other user's child cannot read this Python's files
import nsprof.render.html  # noqa: F401
import nsprof.space_view  # noqa: F401

REPORT = FIXTURES / "fixture_node_raw.csv"  # an ncu CSV that `nsprof analyze` reads in a moment


def _precious(tmp_path: Path) -> Path:
    """A file of root's that nobody else can read or write."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    return victim


# --- written_over: an output in a folder another user owns -------------------------------------------------


def _swap_the_temporary_output(me, folder: str, name: str, target: str) -> None:
    """In her own folder: a link to `target` put over the temporary file root's output is written to
    (`.NAME.XXXXXXXX.csv`, mkstemp's) the moment it appears (one rename)."""
    link = Path(folder) / f".link-{os.getpid()}"
    os.symlink(target, link)
    me.say({"ready": True})
    prefix = f".{name}."
    while True:
        hits = [entry for entry in os.listdir(folder) if entry.startswith(prefix)]
        if hits:
            os.rename(link, Path(folder) / hits[0])
            me.say({"swapped": hits[0]})
            return


def test_an_output_in_a_folder_another_user_owns_is_never_written_or_chmodded_through_her_link(
    tmp_path,
    shared,  # noqa: F811
    other_user,  # noqa: F811
):
    """Root writes `--csv` into a folder of the other user's (mode 0755: only she may write it; not refused).
    She replaces the temporary file's name by a link to a file of root's as soon as it appears: root never
    writes or chmods through it (it writes the file it made and holds open), and says so in one line where
    its file was replaced before the rename."""
    victim = _precious(tmp_path)
    folder = shared / "hers"

    def make(me):
        folder.mkdir(mode=0o755)
        me.say({"made": 1})

    assert other_user(make).read() == {"made": 1}
    out = folder / "out.csv"
    for _ in range(10):  # she wins the race mostly; a few tries make it sure
        attacker = other_user(_swap_the_temporary_output, str(folder), out.name, str(victim))
        assert attacker.read() == {"ready": True}
        done = run_nsprof("analyze", REPORT, "--csv", out, in_process=True)
        with contextlib.suppress(ProcessLookupError):  # done, or still looking: its fixture reaps it
            os.kill(attacker.pid, signal.SIGKILL)
        if victim.read_text() != "precious\n" or stat.S_IMODE(victim.stat().st_mode) != 0o600:
            break
    assert victim.read_text() == "precious\n", (
        f"root wrote its rows through the other user's link into {victim}: {victim.read_text()[:80]!r} "
        f"(exit {done.returncode})"
    )
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600, oct(victim.stat().st_mode)
    # written into the file nsprof made: whole where she left it alone, else one line saying why not
    # (her file put in its place, or her link at the name: refused) and where the rows are kept
    assert done.returncode == 0 or done.stderr.startswith("nsprof: error: "), done.stderr
    assert len(done.stderr.strip().splitlines()) <= 1, done.stderr


# --- space_view: saved target views under $XDG_CACHE_HOME ---------------------------------------------------

# Imported by the child that describes it: says so, then waits for the test's word (a hang guard only).
WAITING_TARGET = textwrap.dedent("""
    import os, pathlib, time
    from nsprof.space import Space

    HERE = pathlib.Path(__file__).parent
    (HERE / "importing").write_text(str(os.getpid()))
    deadline = time.monotonic() + 300
    while not (HERE / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    space = Space(name="t", configs=[{"ns": 1000}], build=lambda config: (lambda: None), device="cpu")
""")
READ = "import sys\nfrom nsprof.space_view import read_target\nread_target(sys.argv[1], bound_s=float(sys.argv[2]))\n"


def test_saved_views_are_never_written_or_pruned_through_a_folder_another_user_may_write(
    tmp_path,
    shared,  # noqa: F811
    other_user,  # noqa: F811
):
    """$XDG_CACHE_HOME names a folder that others may write (made first by the other user, mode 0777, in a
    sticky folder as /tmp). Saved views are written and pruned by name, so root keeps none there: were it to,
    she could move its nsprof/ away while the target is imported and put hers there, whose targets is a
    link to a folder of root's, for root to write into and prune its month-old *.json files."""
    data = tmp_path / "data"  # root's own, nobody else may enter it
    data.mkdir(mode=0o700)
    kept = data / "results-2023.json"
    kept.write_text('{"precious": true}\n')
    long_ago = time.time() - 90 * 86400
    os.utime(kept, (long_ago, long_ago))
    xdg = shared / "xdg-cache"

    def attack(me):
        xdg.mkdir()
        xdg.chmod(0o777)
        me.say({"made": 1})
        me.hear()  # root is importing the target
        if not (xdg / "nsprof").exists():  # root keeps no saved views here
            me.say({"swapped": 0})
            return
        os.rename(xdg / "nsprof", xdg / "nsprof-roots")
        (xdg / "nsprof").mkdir()
        os.symlink(str(data), xdg / "nsprof" / "targets")
        me.say({"swapped": 1})

    attacker = other_user(attack)
    assert attacker.read() == {"made": 1}
    (tmp_path / "t.py").write_text(WAITING_TARGET)
    reader = subprocess.Popen(
        [sys.executable, "-c", READ, "t.py:space", str(WAIT_S)],
        cwd=tmp_path,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: (tmp_path / "importing").exists() or reader.poll() is not None, WAIT_S)
        assert reader.poll() is None, reader.communicate()
        attacker.tell("swap")  # she swaps root's folder there, if root made one
        attacker.read()
        (tmp_path / "go").write_text("")
        _, err = reader.communicate(timeout=WAIT_S)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert reader.returncode == 0, err
    assert kept.exists(), f"root pruned its own {kept} through the other user's link"
    assert sorted(p.name for p in data.iterdir()) == [kept.name], "root saved a view into its own folder"
    made = [p.name for p in xdg.iterdir() if p.lstat().st_uid == 0]
    assert made == [], f"root keeps its saved views in a folder she may write: {made}"


TARGET = FIXTURES.parent / "targets" / "faulty_cpu.py"


# --- the saved target views: a cache folder nsprof cannot use is no error ------------------------------------


def test_a_cache_folder_that_is_a_file_on_the_way_saves_no_views_and_tune_still_runs(tmp_path):
    """$XDG_CACHE_HOME/nsprof is a file: no saved views, but the tune runs."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "nsprof").write_text("not a folder\n")
    done = run_nsprof(
        "tune", f"{TARGET}:space", "--backend", "ncu", "--configs", "0,2", "--mode", "direct", "--reps", "1",
        "--no-feed-back", "--no-tuner-pick", "--no-store", "--work-dir", tmp_path / "w",
        env={"XDG_CACHE_HOME": str(cache)}, standins=True, in_process=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _saved_path_as_the_user(me, home: str) -> None:
    os.environ.pop("XDG_CACHE_HOME", None)
    os.environ["HOME"] = home
    from nsprof.space_view import _saved_path

    path = _saved_path("x")
    me.say({"path": None if path is None else str(path)})


def test_a_cache_folder_this_user_cannot_enter_saves_no_views(tmp_path, shared, other_user):  # noqa: F811
    """~/.cache/nsprof made by root once (sudo keeping HOME, root's umask 077): the user cannot enter it.
    nsprof saves and reads no views there, and goes on (no 'Permission denied' ending the command)."""
    home = shared / "home"
    (home / ".cache" / "nsprof" / "targets").mkdir(parents=True)
    for folder in (home, home / ".cache"):
        os.chown(folder, OTHER, OTHER)
    (home / ".cache" / "nsprof").chmod(0o700)  # root's
    assert other_user(_saved_path_as_the_user, str(home)).read() == {"path": None}


# --- an output at /dev/stdout, standard output a file -------------------------------------------------------


def _page_to_dev_stdout(me, into: str) -> None:
    from nsprof.render.html import write_page

    fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.close(fd)
    write_page("<p>page</p>\n", "/dev/stdout")
    me.say({"wrote": True})


def test_an_output_at_dev_stdout_of_a_user_who_cannot_write_dev_goes_to_the_file_stdout_is(
    shared,  # noqa: F811
    other_user,  # noqa: F811
):
    """`nsprof ... --html /dev/stdout > page.html` as a user other than root: /dev is not hers to write
    in, and /dev/stdout (root's link) leads to her file, standard output: the page goes there."""
    page = shared / "page.html"
    assert other_user(_page_to_dev_stdout, str(page)).read() == {"wrote": True}
    assert page.read_text() == "<p>page</p>\n"


DEV_STDOUT = """
set -e
mount --bind /dev "$REAL"
mount -t tmpfs none /dev
for name in null zero full random urandom tty; do ln -s "$REAL/$name" /dev/$name; done
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
"$PYTHON" -m nsprof analyze "$REPORT" --csv /dev/stdout > "$ROWS" 2> "$ERR" || true
if [ -L /dev/stdout ]; then echo "a link still"; else ls -l /dev/stdout; fi
"""


def test_root_writing_an_output_at_dev_stdout_into_a_file_never_replaces_dev_stdout(tmp_path):
    """`nsprof analyze r --csv /dev/stdout > rows.csv` as root (a container's user): /dev/stdout, a link to
    a regular file, is standard output: the rows go to rows.csv, and /dev/stdout stays a link (a file
    written beside it and renamed onto it would replace it for the whole machine). Run in a mount namespace
    of its own, with a /dev of its own (the machine's is never touched)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare: a /dev of the test's own")
    real = tmp_path / "realdev"
    real.mkdir()
    env = {
        **os.environ,
        "REAL": str(real),
        "PYTHON": sys.executable,
        "REPORT": str(FIXTURES / "fixture.sqlite"),
        "ROWS": str(tmp_path / "rows.csv"),
        "ERR": str(tmp_path / "err"),
    }
    done = subprocess.run(["unshare", "-m", "sh", "-c", DEV_STDOUT], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert done.stdout.strip() == "a link still", done.stdout
    assert (tmp_path / "rows.csv").read_text().startswith("file,source,"), (tmp_path / "err").read_text()
