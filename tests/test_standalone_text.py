"""Text nsprof shows or ships must stand alone: no citation of documents outside the package."""

from __future__ import annotations

from pathlib import Path

import nsprof

PACKAGE = Path(nsprof.__file__).resolve().parent
# Documents of the project's own planning; a user of nsprof has none of them.
# The notes that lie beside the project, outside it, named by their stems so that this file cites
# none of them either.
OUTSIDE_DOCUMENTS = tuple(stem + ".md" for stem in ("DESIGN", "SEED", "STYLE"))


def test_package_cites_no_outside_document():
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 20  # the package itself, not an empty folder
    cited = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(name in line for name in OUTSIDE_DOCUMENTS)
    ]
    assert cited == []


def _tracked_files(root: Path) -> list[Path]:
    """The repository's tracked files (git ls-files), or, outside a git checkout, every file under it
    but .git's and caches."""
    import subprocess

    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, timeout=60, check=True
        )
        return [root / name for name in listed.stdout.decode().split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", "__pycache__", ".nsprof", ".pytest_cache", ".ruff_cache"}
        return [p for p in root.rglob("*") if p.is_file() and not skip & set(p.relative_to(root).parts)]


def test_no_project_file_cites_an_outside_document():
    """Docs, examples, scripts, fixtures and tests too: the project stands alone (this file names the
    documents only to look for them)."""
    root = PACKAGE.parent
    files = [path for path in _tracked_files(root) if path.resolve() != Path(__file__).resolve()]
    assert len(files) > 50 and any(path.name == "README.md" for path in files)
    cited = []
    for path in files:
        if not path.is_file():  # deleted in the work tree, still in the index
            continue
        data = path.read_bytes()
        for name in OUTSIDE_DOCUMENTS:
            for number, line in enumerate(data.splitlines(), 1):
                if name.encode() in line:
                    cited.append(f"{path.relative_to(root)}:{number}: {name}")
    assert cited == []


def test_no_source_doc_or_test_names_a_tracker_issue():
    """Code, docs, examples, scripts and tests say what a thing does and why, not which issue asked
    for it: a reader has no tracker, and history belongs in git. (Benchmark results record runs.)"""
    import re

    root = PACKAGE.parent
    named = re.compile(rb"\bissues?[ #-]+\d+", re.IGNORECASE)  # issue 24, issues 25 and 28, issue #3
    kept = {"", ".py", ".md", ".sh", ".toml", ".cfg", ".txt", ".html", ".css"}
    records = ("benchmarks", "tests/fixtures")  # what runs and captures printed, kept as they were
    files = [
        path
        for path in _tracked_files(root)
        if path.suffix in kept
        and path.is_file()
        and not path.relative_to(root).as_posix().startswith(records)
        and path.resolve() != Path(__file__).resolve()  # which names them only to look for them
    ]
    assert any(path.name == "README.md" for path in files) and any(path.suffix == ".py" for path in files)
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in files
        for number, line in enumerate(path.read_bytes().splitlines(), 1)
        if named.search(line)
    ]
    assert found == []
