"""Report parsers: ncu CSV, .ncu-rep, nsys SQLite / .nsys-rep -> the tidy table (nsprof.schema).

Modules, one job each: read (read_report, the one entry point), kinds (the registry of
report kinds: sniff + reader), signatures (magic bytes and text signatures), inputs
(streams and `-` -> a readable file), checks (guards every parser shares), ncu_csv,
ncu_rep (+ _ncu_rep_child, run as a separate process), nvtx_cells (ncu's NVTX cells),
names (short kernel names), nsys/ (SQLite exports, NVTX attribution, conversions).
"""

from nsprof.reports.kinds import sniff_kind
from nsprof.reports.read import read_report

__all__ = ["read_report", "sniff_kind"]
