"""The house: each module has one job and every import points down. Read from the source (ast),
lazy imports inside functions included, so that a `from nsprof.x import y` deep in a function
counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nsprof"

# Lowest first. A module may import modules of its own layer or of a lower one, never a higher
# one. The longest matching prefix decides a module's layer.
LAYERS = [
    ["nsprof.errors"],
    ["nsprof.schema", "nsprof.truth", "nsprof.settings"],
    [
        "nsprof.host",
        "nsprof.space",
        "nsprof.space_source",
        "nsprof.space_view",
        "nsprof.tuner",
        "nsprof.store",
        "nsprof.store_schema",
        "nsprof.store_rows",
        "nsprof.store_rescue",
        "nsprof.builtin",
    ],
    ["nsprof.reports", "nsprof.timers", "nsprof.analysis"],
    ["nsprof.worker"],
    ["nsprof.drivers"],
    ["nsprof.serve_client", "nsprof.serve_files", "nsprof.serve_identity"],
    ["nsprof.session"],
    ["nsprof.measure"],
    ["nsprof.render", "nsprof.integrations"],
    [
        "nsprof.profile",
        "nsprof.validate",
        "nsprof.validate_saved",
        "nsprof.l2check",
        "nsprof.adaptive",
        "nsprof.tune",
        "nsprof.feedback",
        "nsprof.doctor",
        "nsprof.cluster",
        "nsprof.cluster_dask",
        "nsprof.cluster_batch",
        "nsprof.serve",
        "nsprof.serve_start",
        "nsprof.serve_jobs",
    ],
    ["nsprof.commands"],
    ["nsprof.cli", "nsprof.__main__", "nsprof"],
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(module imported, name imported or "") for every nsprof import of the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "nsprof" or module.startswith("nsprof."):
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    out.append((sub, "") if sub in modules else (module, alias.name))
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names if alias.name.startswith("nsprof")]
    return out


def _layer(module: str) -> int:
    best, layer = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), index
    assert layer is not None, f"{module} is in no layer of tests/test_layout.py: give it one"
    return layer


def test_no_module_imports_a_private_name_of_another():
    modules = _modules()
    private = [
        f"{name} imports {target}.{what}"
        for name, path in modules.items()
        for target, what in _imports(name, path, modules)
        if what.startswith("_") and not what.startswith("__") and target != name
    ]
    private += [
        f"{name} imports {target}"
        for name, path in modules.items()
        for target, _ in _imports(name, path, modules)
        if target.rpartition(".")[2].startswith("_")
        and not target.endswith("__main__")
        and target.rpartition(".")[0] != name.rpartition(".")[0]
    ]
    assert not private, "\n".join(private)


def test_nothing_below_reaches_up():
    modules = _modules()
    upward = [
        f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)})"
        for name, path in modules.items()
        for target, _ in _imports(name, path, modules)
        if target != "nsprof" and _layer(target) > _layer(name)
    ]
    assert not upward, "\n".join(upward)


def test_the_import_graph_has_no_cycle():
    modules = _modules()
    graph = {
        name: {t for t, _ in _imports(name, path, modules) if t in modules and t != name and t != "nsprof"}
        for name, path in modules.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(
                    " -> ".join(path[path.index(nxt) :] + [nxt]) if nxt in path else f"{node} -> {nxt}"
                )
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


def _function_lengths(path: Path) -> dict[str, int]:
    return {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_the_command_line_is_thin():
    """cli.py holds the options and, per command, options -> settings -> nsprof.commands -> output:
    at most 450 lines, and no function of it or of nsprof/commands longer than 60 lines."""
    cli = PACKAGE / "cli.py"
    assert len(cli.read_text().splitlines()) <= 450
    long = [
        f"{path.relative_to(PACKAGE.parent)}: {name} ({lines} lines)"
        for path in [cli, *sorted((PACKAGE / "commands").glob("*.py"))]
        for name, lines in _function_lengths(path).items()
        if lines > 60
    ]
    assert not long, "\n".join(long)
