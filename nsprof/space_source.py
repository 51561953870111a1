"""The static fingerprint of a target's source (target_fingerprint: the results store's key for "the same
source"), read from the import statements of the target and of what it imports, nothing imported; and
module_file, the file of a module named as a target, found as an import would find it; split_target,
a target's `where:attr`.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from nsprof.errors import TargetError


def target_fingerprint(spec: str) -> str:
    """Hash of the source that builds the target's kernels (for result stores).

    Covers the target's file and every module file under the target's folder that it imports,
    directly or through those files (`from gemm_tilelang import build`), found by reading their
    import statements: editing a kernel in a helper module changes the fingerprint. Imports made
    at run time by name (importlib) are not followed. A module target (`package.module:attr`)
    is read the same way from the module's file, within its top-level package's folder.
    """
    where, attr = split_target(spec)
    path = Path(where)
    if path.is_file():
        start = path.resolve()
        search = limit = start.parent
    else:
        start = module_file(where)
        if start is None:
            return hashlib.sha256(where.encode() + b"\0" + attr.encode()).hexdigest()[:16]
        # a.b.c lives in <search>/a/b/c.py (or .../c/__init__.py); only files of package a count (of the
        # module's folder for a module of no package), and a's and a.b's __init__.py run first
        parts = where.split(".")
        depth = len(parts) - (0 if start.name == "__init__.py" else 1)
        search = start.parents[depth]
        limit = search / parts[0] if depth else search
        start = [start, *_module_files(".".join(parts[:-1]), search, limit)]
    digest = hashlib.sha256()
    for file in sorted(imported_sources(start, search, limit)):
        name = file.relative_to(search) if file.is_relative_to(search) else file  # a link's file elsewhere
        digest.update(name.as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    digest.update(attr.encode())
    return digest.hexdigest()[:16]


def module_file(name: str) -> Path | None:
    """The file of module `name`, found as an import finds it but without importing its packages
    (importlib's find_spec would run each parent package's __init__: the target's code, torch with it)."""
    found, path, parts = None, None, name.split(".")
    for depth in range(len(parts)):
        if depth and path is None:  # a module, not a package, has no submodules
            return None
        found = _find_spec(".".join(parts[: depth + 1]), path)
        if found is None:
            return None
        path = found.submodule_search_locations
    if not found.origin or not Path(found.origin).is_file():
        return None
    return Path(found.origin).resolve()


def _find_spec(fullname: str, path: list[str] | None):
    """The first spec sys.meta_path's finders give `fullname` (an editable install's finder among them),
    within the package `path` (None: top level), running no module. At the top level the path finder
    searches the `python -m` children's path, which import the target: the current folder first."""
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        search = [os.getcwd(), *sys.path[1:]] if finder is PathFinder and path is None else path
        try:
            spec = None if find is None else find(fullname, search)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            return spec
    return None


def imported_sources(start: Path | list[Path], search: Path, limit: Path | None = None) -> set[Path]:
    """`start` (a file, or several) and the .py files under `limit` (default: `search`) that it imports,
    transitively, absolute imports resolved from `search` (static: read from the import statements, never
    executed). A file that does not parse (however deeply nested) counts as itself."""
    import ast

    limit = limit or search
    seen: set[Path] = set()
    todo = [file.resolve() for file in (start if isinstance(start, list) else [start])]
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        try:
            tree = ast.parse(file.read_bytes(), filename=str(file))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        package = file.parent
        for node in ast.walk(tree):
            names: list[tuple[str, Path]] = []
            if isinstance(node, ast.Import):
                names = [(alias.name, search) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = search
                if node.level:
                    base = package
                    for _ in range(node.level - 1):
                        base = base.parent
                module = node.module or ""
                names = [(module, base)] + [
                    (f"{module}.{alias.name}" if module else alias.name, base) for alias in node.names
                ]
                # a plain `from x import y` also finds x next to the importing file (sys.path[0])
                if not node.level and package != search:
                    names += [(module, package)]
            for dotted, base in names:
                todo += _module_files(dotted, base, limit)
    return seen


def _module_files(dotted: str, base: Path, limit: Path) -> list[Path]:
    """The files that importing `dotted` from folder `base` runs, when they lie under `limit` (by the name
    the import uses: a link there to a file elsewhere counts); "" (`from . import x`): base's __init__.py.
    A folder without __init__.py is a namespace package: its modules are found in it all the same."""
    parts = [p for p in dotted.split(".") if p]
    files = [base / "__init__.py"] if not parts and (base / "__init__.py").is_file() else []
    folder = base
    for index, part in enumerate(parts):
        candidate = folder / part
        if candidate.is_dir():
            if (candidate / "__init__.py").is_file():
                files.append(candidate / "__init__.py")
            folder = candidate
            continue
        if index == len(parts) - 1 and candidate.with_suffix(".py").is_file():
            files.append(candidate.with_suffix(".py"))
        break
    inside = limit.resolve()
    return [
        f.resolve()
        for f in files
        if Path(os.path.abspath(f)).is_relative_to(inside) or f.resolve().is_relative_to(inside)
    ]


def split_target(spec: str) -> tuple[str, str]:
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise TargetError(f"target {spec!r} must look like path/to/file.py:space or module:space")
    return where, attr
