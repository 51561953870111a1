"""How `nsprof analyze` takes its inputs and gives its output: FIFOs, pipes and standard input and a
reader that closes the pipe early through real child processes; outputs that would overwrite an
input and the messages for paths that are not readable reports through nsprof's main() in this
process (run_nsprof(in_process=True)).

Expected values come from the csv module's own read of the fixture, never from nsprof.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES, run_nsprof

RAW = FIXTURES / "fixture_node_raw.csv"
SQLITE = FIXTURES / "fixture.sqlite"
REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 120  # generous: only a hang should ever reach it


def env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def nsprof_argv(*args) -> list[str]:
    return [sys.executable, "-m", "nsprof", *map(str, args)]


def raw_kernel_count() -> int:
    with open(RAW, newline="") as handle:
        return len(list(csv.DictReader(handle))) - 1  # minus the units row


def assert_one_line_error(result, *fragments: str) -> str:
    err = result.stderr.decode() if isinstance(result.stderr, bytes) else result.stderr
    assert result.returncode == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsprof: error:"), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# --- FIFOs, pipes, standard input --------------------------------------------------------------


def test_fifo_with_a_writer_process_is_read_once(tmp_path):
    fifo = tmp_path / "report.csv"
    os.mkfifo(fifo)
    # A real writer process: the FIFO can only be read once, so a second read would be empty.
    writer = subprocess.Popen(["/bin/sh", "-c", f'cat "{RAW}" > "{fifo}"'])
    try:
        result = run_nsprof("analyze", fifo, "--json", text=False)
    finally:
        writer.wait(timeout=DEADLINE_S)
    assert result.returncode == 0, result.stderr.decode()
    rows = json.loads(result.stdout)
    assert len(rows) == raw_kernel_count()
    assert {row["file"] for row in rows} == {str(fifo)}


def test_fifo_without_a_writer_fails_instead_of_hanging(tmp_path):
    fifo = tmp_path / "nobody-writes.csv"
    os.mkfifo(fifo)
    result = run_nsprof("analyze", fifo, env={"NSPROF_STREAM_WAIT_S": "1"}, text=False)
    assert_one_line_error(result, str(fifo), "no data")


def test_stdin_pipe_via_dash_and_dev_stdin():
    data = RAW.read_bytes()
    for name in ("-", "/dev/stdin"):
        result = run_nsprof("analyze", name, "--json", input=data, text=False)
        assert result.returncode == 0, (name, result.stderr.decode())
        assert len(json.loads(result.stdout)) == raw_kernel_count(), name


def test_process_substitution_is_read_once():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash for <(...)")
    command = " ".join(f"'{a}'" for a in nsprof_argv("analyze")) + f" <(cat '{RAW}') --json"
    result = subprocess.run([bash, "-c", command], capture_output=True, timeout=DEADLINE_S, env=env())
    assert result.returncode == 0, result.stderr.decode()
    assert len(json.loads(result.stdout)) == raw_kernel_count()


def test_sqlite_through_a_pipe():
    with sqlite3.connect(SQLITE.resolve().as_uri() + "?mode=ro", uri=True) as conn:
        kernels = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    result = run_nsprof("analyze", "-", "--json", input=SQLITE.read_bytes(), text=False)
    assert result.returncode == 0, result.stderr.decode()
    assert len(json.loads(result.stdout)) == kernels


def test_a_pipe_larger_than_the_bound_is_refused():
    result = run_nsprof(
        "analyze", "-", input=RAW.read_bytes(), env={"NSPROF_MAX_STREAM_BYTES": "1000"}, text=False
    )
    assert_one_line_error(result, "standard input", "1000 bytes")


def test_a_stream_that_is_no_report_is_refused_at_its_head_not_at_the_bound():
    # /dev/zero never ends: its first bytes say it is no report, so nsprof stops there, whatever the bound.
    result = run_nsprof(
        "analyze", "/dev/zero", env={"NSPROF_MAX_STREAM_BYTES": str(1 << 40)}, timeout=DEADLINE_S
    )
    assert_one_line_error(result, "/dev/zero", "not a report nsprof reads")


def test_a_piped_ncu_csv_with_program_output_above_its_header_is_read(tmp_path):
    # ncu's CSV on stdout follows what the program printed: the header can come after the first
    # megabytes (more than one read of the pipe), and the stream is still a report.
    text = "".join(f"program output line {i}\n" for i in range(60_000)) + RAW.read_text()
    assert len(text) > 1 << 20
    result = run_nsprof("analyze", "-", "--json", input=text.encode(), text=False)
    assert result.returncode == 0, result.stderr.decode()
    assert len(json.loads(result.stdout)) == raw_kernel_count()


def test_dash_on_a_terminal_is_refused():
    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    try:
        result = run_nsprof("analyze", "-", stdin=follower, text=False)
    finally:
        os.close(leader)
        os.close(follower)
    assert_one_line_error(result, "standard input", "terminal")


# --- a reader that closes the pipe -------------------------------------------------------------


def test_closed_pipe_exits_0_with_nothing_on_stderr(tmp_path):
    # Many rows, so that the JSON (one line of ~640 kB) is far larger than a pipe buffer (64 kB).
    big = tmp_path / "big.csv"
    lines = RAW.read_text().splitlines(keepends=True)
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    body = lines[header + 2 :]
    big.write_text("".join(lines[: header + 2]) + "".join(body * 40))
    for args in (("analyze", big, "--json"), ("analyze", big)):
        nsprof = subprocess.Popen(
            nsprof_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env()
        )
        # A reader like `head -c 4096`: a little, then it closes its end while nsprof still writes
        # (a reader of one line would read the whole JSON line first: no closed pipe to meet).
        reader = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.buffer.read(4096)"], stdin=nsprof.stdout
        )
        nsprof.stdout.close()
        reader.wait(timeout=DEADLINE_S)
        err = nsprof.stderr.read()
        nsprof.wait(timeout=DEADLINE_S)
        assert (nsprof.returncode, err) == (0, b""), (args, err.decode())


# --- outputs that would overwrite an input -----------------------------------------------------


@pytest.mark.parametrize("option", ["--csv", "--parquet"])
@pytest.mark.parametrize("alias", ["same", "relative", "symlink", "hardlink"])
def test_output_equal_to_an_input_is_refused(tmp_path, option, alias):
    report = tmp_path / "r.csv"
    shutil.copy(RAW, report)
    before = report.read_bytes()
    out = {
        "same": report,
        "relative": tmp_path / "sub" / ".." / "r.csv",
        "symlink": tmp_path / "link.csv",
        "hardlink": tmp_path / "hard.csv",
    }[alias]
    (tmp_path / "sub").mkdir()
    if alias == "symlink":
        out.symlink_to(report)
    elif alias == "hardlink":
        os.link(report, out)
    result = run_nsprof("analyze", report, option, out, text=False, in_process=True)
    assert_one_line_error(result, "would overwrite", str(report))
    assert report.read_bytes() == before


# --- messages: the real cause, the path as given -----------------------------------------------


@pytest.mark.parametrize(
    ("name", "pack", "tool"),
    [
        ("r.csv.gz", gzip.compress, "gzip"),
        ("r.dat", gzip.compress, "gzip"),
        ("r.dat", lzma.compress, "xz"),
        ("r.dat", bz2.compress, "bzip2"),
        ("r.dat", None, "zip"),
        ("r.dat", lambda d: bytes.fromhex("28b52ffd") + d[:100], "zstd"),
    ],
)
def test_compressed_reports_are_named_by_content(tmp_path, name, pack, tool):
    path = tmp_path / name
    if pack is None:
        with zipfile.ZipFile(path, "w") as archive:
            archive.write(RAW, "r.csv")
    else:
        path.write_bytes(pack(RAW.read_bytes()))
    result = run_nsprof("analyze", path, text=False, in_process=True)
    assert_one_line_error(result, str(path), f"{tool}-compressed")


def test_symlink_loop_is_named(tmp_path):
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    line = assert_one_line_error(
        run_nsprof("analyze", loop, text=False, in_process=True), str(loop), "symbolic link"
    )
    assert "no such file" not in line


def test_dangling_symlink_names_its_target(tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "gone.csv")
    assert_one_line_error(run_nsprof("analyze", link, text=False, in_process=True), str(link), "gone.csv")


def test_errors_show_the_path_as_given(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "empty.sqlite").write_bytes(b"")
    (tmp_path / "sub" / "junk.csv").write_text("name,value\nx,1\n")
    result = run_nsprof("analyze", "sub/empty.sqlite", cwd=tmp_path, in_process=True)
    assert_one_line_error(result, "sub/empty.sqlite: empty file")
    result = run_nsprof("analyze", "sub/junk.csv", cwd=tmp_path, in_process=True)
    assert_one_line_error(result, "sub/junk.csv: not a report")
    # /dev/null is a character device: read once as a stream, named as given
    assert_one_line_error(run_nsprof("analyze", "/dev/null", text=False, in_process=True), "/dev/null: empty")


def test_unreadable_file_names_permission(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    path = tmp_path / "secret.csv"
    shutil.copy(RAW, path)
    path.chmod(0)
    assert_one_line_error(run_nsprof("analyze", path, text=False), str(path), "permission denied")
