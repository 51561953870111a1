"""The README's test command (`pip install -e '.[dev]' && python3 -m pytest -q`) installs what every
CPU test needs: a module that a test outside the GPU files skips without (`pytest.importorskip`) is one
that nsprof's dependencies or its [dev] extra install, so that no CPU test is skipped for good."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalized(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def installed_by_the_readme_command() -> set[str]:
    """The distributions `pip install -e '.[dev]'` asks for: the dependencies and the [dev] extra."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        _requirement_name(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    }


def skipped_without() -> dict[str, list[str]]:
    """Top-level module -> the CPU test files that call pytest.importorskip on it (stdlib left out)."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name.startswith("test_gpu_"):  # GPU tests: their extras (torch, triton, tilelang, cupti)
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "importorskip"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                module = node.args[0].value.split(".")[0]
                if module not in sys.stdlib_module_names:
                    found.setdefault(module, []).append(path.name)
    return found


def test_the_rule_finds_the_modules_cpu_tests_skip_without():
    found = skipped_without()
    assert {"matplotlib", "pyarrow", "distributed"} <= set(found)  # the rule reads the tests, not nothing
    assert "pty" not in found  # the standard library needs no install


def test_every_module_a_cpu_test_skips_without_is_installed_by_the_readme_command():
    wanted = installed_by_the_readme_command()
    distributions = importlib.metadata.packages_distributions()
    missing = {}
    for module, files in skipped_without().items():
        provided_by = {_normalized(d) for d in distributions.get(module, [module])}
        if not provided_by & wanted:
            missing[module] = files
    assert missing == {}, (
        f"add to [dev] in pyproject.toml (or the tests never run from the README): {missing}"
    )
