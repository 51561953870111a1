"""Report parsers: ncu CSV, .ncu-rep, nsys SQLite / .nsys-rep -> the tidy table (nsprof.schema)."""

from nsprof.reports.detect import read_report, sniff_kind

__all__ = ["read_report", "sniff_kind"]
