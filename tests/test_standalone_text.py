"""Text nsprof shows or ships must stand alone: no citation of documents outside the package."""

from __future__ import annotations

from pathlib import Path

import nsprof

PACKAGE = Path(nsprof.__file__).resolve().parent
# Documents of the project's own planning; a user of nsprof has none of them.
OUTSIDE_DOCUMENTS = ("DESIGN.md", "SEED.md", "STYLE.md")


def test_package_cites_no_outside_document():
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 20  # the package itself, not an empty folder
    cited = [f"{path.relative_to(PACKAGE)}:{number}"
             for path in sources
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if any(name in line for name in OUTSIDE_DOCUMENTS)]
    assert cited == []
