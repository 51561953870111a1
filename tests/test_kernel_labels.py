"""The `#N` labels that tell kernels sharing a short name apart: a kernel's number is
fixed by its full name and handed out in display order, the same in the short and demangled
views and kept with --wide; a long name is cut so that the part that tells it from the names
it shares a short name with survives.

Real names only: the nsys fixture holds five torch kernels called vectorized_elementwise_kernel,
and a copy of ncu's raw CSV gets two demangled names that differ only in a lambda deep in their
middle. What each row is comes from --format csv (the same rows, in the table's order); which
names collide and how they number is computed here from plain SQL and the csv module.
"""

from __future__ import annotations

import csv
import re

from test_analyze_options import PP, RAW, SQLITE, csv_rows, nsys_kernels, ok, short_of, table_rows

WIDTH = 48  # analyze's name width


def expected_numbers(rows, shared: set[str]) -> list[str]:
    """ " #N" (or "") per row: the full names of each shared short name numbered by first appearance."""
    numbers: dict[str, dict[str, int]] = {}
    out = []
    for row in rows:
        if row["kernel"] not in shared:
            out.append("")
            continue
        seen = numbers.setdefault(row["kernel"], {})
        seen.setdefault(row["kernel_full"], len(seen) + 1)
        out.append(f" #{seen[row['kernel_full']]}")
    return out


def shared_short_names(kernels) -> set[str]:
    fulls: dict[str, set[str]] = {}
    for k in kernels:
        fulls.setdefault(k["kernel"], set()).add(k["full"])
    return {name for name, names in fulls.items() if len(names) > 1}


def views(path, *args, kernel_cell=2):
    """The kernel cells of the short, demangled and demangled --wide tables, and the rows (csv)."""
    rows = csv_rows(ok(path, *args, "--format", "csv").stdout)
    cells = {}
    for view, extra in (
        ("short", ()),
        ("demangled", ("--names", "demangled")),
        ("wide", ("--names", "demangled", "--wide")),
    ):
        _, table = table_rows(ok(path, *args, *extra).stdout)
        cells[view] = [r[kernel_cell] for r in table]
        assert len(cells[view]) == len(rows), view
    return rows, cells


def tells_apart(label: str, full: str, others: list[str]) -> bool:
    """Whether a cut label shows part of `full` that none of `others` holds."""
    pieces = [p for p in label.split("…") if p]
    assert all(p in full for p in pieces), (label, full)
    return any(all(p not in other for other in others) for p in pieces)


def check_labels(rows, cells, shared):
    numbers = expected_numbers(rows, shared)
    assert any(numbers)
    for row, number, short, demangled, wide in zip(
        rows, numbers, cells["short"], cells["demangled"], cells["wide"]
    ):
        assert wide == row["kernel_full"] + number  # whole names, numbered as in every other view
        assert short.endswith(number) and demangled.endswith(number)
        if number:
            assert not re.search(r" #\d+$", short[: -len(number)]) and short[: -len(number)] == row["kernel"]
        assert len(demangled) <= WIDTH
        if number and len(row["kernel_full"]) + len(number) > WIDTH:
            others = sorted(
                {r["kernel_full"] for r in rows if r["kernel"] == row["kernel"]} - {row["kernel_full"]}
            )
            assert tells_apart(demangled[: -len(number)], row["kernel_full"], others), demangled


def test_the_five_elementwise_kernels_keep_their_number_in_every_view():
    kernels = nsys_kernels()
    shared = shared_short_names(kernels)
    assert shared == {"vectorized_elementwise_kernel"}
    rows, cells = views(SQLITE)
    check_labels(rows, cells, shared)
    fulls = {r["kernel_full"] for r in rows if r["kernel"] in shared}
    assert len(fulls) == 5
    # in display order: the first row of that name is #1, and each new full name the next number
    printed = [
        int(c.rsplit("#", 1)[1]) for c in cells["short"] if c.startswith("vectorized_elementwise_kernel")
    ]
    assert printed[0] == 1 and all(n <= max(printed[:i], default=0) + 1 for i, n in enumerate(printed))


def test_the_comparison_numbers_kernels_as_the_summary_does():
    kernels = nsys_kernels()
    rows, cells = views(SQLITE, "--compare", SQLITE, kernel_cell=1)
    check_labels(rows, cells, shared_short_names(kernels))


def functor_variant(tmp_path):
    """ncu's raw CSV with cfg2.direct's last elementwise kernel renamed: the same demangled name
    but for the lambda instance deep in its middle (8 -> 5), as two dtypes' clamp kernels are."""
    with open(RAW, newline="") as handle:
        table = list(csv.reader(handle))
    header = table[0]
    name, push = header.index("Kernel Name"), header.index(PP)
    last = [
        i for i, row in enumerate(table[2:], 2) if "cfg2.direct" in row[push] and "elementwise" in row[name]
    ][-1]
    old = table[last][name]
    assert old.count("[lambda() (instance 8)]") == 1 and old.index("(instance 8)") > WIDTH
    table[last][name] = old.replace("[lambda() (instance 8)]", "[lambda() (instance 5)]")
    path = tmp_path / "functor.csv"
    with open(path, "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(table)
    return path, old, table[last][name]


def test_a_lambda_deep_in_the_middle_survives_the_cut(tmp_path):
    path, old, new = functor_variant(tmp_path)
    rows, cells = views(path)
    assert {short_of(old)} == {r["kernel"] for r in rows if r["kernel_full"] in (old, new)}
    check_labels(rows, cells, {short_of(old)})
    mine = {
        r["kernel_full"]: cells["demangled"][i] for i, r in enumerate(rows) if r["range"] == "cfg2.direct"
    }
    assert "instance 8" in mine[old] and "instance 5" in mine[new]
    # the original name is #1 wherever it appears (cfg2.direct first), the variant #2
    for row, short in zip(rows, cells["short"]):
        if row["kernel_full"] in (old, new):
            assert short.endswith(" #1" if row["kernel_full"] == old else " #2")
