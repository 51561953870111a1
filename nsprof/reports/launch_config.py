"""Each kernel launch's configuration, where the report has it: grid, block, registers per thread,
static and dynamic shared memory per block (bytes). Read apart from the tidy table (which does
not carry it) for `analyze --by kernel`, keyed as the tidy rows can be matched: (launch_id,
start_ns) for nsys (correlationId and GPU start: graph replays share a correlationId),
(launch_id, None) for ncu (its result ID)."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import NamedTuple

from nsprof.reports.ncu_cells import GROUP_CHARS, ID_PATTERN

_RAW = {
    "registers": "launch__registers_per_thread",
    "static_smem": "launch__shared_mem_per_block_static",
    "dynamic_smem": "launch__shared_mem_per_block_dynamic",
}
_RAW_METRICS = tuple(_RAW.values())


class LaunchConfig(NamedTuple):
    grid: str | None  # "(32, 1, 1)", as ncu prints it
    block: str | None
    registers: int | None  # per thread
    static_smem: int | None  # bytes per block
    dynamic_smem: int | None


# The .ncu-rep's launch metrics (ncu_report gives sizes in bytes).
_DIMS = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
_DIMS += ("launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z")
LAUNCH_METRICS = (*_DIMS, *_RAW_METRICS)
_SIZES = {"byte": 1, "kbyte": 1_000, "mbyte": 1_000_000, "kibyte": 1_024, "mibyte": 1_048_576}
_DETAILS = {
    "registers": "Registers Per Thread",
    "static_smem": "Static Shared Memory Per Block",
    "dynamic_smem": "Dynamic Shared Memory Per Block",
}


def read_launch_configs(path: Path, kind: str) -> dict[tuple, LaunchConfig]:
    """The launch configurations of a report of `kind` (nsprof.reports.kinds), keyed as above;
    empty where the report does not hold them, or its reader gives them itself (an .nsys-rep's
    and an .ncu-rep's put them in frame.attrs)."""
    if kind == "nsys-sqlite":
        return _nsys(path)
    if kind == "ncu-csv":
        return _ncu_csv(path)
    return {}


def ncu_rep_launch(metrics: dict) -> LaunchConfig:
    """The launch configuration of one .ncu-rep result from its metrics {name: value}."""

    grid, block = (_triple(*(metrics.get(name) for name in _DIMS[i : i + 3])) for i in (0, 3))
    return LaunchConfig(grid, block, *(_whole(metrics.get(name)) for name in _RAW_METRICS))


def _whole(value, scale: float = 1) -> int | None:
    """A cell (times `scale`) as a whole number; None where it holds none a report could (blank, text,
    infinite, past 64 bits: a report damaged or edited)."""
    try:
        number = float(value) * scale
    except (TypeError, ValueError):
        return None
    return round(number) if math.isfinite(number) and abs(number) < 2**63 else None


def _launch_id(cell) -> int | None:
    """An ncu CSV row's ID, where it is one the summary reads too (ID_PATTERN); else None."""
    text = (cell or "").strip()
    return int(text) if re.fullmatch(ID_PATTERN, text) else None


def _triple(*values) -> str | None:
    x, y, z = (_whole(value) for value in values)
    if x is None or y is None or z is None:
        return None
    return f"({x}, {y}, {z})"


def _nsys(path: Path) -> dict[tuple, LaunchConfig]:
    from nsprof.reports.nsys.sqlite import KERNEL_TABLE, connect, table_columns

    conn = connect(path)
    try:
        wanted = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread"]
        wanted += ["staticSharedMemory", "dynamicSharedMemory"]
        have = table_columns(conn, KERNEL_TABLE)
        cells = ", ".join(c if c in have else "NULL" for c in wanted)
        rows = conn.execute(f"SELECT correlationId, start, {cells} FROM {KERNEL_TABLE}").fetchall()
    finally:
        conn.close()
    return {
        (corr, start): LaunchConfig(
            _triple(gx, gy, gz), _triple(bx, by, bz), *map(_whole, (regs, static, dynamic))
        )
        for corr, start, gx, gy, gz, bx, by, bz, regs, static, dynamic in rows
    }


def _number(text: str | None, unit: str | None = None) -> int | None:
    """An ncu CSV cell as an integer, in bytes when `unit` is a size ("1.024000" Kbyte: 1024)."""
    if text is None:
        return None
    text = text.strip()
    for char in GROUP_CHARS:
        text = text.replace(char, "")
    if text.count(",") == 1 and "." not in text:  # a decimal comma
        text = text.replace(",", ".")
    text = text.replace(",", "")
    return _whole(text, _SIZES.get((unit or "byte").strip().lower().split("/")[0], 1))  # "Kbyte/block"


def _ncu_csv(path: Path) -> dict[tuple, LaunchConfig]:
    text = path.read_bytes().decode("utf-8", errors="replace")
    start = text.find('"ID"')
    if start < 0:
        return {}
    reader = csv.DictReader(io.StringIO(text[start:]))
    if "Metric Name" in (reader.fieldnames or []):
        return _ncu_details(reader)
    out: dict[tuple, LaunchConfig] = {}
    units: dict[str, str] = {}
    for row in reader:
        if not (row.get("ID") or "").strip():  # the units row under the header
            units = {key: value for key, value in row.items() if key}
            continue
        numbers = {field: _number(row.get(column), units.get(column)) for field, column in _RAW.items()}
        launch = _launch_id(row["ID"])
        if launch is None:
            continue
        out[(launch, None)] = LaunchConfig(
            _size(row.get("Grid Size")), _size(row.get("Block Size")), **numbers
        )
    return out


def _size(cell: str | None) -> str | None:
    """'(32, 1, 1)' as ncu writes it, normalised; None when blank."""
    if not cell or not cell.strip():
        return None
    parts = [part.strip() for part in cell.strip().strip("()").split(",")]
    whole = len(parts) == 3 and all(re.fullmatch(ID_PATTERN, part) for part in parts)
    return _triple(*parts) if whole else cell.strip()  # as written where it holds no three whole numbers


def _ncu_details(reader) -> dict[tuple, LaunchConfig]:
    """The long page: one row per metric; grid and block on every row."""
    found: dict[int, dict] = {}
    names = {metric: field for field, metric in _DETAILS.items()}
    for row in reader:
        launch = _launch_id(row.get("ID"))
        if launch is None:
            continue
        entry = found.setdefault(
            launch, {"grid": _size(row.get("Grid Size")), "block": _size(row.get("Block Size"))}
        )
        field = names.get((row.get("Metric Name") or "").strip())
        if field:
            entry[field] = _number(row.get("Metric Value"), row.get("Metric Unit"))
    return {
        (launch, None): LaunchConfig(
            entry["grid"],
            entry["block"],
            *(entry.get(field) for field in ("registers", "static_smem", "dynamic_smem")),
        )
        for launch, entry in found.items()
    }
