"""`nsprof doctor`: is ground truth available here, and if not, what is missing?

The ground truths are the driver registry's (nsprof.drivers.registry); each driver finds its
own tool and says what else matters about it.
"""

from __future__ import annotations

import platform
import shutil
import sys
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _run(cmd: list[str], timeout: float = 60) -> tuple[int, str]:
    import subprocess

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def gpu_check() -> Check:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return Check("GPU", False, "no NVIDIA driver here (nvidia-smi not on PATH)")
    code, out = _run(
        [smi, "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem", "--format=csv,noheader"]
    )
    if code != 0 or not out:
        return Check("GPU", False, f"nvidia-smi failed: {out.splitlines()[-1] if out else code}")
    lines = out.splitlines()
    first = [p.strip() for p in lines[0].split(",")]
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


def torch_check() -> Check:
    code, out = _run(
        [sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
        timeout=120,
    )
    if code != 0:
        return Check("torch", False, "not importable: " + (out.splitlines()[-1] if out else "?"))
    version, cuda = out.split()[-2:]
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
    verdict = (
        f"ground truth available from: {', '.join(available)}"
        if available
        else "no ground truth available here"
    )
    checks.append(Check("verdict", bool(available), verdict))
    return checks, bool(available)
