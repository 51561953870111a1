"""Folders and files the user names (--work-dir, the results store) are used only as this user's own.

The worker reads its job file and nsprof trusts the status file's pid line (to stop the worker) and the
report in the work folder: a folder another user owns or may write would let that user run code as this
user, have nsprof kill a process of their choosing, or plant links nsprof writes through. Such a folder
(or a store in one, or a store file of another user's) is refused in one line before anything runs, and
a folder nsprof makes is mode 0700. Real child processes: nsprof's CLI with the stand-in profilers."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest
from conftest import FIXTURES, run_nsprof

TARGET = f"{FIXTURES.parent / 'targets' / 'faulty_cpu.py'}:space"
OTHER = 54321  # a uid that is not this user's
PROFILE = ("profile", TARGET, "--backend", "nsys", "--configs", "0", "--mode", "direct", "--reps", "1")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a folder of another uid is made by chown")


def _refused(done, path) -> None:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not this user's own" in lines[0] and str(path) in lines[0], done.stderr


def _theirs(folder, name: str, mode: int = 0o755, link: str | None = None):
    """A folder of another uid's, and (given `link`) a link of theirs to it beside it: (folder, link)."""
    made = folder / name
    made.mkdir(mode=mode)
    made.chmod(mode)
    os.chown(made, OTHER, OTHER)
    if link is None:
        return made, None
    (folder / link).symlink_to(made)
    os.lchown(folder / link, OTHER, OTHER)
    return made, folder / link


def _their_fifo(path):
    """A FIFO of another uid's at `path`."""
    os.mkfifo(path)
    os.chown(path, OTHER, OTHER)
    return path


def _writable_by_all(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


def test_a_work_folder_others_may_write_is_refused_and_nothing_is_written_there(tmp_path):
    folder = _writable_by_all(tmp_path)
    _refused(run_nsprof(*PROFILE, "--work-dir", folder, standins=True, cwd=tmp_path, in_process=True), folder)
    assert not list(folder.iterdir())


@as_root
def test_a_work_folder_of_another_user_is_refused(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    os.chown(folder, OTHER, OTHER)
    _refused(run_nsprof(*PROFILE, "--work-dir", folder, standins=True, cwd=tmp_path, in_process=True), folder)
    assert not list(folder.iterdir())


@as_root
def test_a_link_of_another_user_to_a_folder_of_ours_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "planted"
    link.symlink_to(mine)
    os.lchown(link, OTHER, OTHER)
    _refused(run_nsprof(*PROFILE, "--work-dir", link, standins=True, cwd=tmp_path, in_process=True), link)
    assert not list(mine.iterdir())


def test_a_work_folder_nsprof_makes_is_its_users_alone_and_a_link_of_ours_is_followed(tmp_path):
    folder = tmp_path / "new" / "work"
    done = run_nsprof(*PROFILE, "--work-dir", folder, standins=True, cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0 and any(folder.iterdir())
    link = tmp_path / "link"
    link.symlink_to(folder)
    done = run_nsprof(*PROFILE, "--work-dir", link, standins=True, cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_tunes_work_folder_others_may_write_is_refused(tmp_path):
    folder = _writable_by_all(tmp_path)
    tune = ("tune", TARGET, "--backend", "nsys", "--mode", "direct", "--reps", "2", "--no-store")
    _refused(
        run_nsprof(
            *tune, "--no-feed-back", "--work-dir", folder, standins=True, cwd=tmp_path, in_process=True
        ),
        folder,
    )
    assert not list(folder.iterdir())


def test_a_store_in_a_folder_others_may_write_is_refused(tmp_path):
    folder = _writable_by_all(tmp_path)
    store = folder / "results.sqlite"
    tune = ("tune", TARGET, "--backend", "nsys", "--mode", "direct", "--reps", "2", "--no-feed-back")
    _refused(run_nsprof(*tune, "--store", store, standins=True, cwd=tmp_path, in_process=True), folder)
    assert not list(folder.iterdir())


@as_root
def test_a_store_file_of_another_user_is_refused_and_left_as_it_was(tmp_path):
    store = tmp_path / "results.sqlite"
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE planted (x)")
    os.chown(store, OTHER, OTHER)
    before = store.read_bytes()
    tune = ("tune", TARGET, "--backend", "nsys", "--mode", "direct", "--reps", "2", "--no-feed-back")
    _refused(run_nsprof(*tune, "--store", store, standins=True, cwd=tmp_path, in_process=True), store)
    assert store.read_bytes() == before


def test_a_work_folder_in_a_folder_others_may_write_is_refused_unless_that_one_is_sticky(tmp_path):
    outer = _writable_by_all(tmp_path)
    _refused(
        run_nsprof(*PROFILE, "--work-dir", outer / "work", standins=True, cwd=tmp_path, in_process=True),
        outer / "work",
    )
    assert not list(outer.iterdir())
    outer.chmod(0o1777)  # sticky, as /tmp: nobody else can rename the work folder away
    done = run_nsprof(*PROFILE, "--work-dir", outer / "work", standins=True, cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr


def test_a_folder_its_users_own_group_may_write_is_theirs_alone(tmp_path):
    # umask 002 systems give each user a group of their own: its write bit lets nobody else in
    import grp
    import pwd

    me, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(os.getegid())
    shared = [a.pw_name for a in pwd.getpwall() if a.pw_gid == group.gr_gid and a.pw_name != me.pw_name]
    if group.gr_name != me.pw_name or set(group.gr_mem) - {me.pw_name} or shared:
        pytest.skip(f"this user's group {group.gr_name} is not theirs alone")
    folder = tmp_path / "group"
    folder.mkdir()
    folder.chmod(0o775)
    done = run_nsprof(*PROFILE, "--work-dir", folder, standins=True, cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr


@as_root
def test_a_folder_another_group_may_write_is_refused(tmp_path):
    folder = tmp_path / "group"
    folder.mkdir()
    os.chown(folder, os.geteuid(), OTHER)  # a group of other members (or none this machine names)
    folder.chmod(0o775)
    _refused(run_nsprof(*PROFILE, "--work-dir", folder, standins=True, cwd=tmp_path, in_process=True), folder)


@as_root
def test_a_work_folder_reached_through_a_link_of_another_user_is_refused(tmp_path):
    _, planted = _theirs(tmp_path, "theirs", link="planted")
    _refused(
        run_nsprof(*PROFILE, "--work-dir", planted / "work", standins=True, cwd=tmp_path, in_process=True),
        planted / "work",
    )


def test_a_link_of_ours_to_nothing_yet_makes_the_folder_where_it_leads(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "there")
    done = run_nsprof(*PROFILE, "--work-dir", link, standins=True, cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "there").is_dir() and any((tmp_path / "there").iterdir())


@as_root
def test_a_work_folder_in_a_sticky_folder_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    theirs.chmod(0o1777)  # sticky, but its owner may still rename what lies in it
    _refused(
        run_nsprof(*PROFILE, "--work-dir", theirs / "work", standins=True, cwd=tmp_path, in_process=True),
        theirs / "work",
    )


@as_root
def test_a_link_of_another_user_behind_a_link_of_ours_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.symlink_to(mine)
    os.lchown(theirs, OTHER, OTHER)
    ours = tmp_path / "ours"
    ours.symlink_to(theirs / "work")
    _refused(run_nsprof(*PROFILE, "--work-dir", ours, standins=True, cwd=tmp_path, in_process=True), ours)
    assert not list(mine.iterdir())


def test_a_fan_of_links_of_ours_is_walked_in_bounded_time_and_a_path_through_a_file_is_one_line(tmp_path):
    # each link names the next twice over: walked again at every place it appears, 2^22 walks (hours)
    for i in range(1, 23):
        (tmp_path / f"a{i}").symlink_to(f"a{i + 1}/a{i + 1}")
    (tmp_path / "a23").symlink_to(".")
    done = run_nsprof(*PROFILE, "--work-dir", tmp_path / "a1" / "w", standins=True, cwd=tmp_path, timeout=60)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    (tmp_path / "afile").write_text("")
    done = run_nsprof(
        *PROFILE, "--work-dir", tmp_path / "afile" / "a" / "b", standins=True, cwd=tmp_path, in_process=True
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "--work-dir" in lines[0], done.stderr


@as_root
def test_a_link_of_another_user_planted_while_the_folder_is_made_is_refused(tmp_path, monkeypatch):
    """The race: nothing at the name when it is checked, another user's link there by the time it is made
    (mkdir follows it, or finds it): refused, never used through the link."""
    import nsprof.host.owned as owned

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chown(theirs, OTHER, OTHER)
    folder = tmp_path / "wd"
    checks = []
    real_check_way = owned._check_way

    def planting(what, path):
        real_check_way(what, path)
        if not checks:
            folder.symlink_to(theirs / "sub")
            os.lchown(folder, OTHER, OTHER)
        checks.append(path)

    monkeypatch.setattr(owned, "_check_way", planting)
    with pytest.raises(owned.NsprofError, match="not this user's own"):
        owned.own_folder(folder, "--work-dir")


@as_root
def test_an_output_at_another_users_link_is_refused_and_never_written_through(tmp_path):
    from nsprof.errors import NsprofError
    from nsprof.host.owned import written_over

    fifo = _their_fifo(tmp_path / "their.fifo")
    name = tmp_path / "out.csv"
    name.symlink_to(fifo)
    os.lchown(name, OTHER, OTHER)
    with pytest.raises(NsprofError, match="is a link of uid 54321"):
        with written_over(name) as out:
            out.write(b"rows\n")
    assert name.is_symlink() and stat.S_ISFIFO(os.stat(name).st_mode)  # left as it was, nothing written


@as_root
def test_another_users_fifo_in_a_folder_others_may_write_is_refused_and_a_pipe_only_they_could_not_plant_is_written(
    tmp_path,
):
    """/tmp holds another user's FIFO at the name: one line, nothing written, nothing replaced. Root's own
    /dev/stdout leads to a pipe or terminal of the user who ran sudo: written through, as asked, in a folder
    no other user could have put it in (here: a link of ours to their FIFO in a folder of ours)."""
    import threading

    from nsprof.errors import NsprofError
    from nsprof.host.owned import written_over

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = _their_fifo(shared / "rows.csv")
    with pytest.raises(NsprofError, match="FIFO of uid 54321 in a folder others may write"):
        with written_over(planted) as out:
            out.write(b"rows\n")
    assert stat.S_ISFIFO(os.lstat(planted).st_mode)
    private = tmp_path / "private"
    private.mkdir(mode=0o755)
    theirs = _their_fifo(private / "pipe")
    stdout = tmp_path / "stdout"
    stdout.symlink_to(theirs)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(theirs.read_bytes()), daemon=True)
    reader.start()
    with written_over(stdout) as out:
        out.write(b"rows\n")
    reader.join(timeout=30)
    assert got == [b"rows\n"] and stdout.is_symlink()


@as_root
def test_an_output_through_another_users_folder_link_is_refused_and_nothing_is_written_there(tmp_path):
    from nsprof.errors import NsprofError
    from nsprof.host.owned import written_over

    drop, link = _theirs(tmp_path, "their-drop", 0o777, link="out")
    with pytest.raises(NsprofError, match="not this user's own"):
        with written_over(link / "results.csv") as out:
            out.write(b"rows\n")
    assert not list(drop.iterdir())


@as_root
def test_an_output_in_a_folder_only_its_owners_private_group_may_write_is_written(tmp_path, monkeypatch):
    """A container run as root, in a project folder mounted from the host's user with umask 002 (mode 0775,
    the group that user's own): nobody but its owner may write it, so an output there is written."""
    import grp
    import pwd

    from nsprof.host.owned import written_over

    host = pwd.struct_passwd(("host", "x", OTHER, OTHER, "", "/home/host", "/bin/sh"))
    real_getpwuid, real_getgrgid, real_getpwall = pwd.getpwuid, grp.getgrgid, pwd.getpwall
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: host if uid == OTHER else real_getpwuid(uid))
    monkeypatch.setattr(pwd, "getpwall", lambda: [p for p in real_getpwall() if p.pw_gid != OTHER] + [host])
    monkeypatch.setattr(
        grp,
        "getgrgid",
        lambda gid: grp.struct_group(("host", "x", OTHER, [])) if gid == OTHER else real_getgrgid(gid),
    )
    project, _ = _theirs(tmp_path, "project", 0o775)
    with written_over(project / "r.html") as out:
        out.write(b"page\n")
    assert (project / "r.html").read_text() == "page\n"


def test_an_output_under_a_file_is_one_line(tmp_path):
    """An output whose folder's name is taken by a file: NsprofError, one line, never an OSError."""
    from nsprof.errors import NsprofError
    from nsprof.host.owned import written_over

    (tmp_path / "taken").write_text("a file\n")
    with pytest.raises(NsprofError, match="taken/rows.csv failed: File exists"):
        with written_over(tmp_path / "taken" / "rows.csv") as out:
            out.write(b"x")
    assert (tmp_path / "taken").read_text() == "a file\n"
