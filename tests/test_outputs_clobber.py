"""An output never takes the place of what a command reads or of another output: --html, --plot, --save,
--export, --csv and --parquet naming the results store, the target's source, the saved run or report
read, or one another's file (through a link too) are refused in one line before anything is written, and
that file is left as it was. Options only: click's CliRunner, in this process."""

from __future__ import annotations

import shutil

import pytest
from conftest import FIXTURES, run_nsprof

SOURCE = FIXTURES.parent / "targets" / "faulty_cpu.py"


@pytest.fixture
def files(tmp_path):
    target = tmp_path / "t.py"
    shutil.copy(SOURCE, target)
    from nsprof.store import ResultStore

    store = tmp_path / "results.sqlite"
    with ResultStore(store):  # an empty store of nsprof's own
        pass
    saved = tmp_path / "saved.json"
    saved.write_text('{"stands for": "a saved tune"}')
    report = tmp_path / "r.csv"
    shutil.copy(FIXTURES / "fixture_node_raw.csv", report)
    link = tmp_path / "link.html"
    link.symlink_to(store)
    return {"target": target, "store": store, "saved": saved, "report": report, "link": link}


CASES = {
    "tune --html the target": ("tune {target}:space --no-store --html {target}", "target"),
    "tune --html the store": ("tune {target}:space --store {store} --html {store}", "store"),
    "tune --html a link to the store": ("tune {target}:space --store {store} --html {link}", "store"),
    "validate --save the target": ("validate {target}:space --save {target}", "target"),
    "validate --save and --html one file": ("validate {target}:space --save {saved} --html {saved}", "saved"),
    "profile --csv the target": ("profile {target}:space --csv {target}", "target"),
    "results --export the store": ("results {store} --export {store}", "store"),
    "results --html the saved run": ("results {saved} --html {saved}", "saved"),
    "analyze --csv and --parquet one file": ("analyze {report} --csv {saved} --parquet {saved}", "saved"),
    "analyze --csv the report": ("analyze {report} --csv {report}", "report"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_that_would_overwrite_an_input_or_another_output_is_refused(files, tmp_path, case):
    command, kept = CASES[case]
    before = {name: path.read_bytes() for name, path in files.items() if name != "link"}
    done = run_nsprof(*command.format(**files).split(), in_process=True, cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(files[kept].name) in lines[0], done.stderr
    assert "would overwrite" in lines[0] or "name one file" in lines[0], lines[0]
    assert {name: path.read_bytes() for name, path in files.items() if name != "link"} == before


def test_an_output_that_is_a_link_loop_is_one_line(files, tmp_path):
    (tmp_path / "loopa").symlink_to(tmp_path / "loopb")
    (tmp_path / "loopb").symlink_to(tmp_path / "loopa")
    done = run_nsprof(
        "tune", f"{files['target']}:space", "--no-store", "--html", "loopa", in_process=True, cwd=tmp_path
    )
    assert done.returncode == 2 and "internal error" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_an_output_over_the_source_of_a_module_target_is_refused(files, tmp_path, monkeypatch):
    # module:space, found on sys.path (PYTHONPATH): its file is the target's source as file.py:space's is
    monkeypatch.syspath_prepend(str(tmp_path))
    before = files["target"].read_bytes()
    done = run_nsprof(
        "tune", "t:space", "--no-store", "--html", files["target"], in_process=True, cwd=tmp_path
    )
    assert done.returncode == 2 and "would overwrite the target's source" in done.stderr, done.stderr
    assert files["target"].read_bytes() == before


def test_an_output_whose_name_is_a_link_replaces_the_link_and_never_writes_through_it(tmp_path):
    """A link planted at an output's name (in a folder others may write) would have nsprof write over the
    file it points to: the output is written beside it and renamed onto the name, the link replaced."""
    names = ["p.html", "p.png", "rows.csv", "rows.parquet", "store.csv"]
    for name in names:
        (tmp_path / f"victim-{name}").write_text("precious\n")
        (tmp_path / name).symlink_to(tmp_path / f"victim-{name}")
    target = FIXTURES.parent / "targets" / "faulty_cpu.py"
    runs = [
        ("tune", f"{target}:space", "--backend", "ncu", "--configs", "0,2", "--mode", "direct", "--reps", "1",
         "--no-feed-back", "--no-tuner-pick", "--store", tmp_path / "s.sqlite", "--work-dir", tmp_path / "w",
         "--html", tmp_path / "p.html", "--plot", tmp_path / "p.png"),
        ("analyze", FIXTURES / "fixture.sqlite", "--csv", tmp_path / "rows.csv", "--parquet", tmp_path / "rows.parquet"),
        ("results", tmp_path / "s.sqlite", "--export", tmp_path / "store.csv"),
    ]  # fmt: skip
    for args in runs:
        done = run_nsprof(*args, standins=True, in_process=True)
        assert done.returncode == 0, done.stderr
    for name in names:
        assert (tmp_path / f"victim-{name}").read_text() == "precious\n", name
        assert not (tmp_path / name).is_symlink() and (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary file left"


def test_control_characters_from_a_target_never_reach_the_terminal(tmp_path):
    """A config's value, or what its build raised, printed outside a table's cells (the best line, the notes,
    the error line): escape sequences shown escaped, and a line break in it never starts a line."""
    target = tmp_path / "t.py"
    target.write_text(
        "import nsprof.space\n"
        "def build(config):\n"
        "    if config['i'] == 1:\n"
        "        raise RuntimeError('boom \\x1b[2J cleared\\nnsprof: forged line')\n"
        "    return lambda: None\n"
        "configs = [{'i': 0, 'ns': 1000.0, 'name': 'a\\x1b[31mRED\\x1b[0m\\nbest: forged\\x9b'}, {'i': 1}]\n"
        "space = nsprof.space.Space(configs=configs, build=build, device='cpu')\n"
    )
    done = run_nsprof(
        "tune", f"{target}:space", "--backend", "ncu", "--mode", "direct", "--reps", "1", "--no-store",
        "--no-feed-back", "--no-tuner-pick", "--work-dir", tmp_path / "w", standins=True, in_process=True,
    )  # fmt: skip
    printed = done.stdout + done.stderr
    assert "\x1b" not in printed and "\x9b" not in printed, printed
    assert not [line for line in printed.splitlines() if line.startswith(("best: forged", "nsprof: forged"))]
    assert "\\x1b[31mRED" in done.stdout and "\\x1b[2J cleared" in printed


def test_an_output_that_is_a_pipe_is_written_into_and_a_files_mode_is_kept(tmp_path):
    import os
    import stat
    import threading

    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    done = run_nsprof("analyze", FIXTURES / "fixture.sqlite", "--csv", fifo, in_process=True)
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and got and got[0].startswith(b"file,source,")
    kept = tmp_path / "kept.csv"
    kept.write_text("old\n")
    kept.chmod(0o640)
    done = run_nsprof("analyze", FIXTURES / "fixture.sqlite", "--csv", kept, in_process=True)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text().startswith("file,source,")


def test_a_reports_or_targets_name_is_printed_escaped(tmp_path):
    """A file name is text from outside too: a line break or an escape in it never starts a line or
    reaches the terminal (analyze's and --compare's headers, profile's)."""
    named = tmp_path / "a\x1b[31mb\nforged.csv"
    shutil.copy(FIXTURES / "fixture_node_raw.csv", named)
    for args in ((named,), (named, named, "--compare")):
        done = run_nsprof("analyze", *args, in_process=True)
        assert done.returncode == 0, done.stderr
        assert "\nforged.csv" not in done.stdout and "\\nforged.csv" in done.stdout, done.stdout
    target = tmp_path / "t\x1b[2Jx\nforged.py"
    target.write_text(
        "import nsprof.space\nspace = nsprof.space.Space(configs=[{'ns': 1000.0}], build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = run_nsprof("profile", f"{target}:space", "--backend", "ncu", "--mode", "direct", "--reps", "1",
                      cwd=tmp_path, standins=True, in_process=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\nforged.py" not in done.stdout and "\\nforged.py" in done.stdout, done.stdout
