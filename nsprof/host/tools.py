"""Finding ncu and nsys.

Order: an explicit environment variable (NSPROF_NCU / NSPROF_NSYS), then PATH, then the
usual install folders. On some images nsys ships only inside Nsight Compute
(``/opt/nvidia/nsight-compute/<ver>/host/target-linux-x64/nsys``) with its importer
``QdstrmImporter`` in a sibling ``host/linux-desktop-*`` folder.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nsprof.errors import ToolNotFound

_NCU_GLOBS = (
    "/usr/local/cuda/bin/ncu",
    "/usr/local/cuda-*/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
)
_NSYS_GLOBS = (
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)


@dataclass(frozen=True)
class Tool:
    name: str
    path: Path
    found_by: str  # "env", "PATH" or "install folder"


def _version_key(path: str) -> tuple:
    # Newest install first: compare the numeric parts of the path.
    parts = []
    for chunk in Path(path).parts:
        digits = [int(p) for p in chunk.replace("-", ".").split(".") if p.isdigit()]
        parts.extend(digits)
    return tuple(parts)


def on_path(name: str) -> str | None:
    """The absolute path of program `name` on PATH, searched in its absolute folders only: an empty or
    relative entry (`PATH=/usr/bin:`) stands for the folder nsprof runs in, which another user may write."""
    folders = [
        folder for folder in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(folder)
    ]
    return shutil.which(name, path=os.pathsep.join(folders)) if folders else None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _search(name: str, env_var: str, patterns: tuple[str, ...]) -> Tool | None:
    explicit = os.environ.get(env_var)
    if explicit:
        path = Path(explicit).absolute()  # the file checked is the one run, never a PATH search of its name
        if _executable(path):
            return Tool(name, path, "env")
        raise ToolNotFound(f"{env_var}={explicit} is not an executable file")
    found = on_path(name)
    if found:
        return Tool(name, Path(found), "PATH")
    for pattern in patterns:
        hits = sorted(glob.glob(pattern), key=_version_key, reverse=True)
        for hit in hits:
            if _executable(Path(hit)):
                return Tool(name, Path(hit), "install folder")
    return None


def _find(name: str, title: str, env_var: str, patterns: tuple[str, ...], required: bool) -> Tool | None:
    tool = _search(name, env_var, patterns)
    if tool is None and required:
        raise ToolNotFound(f"{name} ({title}) not found: put it on PATH or set {env_var}=/path/to/{name}")
    return tool


def find_ncu(required: bool = True) -> Tool | None:
    return _find("ncu", "Nsight Compute", "NSPROF_NCU", _NCU_GLOBS, required)


def find_nsys(required: bool = True) -> Tool | None:
    return _find("nsys", "Nsight Systems", "NSPROF_NSYS", _NSYS_GLOBS, required)


def find_qdstrm_importer(nsys: Path) -> Path | None:
    """QdstrmImporter turns a .qdstrm into a .nsys-rep; it lives beside or near nsys."""
    target_dir = nsys.resolve().parent
    candidates = [target_dir / "QdstrmImporter"]
    candidates += [Path(p) for p in sorted(glob.glob(str(target_dir.parent / "*" / "QdstrmImporter")))]
    for candidate in candidates:
        if _executable(candidate):
            return candidate
    return None


def tool_version(path: Path) -> str:
    """The last line of `TOOL --version` ("" if it cannot be run): a results-store key field."""
    import subprocess

    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, errors="replace", timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[-1].strip() if lines else ""
