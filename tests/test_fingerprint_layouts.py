"""The target's fingerprint (the results store's key for "the same source") changes when the code its
kernels come from changes, wherever Python finds that code: a module target's helpers in its folder, a
package's __init__ reached by `from . import`, namespace packages (folders without __init__.py), a helper
that is a link to a file elsewhere. A file that does not parse, however deeply nested, counts as itself.
Expected: the fingerprint before an edit differs from the one after (read statically: nothing imported)."""

from __future__ import annotations

import os

import pytest

from nsprof.space_source import target_fingerprint

LAYOUTS = {
    # name: ({file: text}, the target, the file the edit changes)
    "module target's helper beside it": (
        {
            "mymod.py": "from helper import kernel\nspace = None\n",
            "helper.py": "def kernel():\n    return 1\n",
        },
        "mymod:space",
        "helper.py",
    ),
    "from . import of the package's __init__": (
        {
            "pkg/__init__.py": "def kernel():\n    return 1\n",
            "pkg/mod.py": "from . import kernel\nspace = None\n",
        },
        "pkg.mod:space",
        "pkg/__init__.py",
    ),
    "a module target's package __init__": (
        {"pkg/__init__.py": "SCALE = 1\n", "pkg/mod.py": "space = None\n"},
        "pkg.mod:space",
        "pkg/__init__.py",
    ),
    "namespace package": (
        {"t.py": "from ns.helper2 import K\nspace = None\n", "ns/helper2.py": "K = 1\n"},
        "t.py:space",
        "ns/helper2.py",
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_editing_the_code_a_target_imports_changes_its_fingerprint(tmp_path, monkeypatch, layout):
    files, target, edited = LAYOUTS[layout]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    before = target_fingerprint(target)
    (tmp_path / edited).write_text((tmp_path / edited).read_text().replace("1", "2"))
    assert target_fingerprint(target) != before


def test_a_helper_that_links_to_a_file_elsewhere_is_followed(tmp_path, monkeypatch):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "kernels.py").write_text("def kernel():\n    return 1\n")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "kernels.py").symlink_to(tmp_path / "shared" / "kernels.py")
    (tmp_path / "proj" / "t.py").write_text("from kernels import kernel\nspace = None\n")
    before = target_fingerprint(f"{tmp_path / 'proj' / 't.py'}:space")
    (tmp_path / "shared" / "kernels.py").write_text("def kernel():\n    return 2\n")
    assert target_fingerprint(f"{tmp_path / 'proj' / 't.py'}:space") != before


def test_a_file_too_deeply_nested_to_parse_counts_as_itself(tmp_path):
    (tmp_path / "deep.py").write_text("x = " + "-" * 20000 + "1\n")
    (tmp_path / "t.py").write_text("import deep\nspace = None\n")
    before = target_fingerprint(f"{tmp_path / 't.py'}:space")
    (tmp_path / "deep.py").write_text("x = " + "-" * 20000 + "2\n")
    assert target_fingerprint(f"{tmp_path / 't.py'}:space") != before
    assert os.path.exists(tmp_path / "deep.py")
