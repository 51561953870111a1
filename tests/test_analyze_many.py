"""`nsprof analyze` over many files: a bad one is named and hides none of the good ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from conftest import FIXTURES, run_nsprof

from nsprof.cli import cli


def _folder(tmp_path: Path, good: int) -> tuple[list[Path], dict[Path, str]]:
    """`good` copies of real reports, and bad files among them: {bad path: why it is bad}."""
    folder = tmp_path / "reports"
    folder.mkdir()
    sources = [
        FIXTURES / "fixture_node_raw.csv",
        FIXTURES / "fixture_graph_raw.csv",
        FIXTURES / "fixture.sqlite",
    ]
    paths = []
    for index in range(good):
        source = sources[index % len(sources)]
        paths.append(folder / f"r{index:03d}{source.suffix}")
        shutil.copyfile(source, paths[-1])
    bad = {folder / "r005-notes.csv": "not a report nsprof reads", folder / "r010-cut.sqlite": "truncated"}
    (folder / "r005-notes.csv").write_text("these are my notes, not a report\n")
    (folder / "r010-cut.sqlite").write_bytes((FIXTURES / "fixture.sqlite").read_bytes()[:5000])
    return sorted([*paths, *bad]), bad


def test_one_bad_file_among_many_hides_no_good_one(tmp_path):
    files, bad = _folder(tmp_path, good=12)
    proc = run_nsprof("analyze", *files, in_process=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    # Every good report has its table, in the order given; no bad one has one.
    titles = [line.split("  (")[0] for line in proc.stdout.splitlines() if "  (" in line and "rows, " in line]
    assert titles == [str(path) for path in files if path not in bad]
    # Each bad one is named once, on a line of its own, with the reason.
    errors = [line for line in proc.stderr.splitlines() if line.startswith("nsprof: error:")]
    assert len(errors) == len(bad), proc.stderr
    for path, why in bad.items():
        (line,) = [e for e in errors if e.startswith(f"nsprof: error: {path}:")]
        assert why in line


def test_the_exported_rows_hold_every_good_report(tmp_path):
    files, bad = _folder(tmp_path, good=4)
    result = CliRunner().invoke(cli, ["analyze", "--json", *map(str, files)])
    assert result.exit_code == 2, result.output
    rows = json.loads(result.stdout)
    assert sorted({row["file"] for row in rows}) == sorted(str(p) for p in files if p not in bad)
    assert all(f"{path}:" in result.stderr for path in bad)


def test_only_bad_files_is_an_error_for_each(tmp_path):
    files, bad = _folder(tmp_path, good=0)
    result = CliRunner().invoke(cli, ["analyze", *map(str, files)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert [line.split(":")[1].strip() for line in result.stderr.splitlines()] == ["error"] * len(bad)
