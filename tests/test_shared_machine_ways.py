"""Another local user's folder on the way to what nsprof writes: an output named in a folder of hers, and
$XDG_CACHE_HOME (the saved target views) in a folder she may write. She is a real second user
(tests/test_shared_machine.py's OtherUser: a forked child of uid OTHER), root the victim.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import FIXTURES, run_nsprof, wait_for
from test_shared_machine import OTHER, WAIT_S, other_user, shared  # noqa: F401 - fixtures

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
    """Root writes `--csv` into a folder of the other user's (mode 0755: only she may write it, which
    _check_way lets pass). written_over makes its temporary file there, then writes it, chmods it and
    renames it by its name: she replaces that name by a link to a file of root's as soon as it appears, and
    root overwrites that file with its rows and makes it mode 0644 (readable by all)."""
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
    sticky folder as /tmp). _saved_path checks only its last folder (nsprof/targets: root's, 0700), never
    the way there, and the view is saved and the folder pruned later, by name: while the target is
    imported she moves root's nsprof/ away and puts a folder of hers there, whose targets is a link to a
    folder of root's. Root then writes its view there and removes the *.json files of that folder that
    nobody touched for a month."""
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
