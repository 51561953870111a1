"""The house style is ruff's: `ruff check` and `ruff format --check` pass on the whole tree, so
that a change's diff holds its change and nothing of its author's layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_the_tree_is_ruff_formatted():
    done = _ruff("format", "--check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_tree_passes_ruff_check():
    done = _ruff("check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
