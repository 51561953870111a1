"""Which GPU a CUDA device of this process is, as nvidia-smi names it (index, UUID, model)."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A GPU as nvidia-smi names it: what nsprof locks, and what its results are keyed by."""

    index: int | None  # nvidia-smi's index; None for a MIG instance or an entry it does not list
    uuid: str = ""  # "GPU-8f6c…" ("MIG-…" for a MIG instance); "" where nvidia-smi cannot say
    name: str = ""  # "NVIDIA H200"; "" where unknown

    @property
    def lock_name(self) -> str:
        if self.uuid:
            return f"nsprof-{''.join(c for c in self.uuid if c.isalnum() or c in '-_')}.lock"
        return f"nsprof-gpu{self.index}.lock"

    @property
    def key(self) -> str:
        """What results measured on it are keyed by: "NVIDIA H200 GPU-8f6c…" ("" when unknown)."""
        return " ".join(part for part in (self.name, self.uuid) if part)

    def __str__(self) -> str:
        what = f"GPU {self.index}" if self.index is not None else "GPU"
        detail = ", ".join(part for part in (self.name, self.uuid) if part)
        return f"{what} ({detail})" if detail else what


@functools.cache
def _smi_gpus() -> tuple[tuple[int, str, str], ...]:
    """(index, uuid, name) of every GPU nvidia-smi lists; () without nvidia-smi."""
    import subprocess

    from nsprof.host.tools import on_path

    smi = on_path("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    gpus = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) == 3 and parts[0].isdigit():
            gpus.append((int(parts[0]), parts[1], parts[2]))
    return tuple(gpus)


PCI_ORDER = "PCI_BUS_ID"


def child_environ() -> dict[str, str]:
    """This process's environment for a child that may run CUDA: its device indices nvidia-smi's (PCI
    bus order), the numbering nsprof locks and keys GPUs by (which_gpu). CUDA's own default orders by
    speed, which on a host of mixed GPUs puts another GPU first: measured outside the lock."""
    return {**os.environ, "CUDA_DEVICE_ORDER": PCI_ORDER}


def device_order_note() -> str | None:
    """One line where this environment asks CUDA for another order than the one nsprof's children get."""
    given = os.environ.get("CUDA_DEVICE_ORDER", "")
    if not given or given == PCI_ORDER:
        return None
    return (
        f"CUDA_DEVICE_ORDER={given} is not used: nsprof numbers GPUs as nvidia-smi does ({PCI_ORDER}), "
        "the numbering its GPU lock and results go by"
    )


def which_gpu(device: int = 0, environ: Mapping[str, str] | None = None) -> Gpu:
    """The GPU that CUDA device `device` of this process is, through CUDA_VISIBLE_DEVICES (indices,
    or UUIDs and their prefixes, as CUDA takes them). Indices are nvidia-smi's, which CUDA follows
    with CUDA_DEVICE_ORDER=PCI_BUS_ID; the worker reads the UUID it really used (nsprof.worker)."""
    environ = os.environ if environ is None else environ
    visible = [entry.strip() for entry in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    entry = visible[device] if 0 <= device < len(visible) else str(device)
    listed = _smi_gpus()
    for index, uuid, name in listed:
        if (entry.isdigit() and int(entry) == index) or (entry.startswith("GPU-") and uuid.startswith(entry)):
            return Gpu(index, uuid, name)
    if entry.isdigit():
        return Gpu(int(entry))
    return Gpu(None, entry)  # a MIG instance or a UUID nvidia-smi does not list: lock it by its name


def gpu_of(device: dict | None) -> Gpu | None:
    """The Gpu a worker's device report ({"uuid", "name", ...}) names, or None (a CPU target, an
    old worker)."""
    uuid = str((device or {}).get("uuid") or "")
    if not uuid:
        return None
    if not uuid.startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid  # torch leaves out nvidia-smi's prefix
    return Gpu(None, uuid, str(device.get("name") or ""))
