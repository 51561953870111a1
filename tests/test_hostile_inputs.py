"""Files another user made, or that came from elsewhere, opened by nsprof: an nsys SQLite export, a results
store, a saved run. Reading one never writes beside it, never runs without bound, and anything odd in it
is one line (an ncu report's own reading: tests/test_fuzz_parsers.py)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat

import pytest
from conftest import FIXTURES, run_nsprof

OTHER = 54321  # another local user's uid and gid (no passwd entry needed)


def _one_line(done) -> str:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("nsprof: error:") and "internal error" not in line, line
    return line


def test_an_nsys_export_in_wal_mode_is_read_without_a_file_made_or_written_beside_it(tmp_path):
    """SQLite opens a WAL database's -shm file read-write even with mode=ro, and as root hands -wal and -shm
    to the database's owner: another user's WAL export beside hard links to root's files made them hers
    (and wrote SQLite's index into one). A report is opened immutable: nothing beside it is touched."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the report is another uid's")
    folder = tmp_path / "hers"
    folder.mkdir()
    report = folder / "r.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", report)
    with sqlite3.connect(report) as db:
        assert db.execute("PRAGMA journal_mode=wal").fetchone() == ("wal",)
    victims = {}
    for suffix in ("-wal", "-shm"):
        victim = tmp_path / f"victim{suffix}"
        victim.write_text("precious\n")
        victim.chmod(0o600)
        os.link(victim, folder / f"r.sqlite{suffix}")  # what she planted (with fs.protected_hardlinks=0)
        victims[suffix] = victim
    for path in (folder, report):
        os.chown(path, OTHER, OTHER)
    done = run_nsprof("analyze", str(report), in_process=True)
    assert done.returncode == 0, done.stderr
    for victim in victims.values():
        st = victim.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode), victim.read_text()) == (0, 0o600, "precious\n")
    os.unlink(folder / "r.sqlite-wal")
    os.unlink(folder / "r.sqlite-shm")
    assert run_nsprof("analyze", str(report), in_process=True).returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == ["r.sqlite"], "nothing made beside the report"


@pytest.fixture
def store(tmp_path):
    from nsprof.store import ResultStore

    path = tmp_path / "results.sqlite"
    with ResultStore(path) as made:
        made.start_run(target="t.py:space")
    return path


@pytest.mark.parametrize(
    "edit, named",
    [
        (
            "DROP TABLE runs; CREATE VIEW runs AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
            "SELECT i AS id, '' AS started_at, '' AS target FROM n",
            "view runs",
        ),
        ("CREATE TRIGGER t AFTER INSERT ON measurements BEGIN DELETE FROM runs; END", "trigger t"),
    ],
    ids=["a view that never ends", "a trigger"],
)
def test_a_store_holding_what_nsprof_never_makes_is_refused(store, edit, named):
    """A store whose `runs` is an endless recursive view filled the disk with SQLite's sort and took no
    signal; a trigger would act on every row nsprof writes. nsprof makes neither: refused in one line."""
    with sqlite3.connect(store) as db:
        db.executescript(edit)
    line = _one_line(run_nsprof("results", str(store), in_process=True, timeout=60))
    assert named in line and str(store) in line


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_saved_run_that_is_no_file_or_too_large_is_one_line(tmp_path, kind, monkeypatch):
    """`results FILE.json` read the whole input: a link to /dev/zero grew until the OOM killer came, and a
    FIFO nothing writes to hung it for good. A saved run is a regular file of a bounded size."""
    import nsprof.commands.results as results

    path = tmp_path / "run.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        monkeypatch.setattr(results, "MAX_SAVED_BYTES", 1000)
        path.write_text(json.dumps({"format": "x", "pad": "y" * 2000}))
    line = _one_line(run_nsprof("results", str(path), in_process=True, timeout=60))
    assert str(path) in line
    assert ("not a regular file" in line) if kind != "huge" else ("more than 1000" in line)


def _saved_tune(tmp_path) -> dict:
    (tmp_path / "t.py").write_text(
        "from nsprof.space import Space\n"
        "space = Space(configs=[{'n': i} for i in range(3)], build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = run_nsprof(
        "tune", "t.py:space", "--backend", "nsys", "--mode", "direct", "--reps", "2", "--json", "--no-store",
        "--no-feed-back", "--no-tuner-pick", "--budget-s", "0", cwd=tmp_path, standins=True, in_process=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_saved_runs_column_type_is_one_nsprof_writes(tmp_path):
    """A saved run's column types were taken as written: "S2000000000" (a 2 GB byte string per value) made
    a 12 KB file allocate gigabytes, then an internal error. Only the types nsprof writes are read."""
    saved = _saved_tune(tmp_path)
    for truth in saved["truths"]:
        truth["columns"]["mode"] = "S2000000000"
    (tmp_path / "big.json").write_text(json.dumps(saved))
    line = _one_line(run_nsprof("results", "big.json", cwd=tmp_path, in_process=True, timeout=60))
    assert "S2000000000" in line and "column type" in line


def test_a_saved_run_nested_past_what_json_reads_is_one_line(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100000)
    line = _one_line(run_nsprof("results", "deep.json", cwd=tmp_path, in_process=True, timeout=60))
    assert "deep.json" in line and "JSON" in line


def test_bidirectional_overrides_from_outside_are_shown_escaped():
    """A kernel or range name holding U+202E (right-to-left override) reordered the rest of the terminal's
    line: shown escaped, as a control character is."""
    from nsprof.errors import printable

    for c in ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]:
        shown = printable(f"gemm{c}kernel")
        assert c not in shown and f"\\u{ord(c):04x}" in shown


def test_a_report_another_user_could_change_is_read_from_a_copy_of_ones_own(tmp_path):
    """Parsers open a report several times (a sniff, the parse, an ncu report's command-line scan through a
    mapping): another user who swapped hers for a FIFO meanwhile hung `analyze`, and one who truncated it
    under the mapping killed it (SIGBUS). A report of another user's, or in a folder others may write
    without the sticky bit, is read once into a private copy; this user's own in its own folder as it is."""
    from nsprof.reports.inputs import local_copy

    own = tmp_path / "own.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", own)
    with local_copy(own) as local:
        assert local == own
    if os.geteuid() != 0:
        pytest.skip("needs root: a file of another uid")
    hers = tmp_path / "hers.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", hers)
    os.chown(hers, OTHER, OTHER)
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    mine_there = open_folder / "mine.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", mine_there)
    for path in (hers, mine_there):
        with local_copy(path) as local:
            assert local != path and local.name == path.name and local.read_bytes() == path.read_bytes()
            assert stat.S_IMODE(local.parent.stat().st_mode) == 0o700
        assert not local.exists()
    done = run_nsprof("analyze", str(hers), in_process=True)
    assert done.returncode == 0 and str(hers) in done.stdout + done.stderr, done.stderr
