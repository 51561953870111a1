"""Reports read in place or from a private copy, and nsys exports opened plainly or immutable, as who
could change them decides (the attacks: tests/test_hostile_inputs.py)."""

from __future__ import annotations

import os
import sqlite3

import pytest

from nsprof.host.owned import _others_may_write
from nsprof.reports import inputs
from nsprof.reports.nsys import sqlite as nsys_sqlite


@pytest.fixture
def group_writable_own_folder(tmp_path):
    """A folder of this user's, mode 0775 with this user's private group (umask 002: the default for
    users of Debian/Ubuntu/Fedora's user private groups), which nsprof's own check says no other may write."""
    folder = tmp_path / "mine"
    folder.mkdir()
    os.chmod(folder, 0o775)
    if _others_may_write(os.stat(folder)):
        pytest.skip("this user's group is not private here")
    return folder


def test_an_own_report_in_an_own_group_writable_folder_is_read_in_place(
    group_writable_own_folder, monkeypatch
):
    report = group_writable_own_folder / "big.ncu-rep"
    report.write_bytes(b"x" * 1024)
    copied = []
    monkeypatch.setattr(inputs, "_copied", lambda path, copy: copied.append(path) or copy)
    with inputs.local_copy(report) as local:
        assert local == report  # no copy of a (possibly many-GB) report nobody else can change
    assert not copied


def test_an_own_nsys_export_in_an_own_group_writable_folder_is_not_opened_immutable(
    group_writable_own_folder,
):
    db = group_writable_own_folder / "r.sqlite"
    sqlite3.connect(db).executescript("CREATE TABLE t (x); PRAGMA journal_mode=DELETE;").close()
    assert not nsys_sqlite._immutable(db)  # a writer's lock seen and named, as for any own export


def test_a_copy_of_anothers_report_is_bounded(tmp_path, monkeypatch):
    """Another user's regular file is copied whole, with no bound: one that grows (or is sparse and huge)
    fills the temporary folder; streams are bounded by NSPROF_MAX_STREAM_BYTES."""
    report = tmp_path / "theirs.ncu-rep"
    with open(report, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of size, nothing on disk
    monkeypatch.setenv(inputs.MAX_STREAM_BYTES_ENV, str(1 << 20))
    monkeypatch.setattr(inputs, "others_could_change", lambda path, info: True)  # as for another uid's file
    with pytest.raises(inputs.ReportError):
        with inputs.local_copy(report) as local:
            pytest.fail(f"copied {local.stat().st_size} bytes past the bound")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_an_own_report_in_a_folder_another_user_owns_is_copied(tmp_path):
    """The folder's owner may rename and replace any entry in it (a FIFO swapped in between the sniff and
    the parse), whatever its mode: as owned.py's checks do, the folder's owner counts, not only its mode."""
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    report = folder / "r.ncu-rep"
    report.write_bytes(b"x")
    os.chown(folder, 12345, 12345)
    assert inputs.others_could_change(report, os.stat(report))
    assert nsys_sqlite._immutable(report)
