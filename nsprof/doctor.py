"""`nsprof doctor`: is ground truth available here, and if not, what is missing?

The ground truths are the driver registry's (nsprof.drivers.registry); each driver finds its
own tool and says what else matters about it. Then which optional packages are installed (found,
never imported), and without ground truth what still works here and what to install for more.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    optional: bool = False  # a missing optional package: not a failure


# The optional packages nsprof uses: (module, the extra of pyproject.toml that installs it, or None
# where none does, what it gives). Found with importlib.util.find_spec, never imported here.
OPTIONAL = (
    ("ncu_report", None, "reads .ncu-rep reports (analyze)"),
    ("matplotlib", "plot", "--plot of analyze, tune and validate"),
    ("pyarrow", "parquet", "analyze --parquet, results --export FILE.parquet"),
    ("dask", "dask", "--devices, --scheduler: configs spread over several GPUs"),
    ("torch", "torch", "torch targets, the event and graph timers, doctor's test kernel"),
    ("tilelang", "tilelang", "TileLang targets and feeding back into TileLang's cache"),
    ("triton", None, "Triton targets and feeding back into Triton's autotuner"),
    ("cupti", "cupti", "the cupti fast timer of validate and tune --prescreen"),
)
# Where a package comes from when no extra installs it.
_OTHER_SOURCE = {
    "ncu_report": "pip install ncu-report (or install Nsight Compute, whose extras/python has it)",
    "triton": "pip install triton",
}
_DISTRIBUTION = {"ncu_report": "ncu-report", "cupti": "cupti-python"}  # where not the module's name
_NEEDS_TOO = {"dask": ("distributed",)}  # modules a package works only with


def _install(module: str, extra: str | None) -> str:
    return _OTHER_SOURCE[module] if extra is None else f"pip install 'nsprof[{extra}]'"


def _found(module: str) -> str | None:
    """Where `module` is (its version, or the folder it is read from), None when it is not here."""
    import importlib.metadata
    import importlib.util

    if module == "ncu_report":  # also read from an Nsight Compute install, off sys.path
        from nsprof.errors import ReportError
        from nsprof.reports.ncu_rep import ncu_report_folder

        try:
            folder = ncu_report_folder()
        except ReportError:
            return None
    elif any(importlib.util.find_spec(m) is None for m in (module, *_NEEDS_TOO.get(module, ()))):
        return None
    try:
        return importlib.metadata.version(_DISTRIBUTION.get(module, module))
    except importlib.metadata.PackageNotFoundError:
        return f"from {folder}" if module == "ncu_report" else "installed"


def optional_checks(found: dict[str, str | None]) -> list[Check]:
    """One line per optional package (`found`: _found of each module of OPTIONAL): installed (with
    its version) and what it gives, or missing and what to install."""
    checks = []
    for module, extra, gives in OPTIONAL:
        if found[module]:
            checks.append(Check("optional", True, f"{module} {found[module]}: {gives}"))
        else:
            detail = f"{module} not installed ({gives}): {_install(module, extra)}"
            checks.append(Check("optional", False, detail, optional=True))
    return checks


def offline_checks(tools: list[Check], found: dict[str, str | None]) -> list[Check]:
    """What works here without ground truth: reading reports made elsewhere, and saved results."""
    readable = ["ncu CSV", "nsys .sqlite"]
    if found["ncu_report"]:
        readable.append(".ncu-rep")
    if any(c.ok and c.name == "nsys" for c in tools):
        readable.append(".nsys-rep")
    return [
        Check(
            "offline",
            True,
            f"nsprof analyze REPORT...: summarise, compare and plot {', '.join(readable)} reports "
            "made on another machine (no GPU needed)",
        ),
        Check(
            "offline",
            True,
            "nsprof results: the runs saved in a results store (--store FILE); --export FILE writes "
            "their measurements (.csv, .json, .parquet)",
        ),
    ]


def _run(cmd: list[str], timeout: float = 60) -> tuple[int, str]:
    import subprocess

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def gpu_check() -> Check:
    from nsprof.host.tools import on_path

    smi = on_path("nvidia-smi")
    if not smi:
        return Check("GPU", False, "no NVIDIA driver here (nvidia-smi not on PATH)")
    code, out = _run(
        [smi, "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem", "--format=csv,noheader"]
    )
    if code != 0 or not out:
        return Check("GPU", False, f"nvidia-smi failed: {out.splitlines()[-1] if out else code}")
    lines = out.splitlines()
    first = [p.strip() for p in lines[0].split(",")]
    if len(first) != 5:
        return Check("GPU", False, f"nvidia-smi printed an unexpected line: {lines[0][:200]!r}")
    detail = f"{first[0]}, driver {first[1]}, SM clock {first[2]} (max {first[3]}), memory {first[4]}"
    if len(lines) > 1:
        detail += f" (+{len(lines) - 1} more GPU(s))"
    return Check("GPU", True, detail)


def tool_checks() -> list[Check]:
    from nsprof.drivers import registry
    from nsprof.errors import ToolNotFound

    checks = []
    for name in registry.ground_truths():
        driver = registry.driver_class(name)
        try:
            tool = driver.find(required=False)
        except ToolNotFound as exc:
            checks.append(Check(name, False, str(exc)))
            continue
        if tool is None:
            checks.append(
                Check(name, False, f"not found (PATH, NSPROF_{name.upper()}, usual install folders)")
            )
            continue
        code, out = _run([str(tool.path), "--version"])
        version = out.splitlines()[-1] if out else "?"
        detail = f"{tool.path} ({tool.found_by}): {version}"
        notes = driver.tool_notes(tool.path)
        if notes:
            detail += f"; {notes}"
        checks.append(Check(name, code == 0, detail))
    return checks


_TORCH = "nsprof-torch:"


def torch_check() -> Check:
    from nsprof.host.children import DROP_CWD

    code, out = _run(
        [
            sys.executable,
            "-c",
            f"{DROP_CWD}; import torch; print({_TORCH!r}, torch.__version__, torch.cuda.is_available())",
        ],
        timeout=120,
    )
    said = [line.split() for line in out.splitlines() if line.startswith(_TORCH)]  # not a warning's words
    if code != 0 or not said or len(said[-1]) != 3:
        return Check("torch", False, "not importable: " + (out.splitlines()[-1] if out else "?"))
    _, version, cuda = said[-1]
    return Check("torch", cuda == "True", f"{version}, CUDA available: {cuda}")


def ground_truth_check(backend: str) -> Check:
    """Run the built-in tiny kernel under the tool, direct and graph, and read the report."""
    from nsprof.errors import NsprofError
    from nsprof.profile import config_summary, profile_result
    from nsprof.settings import ProfileSettings

    settings = ProfileSettings(backend=backend, reps=2, warmup=1, timeout_s=120)
    try:
        result = profile_result("nsprof.builtin:tiny", settings)
    except NsprofError as exc:
        return Check(f"{backend} run", False, str(exc))
    frame = result.frame
    if frame["error"].notna().any():
        return Check(f"{backend} run", False, frame["error"].dropna().iloc[0])
    summary = config_summary(frame)
    parts = [f"{r.mode} {r.median_ns / 1e3:.2f} µs" for r in summary.itertuples()]
    return Check(
        f"{backend} run", len(summary) == 2, f"tiny add kernel: {', '.join(parts)} ({result.wall_s:.1f} s)"
    )


def _ground_truth_needs(gpu: Check, tools: list[Check], run_kernels: bool) -> str:
    """What ground truth still needs here, in words."""
    tools_words = "ncu (Nsight Compute) or nsys (Nsight Systems)"
    if not gpu.ok:
        return f"for ground truth: a GPU with its driver, {tools_words}, then nsprof doctor"
    if not any(tool.ok for tool in tools):
        return f"for ground truth: {tools_words}, then nsprof doctor"
    if not run_kernels:
        return "ground truth untested: nsprof doctor without --no-run runs a tiny kernel under each tool"
    return "for ground truth: what the FAIL lines above name"


def run_doctor(run_kernels: bool = True) -> tuple[list[Check], bool]:
    checks = [Check("nsprof", True, f"Python {platform.python_version()} on {platform.platform()}")]
    gpu = gpu_check()
    checks.append(gpu)
    tools = tool_checks()
    checks.extend(tools)
    available = []
    if gpu.ok:
        torch = torch_check()
        checks.append(torch)
        if run_kernels and torch.ok:
            for tool in tools:
                if tool.ok:
                    run = ground_truth_check(tool.name)
                    checks.append(run)
                    if run.ok:
                        available.append(tool.name)
    found = {module: _found(module) for module, _, _ in OPTIONAL}
    checks.extend(optional_checks(found))
    if not available:
        checks.extend(offline_checks(tools, found))
        missing = sorted({extra for module, extra, _ in OPTIONAL if extra and not found[module]})
        hint = f"pip install 'nsprof[{','.join(missing)}]'; " if missing else ""
        checks.append(
            Check("for more", False, hint + _ground_truth_needs(gpu, tools, run_kernels), optional=True)
        )
    verdict = (
        f"ground truth available from: {', '.join(available)}"
        if available
        else "no ground truth available here"
    )
    checks.append(Check("verdict", bool(available), verdict))
    return checks, bool(available)
