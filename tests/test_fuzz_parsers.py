"""Hostile report files: every parser ends in a tidy table or in one ReportError line.

Property-based and mutation fuzzing (hypothesis) of the ncu CSV reader (raw and details
pages), the nsys SQLite reader, the .ncu-rep reader and the sniffing entry point
read_report. Seeds are the real fixtures; the mutations are byte-level (truncation at any
byte, bit flips, insertion, deletion, overwritten runs, pages of an SQLite file) and
structural (swapped or missing header/units rows, 1 MB cells, latin-1/UTF-16 encodings,
other tools' CSV, dropped tables and columns, NULLs where values belong, ranges that never
close, duplicate ids, negative durations).

The property (check_outcome): each input gives either a DataFrame with exactly
nsprof.schema.COLUMNS and plausible values, or nsprof.errors.ReportError with a one-line
message; never another exception type, never a hang (a hypothesis deadline per example, a
hard alarm behind it, and a time limit on the .ncu-rep child process). Memory stays
bounded: inputs are the fixtures' size plus at most 1 MB, and NVIDIA's native .ncu-rep
loader runs in a child process under an address-space limit.

Examples are derandomized (the same cases on every run, so CI is reproducible); each test
checks that it ran all its cases. Bugs the fuzzing found are kept below as explicit regression
tests (test_regression_*).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import lzma
import math
import os
import re
import signal
import sqlite3
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES, run_nsprof
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsprof.errors import ReportError
from nsprof.reports import read_report
from nsprof.reports.ncu_csv import read_ncu_csv
from nsprof.reports.nsys.reader import read_nsys_sqlite
from nsprof.schema import COLUMN_DTYPES, COLUMNS

CSV_SEEDS = {
    name: (FIXTURES / name).read_bytes()
    for name in ("fixture_node_raw.csv", "fixture_graph_raw.csv", "fixture_node_details.csv")
}
RAW_SEEDS = [name for name in CSV_SEEDS if name.endswith("_raw.csv")]
SQLITE_SEED = (FIXTURES / "fixture.sqlite").read_bytes()
KERNEL, RUNTIME, NVTX, STRINGS = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "StringIds",
)

# Cases per test; together well over 1,000 (test_fuzz_case_count checks), about a minute
# on two cores. The .ncu-rep cases start a child process each (~0.2 s), hence fewer.
EXAMPLES = {
    "ncu_csv_bytes": 250,
    "ncu_csv_structure": 200,
    "ncu_csv_other_tools": 100,
    "nsys_sqlite_bytes": 200,
    "nsys_sqlite_schema": 200,
    "ncu_rep_bytes": 100,
    "read_report": 120,
}
COUNTS: Counter = Counter()
HARD_LIMIT_S = 60  # per example, behind hypothesis' deadline: a hang fails instead of blocking CI
NCU_REP_LIMITS = {"timeout_s": 30.0, "max_memory_bytes": 1 << 30}


def fuzz_settings(name: str, deadline_s: float = 10.0):
    # derandomize: the same cases every run; database=None: nothing written to .hypothesis/.
    # The deadline is generous because CI machines are shared; typical cases take 10-50 ms.
    chosen = settings(
        max_examples=EXAMPLES[name],
        derandomize=True,
        database=None,
        deadline=timedelta(seconds=deadline_s),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )

    def apply(test):
        test = chosen(test)
        test.fuzz_case = name  # _every_case_ran checks its count
        return test

    return apply


@pytest.fixture(autouse=True)
def _every_case_ran(request):
    """A fuzz test that passed ran all its cases: hypothesis gave it EXAMPLES[name] examples."""
    name = getattr(request.function, "fuzz_case", None)
    before = COUNTS[name]
    yield
    if name is not None:
        assert COUNTS[name] - before == EXAMPLES[name], (name, COUNTS[name] - before)


class Hang(Exception):
    """An example ran past HARD_LIMIT_S."""


@contextlib.contextmanager
def hard_limit(seconds: float = HARD_LIMIT_S):
    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- the property --------------------------------------------------------------------------


def assert_tidy(frame) -> None:
    """A correct-looking table: the schema's columns and dtypes, and values a kernel can have."""
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == COLUMNS
    assert {name: str(dtype) for name, dtype in frame.dtypes.items()} == {
        name: str(pd.api.types.pandas_dtype(dtype)) for name, dtype in COLUMN_DTYPES.items()
    }
    assert len(frame) > 0
    for column in ("duration_ns", "cycles", "clock_hz"):
        values = frame[column].dropna()
        assert ((values >= 0) & values.map(math.isfinite)).all(), (column, values[values < 0].head())
    assert set(frame["source"]) <= {"ncu", "nsys"}
    assert set(frame["workload"].dropna()) <= {"kernel", "graph"}
    assert set(frame["mode"].dropna()) <= {"direct", "graph"}
    for column, dtype in COLUMN_DTYPES.items():
        if dtype.startswith("string"):
            # Exports (--json, --csv, parquet) encode every string as UTF-8: no lone surrogates.
            "".join(frame[column].dropna()).encode("utf-8")
    for warning in frame.attrs.get("warnings", []):
        assert isinstance(warning, str) and "\n" not in warning


def check_outcome(read, path: Path, test: str, **kwargs) -> str:
    """Run one parser on one input; "table" or "error", or fail the example."""
    COUNTS[test] += 1
    with hard_limit():
        try:
            frame = read(path, **kwargs)
        except ReportError as exc:
            message = str(exc)
            assert message.strip(), "empty ReportError message"
            assert "\n" not in message and "\r" not in message, f"multi-line message: {message!r}"
            return "error"
    assert_tidy(frame)
    return "table"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# --- byte-level mutations ------------------------------------------------------------------


@st.composite
def byte_edits(draw, size: int, max_edits: int = 3):
    """A list of edits for a `size`-byte seed, offsets biased to the head and tail where the
    headers, tables and length fields are."""
    offset = st.one_of(
        st.integers(0, min(size, 4096)), st.integers(0, size), st.integers(max(0, size - 65536), size)
    )
    edit = st.one_of(
        st.tuples(st.just("truncate"), st.integers(0, size)),
        st.tuples(st.just("flip"), offset, st.integers(0, 7)),
        st.tuples(st.just("insert"), offset, st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("delete"), offset, st.integers(1, 64)),
        st.tuples(st.just("overwrite"), offset, st.binary(min_size=1, max_size=512)),
        st.tuples(
            st.just("fill"),
            offset,
            st.sampled_from([b"\0", b"\xff", b'"', b",", b"\n"]),
            st.integers(1, 4096),
        ),
    )
    return draw(st.lists(edit, min_size=1, max_size=max_edits))


def apply_edits(data: bytes, edits) -> bytes:
    out = bytearray(data)
    for edit in edits:
        kind, args = edit[0], edit[1:]
        if kind == "truncate":
            del out[args[0] :]
        elif not out:
            continue
        elif kind == "flip":
            position = min(args[0], len(out) - 1)
            out[position] ^= 1 << args[1]
        elif kind == "insert":
            out[args[0] : args[0]] = args[1]
        elif kind == "delete":
            del out[args[0] : args[0] + args[1]]
        elif kind == "overwrite":
            out[args[0] : args[0] + len(args[1])] = args[1]
        elif kind == "fill":
            out[args[0] : args[0] + args[2]] = args[1] * args[2]
    return bytes(out)


# --- ncu CSV ---------------------------------------------------------------------------------


@fuzz_settings("ncu_csv_bytes")
@given(data=st.data())
def test_ncu_csv_survives_byte_mutations(work, data):
    name = data.draw(st.sampled_from(sorted(CSV_SEEDS)), label="seed")
    edits = data.draw(byte_edits(len(CSV_SEEDS[name])), label="edits")
    path = work / "bytes.csv"
    path.write_bytes(apply_edits(CSV_SEEDS[name], edits))
    check_outcome(read_ncu_csv, path, "ncu_csv_bytes")


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _structure_edit(data: bytes, edit) -> bytes:
    kind, args = edit[0], edit[1:]
    lines = _lines(data)
    if kind == "swap":
        i, j = (a % len(lines) for a in args)
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "drop":
        del lines[args[0] % len(lines)]
    elif kind == "duplicate":
        lines.insert(args[0] % len(lines), lines[args[1] % len(lines)])
    elif kind == "huge_cell":
        # A 1 MB field: inside a quoted cell of one row, or as an extra unquoted cell.
        row = args[0] % len(lines)
        filler = args[1] * (1 << 20)
        if b'","' in lines[row]:
            lines[row] = lines[row].replace(b'","', b'","' + filler, 1)
        else:
            lines[row] += b"," + filler
    elif kind == "encoding":
        text = data.decode("utf-8", "replace")
        if args[0] == "latin-1":  # a non-ASCII kernel name, written in latin-1
            return text.replace("gemm_kernel", "gemm_k\u00e9rnel\u00b5").encode("latin-1", errors="replace")
        return text.encode(args[0], errors="replace")
    elif kind == "line_endings":
        return data.replace(b"\n", args[0])
    elif kind == "cell":  # one cell of one row replaced
        row = args[0] % len(lines)
        try:
            cells = next(csv.reader([lines[row].decode("utf-8", "replace")]), [])
        except csv.Error:  # a row an earlier edit made unreadable (a 1 MB cell): leave it
            cells = []
        if cells:
            cells[args[1] % len(cells)] = args[2]
            buffer = io.StringIO()
            csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="").writerow(cells)
            lines[row] = buffer.getvalue().encode("utf-8", "surrogatepass")
    elif kind == "junk_line":
        lines.insert(args[0] % len(lines), args[1])
    return b"\n".join(lines)


NO_NUL = st.characters(blacklist_characters="\0")
CELL_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            "n/a",
            "-5.664",
            "inf",
            "-inf",
            "nan",
            "1e308",
            "1e400",
            "99999999999999999999999",
            "-1",
            "5,664.5",
            "5.664,5",
            "1.2.3",
            "0x10",
            "\u0665\u0660",
            "\u00b2",
            "us",
            "msecond",
            '"',
            '""',
            "\\",
            "\x85",
            "\u2028",
        ]
    ),
    # No NUL: one in the first 4 KB makes the file "binary data" at once (byte edits add them).
    st.text(NO_NUL, max_size=30),
)
STRUCTURE_EDIT = st.one_of(
    st.tuples(st.just("swap"), st.integers(0, 5), st.integers(0, 60)),
    st.tuples(st.just("drop"), st.integers(0, 60)),
    st.tuples(st.just("duplicate"), st.integers(0, 60), st.integers(0, 60)),
    st.tuples(st.just("huge_cell"), st.integers(0, 60), st.sampled_from([b"x", b"\xe9", b'"', b","])),
    st.tuples(
        st.just("encoding"),
        st.sampled_from(["latin-1", "utf-16", "utf-16-le", "utf-16-be", "cp1252", "utf-32"]),
    ),
    st.tuples(st.just("line_endings"), st.sampled_from([b"\r\n", b"\r", b"\n\n", b"\x85"])),
    st.tuples(st.just("cell"), st.integers(0, 60), st.integers(0, 300), CELL_VALUES),
    st.tuples(
        st.just("junk_line"),
        st.integers(0, 60),
        st.sampled_from(
            [
                b"==PROF== Disconnected",
                b"==ERROR== unknown",
                b'"ID","Kernel Name"',
                b"",
                b'"0"',
                b"\xff\xfe\x00",
            ]
        ),
    ),
)


@fuzz_settings("ncu_csv_structure")
@given(data=st.data())
def test_ncu_csv_survives_structural_mutations(work, data):
    """Swapped/missing header and units rows, 1 MB cells, other encodings, odd cell values."""
    name = data.draw(st.sampled_from(sorted(CSV_SEEDS)), label="seed")
    edits = data.draw(st.lists(STRUCTURE_EDIT, min_size=1, max_size=3), label="edits")
    content = CSV_SEEDS[name]
    for edit in edits:
        content = _structure_edit(content, edit)
    path = work / "structure.csv"
    path.write_bytes(content)
    check_outcome(read_ncu_csv, path, "ncu_csv_structure")


NCU_HEADERS = [
    "ID",
    "Kernel Name",
    "gpu__time_duration.sum",
    "gpc__cycles_elapsed.max",
    "gpc__cycles_elapsed.avg.per_second",
    "Metric Name",
    "Metric Unit",
    "Metric Value",
    "Process ID",
    "Device",
    "Stream",
    "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",
]


@fuzz_settings("ncu_csv_other_tools")
@given(
    header=st.lists(
        st.one_of(st.sampled_from(NCU_HEADERS), st.text(NO_NUL, max_size=12)), min_size=1, max_size=8
    ),
    units=st.one_of(
        st.none(),
        st.lists(st.sampled_from(["", "ns", "us", "msecond", "cycle", "Ghz", "furlong"]), max_size=10),
    ),
    rows=st.lists(st.lists(CELL_VALUES, min_size=0, max_size=9), max_size=8),
    quoting=st.sampled_from([csv.QUOTE_ALL, csv.QUOTE_MINIMAL]),
    ncu_like=st.sampled_from(["no", "id", "kernel"]),
    duration_unit=st.sampled_from(["us", "ns", "msecond", "usecond", "", "furlong"]),
)
def test_ncu_csv_survives_other_tools_csv(work, header, units, rows, quoting, ncu_like, duration_unit):
    """CSV written by anything else: random headers (often with ncu's column names) and cells;
    some pass for an ncu raw page (ID, Kernel Name, duration, a units row, numeric IDs)."""
    if ncu_like == "id":  # past the "ID" header check, deeper into the parser
        header = ["ID", *header]
    elif ncu_like == "kernel":  # rectangular and quoted like ncu's own output
        header = ["ID", "Kernel Name", "gpu__time_duration.sum", *header]
        width = len(header)
        rows = [([str(i), *row] + [""] * width)[:width] for i, row in enumerate(rows)]
        units = None if units is None else (["", "", duration_unit, *units] + [""] * width)[:width]
        quoting = csv.QUOTE_ALL
    elif units is not None:
        units = ["", "", *units]
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=quoting)
    writer.writerow(header)
    if units is not None:
        writer.writerow(units)
    writer.writerows(rows)
    path = work / "other.csv"
    path.write_bytes(buffer.getvalue().encode("utf-8", "surrogatepass"))
    check_outcome(read_ncu_csv, path, "ncu_csv_other_tools")


# --- nsys SQLite ---------------------------------------------------------------------------


def _page_size(data: bytes) -> int:
    size = int.from_bytes(data[16:18], "big")
    return 65536 if size == 1 else size


@fuzz_settings("nsys_sqlite_bytes")
@given(data=st.data())
def test_nsys_sqlite_survives_byte_mutations(work, data):
    """Truncation, bit flips, inserted/deleted bytes and corrupt pages in the middle."""
    page = _page_size(SQLITE_SEED)
    corrupt_page = st.tuples(
        st.just("overwrite"), st.integers(page, len(SQLITE_SEED) - 1), st.binary(min_size=1, max_size=page)
    )
    edits = data.draw(
        st.one_of(byte_edits(len(SQLITE_SEED)), st.lists(corrupt_page, min_size=1, max_size=3)), label="edits"
    )
    path = work / "bytes.sqlite"
    path.write_bytes(apply_edits(SQLITE_SEED, edits))
    check_outcome(read_nsys_sqlite, path, "nsys_sqlite_bytes")


TABLE_COLUMNS = {
    KERNEL: [
        "start",
        "end",
        "correlationId",
        "shortName",
        "demangledName",
        "globalPid",
        "deviceId",
        "streamId",
        "graphNodeId",
    ],
    RUNTIME: ["start", "end", "correlationId", "globalTid", "nameId"],
    NVTX: ["start", "end", "eventType", "globalTid", "textId", "text", "domainId"],
    STRINGS: ["id", "value"],
    "META_DATA_EXPORT": ["name", "value"],
}
ODD_VALUES = st.sampled_from(
    [
        "NULL",
        "'abc'",
        "1.5",
        "X'00ff'",
        "X'ff80'",
        "-1",
        "0",
        "9223372036854775807",
        "-9223372036854775808",
        "1e300",
        "''",
        "'\u00e9' || char(0) || 'x'",
    ]
)
ROWS = st.sampled_from(["", " WHERE rowid % 2 = 0", " WHERE rowid % 7 = 3", " WHERE rowid = 1"])


def _relax(table: str) -> str:
    # CREATE TABLE AS drops NOT NULL and type constraints, so any value can go anywhere.
    return (
        f'CREATE TABLE relaxed AS SELECT * FROM "{table}"; DROP TABLE "{table}";'
        f' ALTER TABLE relaxed RENAME TO "{table}";'
    )


@st.composite
def sql_edits(draw):
    table = draw(st.sampled_from(sorted(TABLE_COLUMNS)))
    column = draw(st.sampled_from(TABLE_COLUMNS[table]))
    kind = draw(
        st.sampled_from(
            [
                "drop_table",
                "drop_column",
                "set",
                "duplicate_rows",
                "delete_rows",
                "negative_durations",
                "never_ends",
                "swap_ids",
                "empty_table",
            ]
        )
    )
    where = draw(ROWS)
    if kind == "drop_table":
        return f'DROP TABLE "{table}"'
    if kind == "drop_column":
        return _relax(table) + f'ALTER TABLE "{table}" DROP COLUMN "{column}"'
    if kind == "set":
        return _relax(table) + f'UPDATE "{table}" SET "{column}" = {draw(ODD_VALUES)}{where}'
    if kind == "duplicate_rows":
        return _relax(table) + f'INSERT INTO "{table}" SELECT * FROM "{table}"{where}'
    if kind == "delete_rows":
        return f'DELETE FROM "{table}"{where}'
    if kind == "negative_durations":
        return f'UPDATE {KERNEL} SET "end" = start - 1000{where}'
    if kind == "never_ends":
        return _relax(NVTX) + f'UPDATE {NVTX} SET "end" = NULL{where}'
    if kind == "swap_ids":  # duplicate correlation ids and string ids
        return (
            _relax(KERNEL)
            + _relax(RUNTIME)
            + _relax(STRINGS)
            + f"UPDATE {KERNEL} SET correlationId = 7{where}; UPDATE {RUNTIME} SET correlationId = 7{where};"
            f" UPDATE {STRINGS} SET id = 7{where}"
        )
    return f'DELETE FROM "{table}"'


@fuzz_settings("nsys_sqlite_schema")
@given(edits=st.lists(sql_edits(), min_size=1, max_size=4))
def test_nsys_sqlite_survives_schema_mutations(work, edits):
    """Wrong schema, missing tables, dropped columns, NULLs, open ranges, duplicate ids."""
    path = work / "schema.sqlite"
    path.write_bytes(SQLITE_SEED)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA synchronous = OFF")  # a scratch copy: no fsync per edit
        for edit in edits:
            try:
                conn.executescript(edit)
            except sqlite3.Error:
                continue  # an edit that does not apply to what earlier edits left (dropped table)
        conn.commit()
    check_outcome(read_nsys_sqlite, path, "nsys_sqlite_schema")


# --- .ncu-rep ------------------------------------------------------------------------------


@functools.cache
def ncu_rep_seeds() -> dict[str, bytes]:
    """The .ncu-rep fixtures, decompressed (not a fixture argument: hypothesis would print
    20 MB of it with every falsifying example)."""
    return {
        packed.name[: -len(".xz")]: lzma.decompress(packed.read_bytes())
        for packed in sorted(FIXTURES.glob("*.ncu-rep.xz"))
    }


@pytest.fixture(scope="module")
def ncu_report():
    return pytest.importorskip("ncu_report")


def _read_ncu_rep(path, **kwargs):
    from nsprof.reports.ncu_rep import read_ncu_rep

    return read_ncu_rep(path, **NCU_REP_LIMITS, **kwargs)


@fuzz_settings("ncu_rep_bytes", deadline_s=60.0)
@given(data=st.data())
def test_ncu_rep_survives_byte_mutations(work, ncu_report, data):
    """NVIDIA's native loader on damaged reports: a crash there is a ReportError here."""
    seeds = ncu_rep_seeds()
    name = data.draw(st.sampled_from(sorted(seeds)), label="seed")
    edits = data.draw(byte_edits(len(seeds[name]), max_edits=2), label="edits")
    path = work / "bytes.ncu-rep"
    path.write_bytes(apply_edits(seeds[name], edits))
    check_outcome(_read_ncu_rep, path, "ncu_rep_bytes")


# --- the sniffing entry point --------------------------------------------------------------

MAGICS = [
    b"SQLite format 3\0",
    b"NVR\0",
    b"NVIDIA Tegra Profiler Report",
    b"==PROF==",
    b'"ID","',
    b"\xef\xbb\xbf",
    b"\xff\xfe",
    b"\xfd7zXZ\0",
    b"PK\3\4",
    b"",
]


@fuzz_settings("read_report", deadline_s=60.0)
@given(data=st.data())
def test_read_report_survives_any_kind(work, ncu_report, fake_nsys, data):
    """Sniffing by content: wrong magic bytes on another kind's body, mutated bodies, any suffix."""
    seeds = {**CSV_SEEDS, "fixture.sqlite": SQLITE_SEED}
    if data.draw(st.integers(0, 9), label="ncu-rep?") == 0:  # 1 in 10: the child process is slower
        seeds = ncu_rep_seeds()
    name = data.draw(st.sampled_from(sorted(seeds)), label="seed")
    content = seeds[name]
    magic = data.draw(st.sampled_from(MAGICS), label="magic")
    if magic:
        content = magic + content[data.draw(st.integers(0, 64), label="cut") :]
    content = apply_edits(content, data.draw(byte_edits(len(content), max_edits=2), label="edits"))
    suffix = data.draw(
        st.sampled_from([".csv", ".sqlite", ".ncu-rep", ".qdstrm", ".xz", ".txt", ""]), label="suffix"
    )
    path = work / f"any{suffix}"
    path.write_bytes(content)
    check_outcome(_read_any, path, "read_report")


@pytest.fixture(scope="module")
def fake_nsys(tmp_path_factory):
    """NSPROF_NSYS -> a stand-in that fails like `nsys export` on a damaged .nsys-rep, so that
    mutated .nsys-rep inputs take the export path on every machine, without a real nsys."""
    folder = tmp_path_factory.mktemp("fake_nsys")
    nsys = folder / "nsys"
    nsys.write_text("#!/bin/sh\necho 'Importer error status: damaged report' >&2\nexit 1\n")
    nsys.chmod(0o755)
    saved = os.environ.get("NSPROF_NSYS")
    os.environ["NSPROF_NSYS"] = str(nsys)
    yield nsys
    if saved is None:
        del os.environ["NSPROF_NSYS"]
    else:
        os.environ["NSPROF_NSYS"] = saved


def _read_any(path):
    from nsprof.reports import sniff_kind

    try:
        kind = sniff_kind(path)
    except ReportError:
        kind = None
    # read_report hands these to read_ncu_rep: the native loader's child gets the fuzz limits.
    return read_report(path, **(NCU_REP_LIMITS if kind == "ncu-rep" else {}))


# --- regressions: inputs the fuzzing found, each once a crash or a wrong table ---------------


def _without_line(content: bytes, index: int) -> bytes:
    lines = content.split(b"\n")
    return b"\n".join(lines[:index] + lines[index + 1 :])


def _raw_csv_with(old: bytes, new: bytes, seed: str = "fixture_node_raw.csv") -> bytes:
    content = CSV_SEEDS[seed]
    assert old in content
    return content.replace(old, new, 1)


def _ncu_rep_with(name: str, offset: int, payload: bytes, insert: bool) -> bytes:
    data = bytearray(ncu_rep_seeds()[name])
    data[offset : offset if insert else offset + len(payload)] = payload
    return bytes(data)


def _sqlite_with(path: Path, script: str) -> Path:
    path.write_bytes(SQLITE_SEED)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(script)
        conn.commit()
    return path


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        # csv.Error escaped from the header row (a bare carriage return in it)
        ("cr-header", CSV_SEEDS["fixture_node_raw.csv"].replace(b"\n", b"\r"), "malformed ncu CSV header"),
        # KeyError 'Kernel Name': a details page whose header lost that column (latin-1 é)
        (
            "no-kernel-column",
            CSV_SEEDS["fixture_node_details.csv"].replace(b'"Kernel Name"', b'"K\xe9rnel Name"'),
            "without column(s) Kernel Name",
        ),
        # "unknown unit ''" said nothing about the cause: the units row was gone
        ("no-units-row", _without_line(CSV_SEEDS["fixture_node_raw.csv"], 1), "units row"),
    ],
)
def test_regression_csv_errors(work, name, content, message):
    path = work / f"regression-{name}.csv"
    path.write_bytes(content)
    with pytest.raises(ReportError, match=re.escape(message)):
        read_ncu_csv(path)
    assert check_outcome(read_ncu_csv, path, "regression") == "error"


def test_regression_csv_id_beyond_int64_is_not_a_row(work):
    # TypeError "cannot safely cast non-equivalent float64 to int64" from the ID column.
    path = work / "regression-big-id.csv"
    path.write_bytes(_raw_csv_with(b'\n"1",', b'\n"99999999999999999999999",'))
    frame = read_ncu_csv(path)
    assert len(frame) == 26 and frame["launch_id"].max() < 2**63


@pytest.mark.parametrize("value", ["99999999999999999999999", "123456789012345678", "\u0665"])
def test_regression_csv_odd_process_ids(work, value):
    # OverflowError / TypeError ("cannot safely cast non-equivalent float64 to int64") from a
    # Process ID too long for int64, or too long to pass through float64 exactly.
    rows = list(csv.reader(io.StringIO(CSV_SEEDS["fixture_node_raw.csv"].decode("utf-8"))))
    rows[2][rows[0].index("Process ID")] = value
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    path = work / "regression-pid.csv"
    path.write_text(buffer.getvalue())
    frame = read_ncu_csv(path)
    assert frame["pid"].isna().tolist()[:2] == [True, False] and frame["pid"].iloc[1] == 452


def test_regression_csv_negative_and_infinite_values_are_blanked(work):
    # A negative or infinite duration went into the table as a measurement.
    rows = list(csv.reader(io.StringIO(CSV_SEEDS["fixture_node_raw.csv"].decode("utf-8"))))
    column = rows[0].index("gpu__time_duration.sum")
    rows[2][column], rows[3][column] = "-5.664000", "inf"
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    path = work / "regression-negative.csv"
    path.write_text(buffer.getvalue())
    frame = read_ncu_csv(path)
    assert len(frame) == 27 and frame["duration_ns"].isna().tolist()[:3] == [True, True, False]
    assert any("negative or infinite" in w for w in frame.attrs["warnings"])
    assert_tidy(frame)


def test_regression_utf16_csv_is_read(work):
    # PowerShell's `>` writes UTF-16: "not a report nsprof reads" before.
    path = work / "regression-utf16.csv"
    path.write_bytes(CSV_SEEDS["fixture_node_raw.csv"].decode("utf-8").encode("utf-16"))
    assert (
        read_report(path)["duration_ns"].tolist()
        == read_ncu_csv(FIXTURES / "fixture_node_raw.csv")["duration_ns"].tolist()
    )


@pytest.mark.parametrize(
    ("name", "script"),
    [
        # TypeError "can't concat str to bytes": a blob where a string belongs
        ("blob-string", f"UPDATE {STRINGS} SET value = X'ff80' WHERE rowid % 3 = 0"),
        ("blob-nvtx-text", f"UPDATE {NVTX} SET text = X'ff80' WHERE text IS NOT NULL"),
        # TypeError with NoneType: a NULL string
        ("null-string", _relax(STRINGS) + f"UPDATE {STRINGS} SET value = NULL WHERE rowid % 3 = 0"),
        # "no such column: start": the runtime table without start, read again as a fallback
        ("runtime-without-start", f"ALTER TABLE {RUNTIME} DROP COLUMN start"),
        # "no such column: value": StringIds without its value column
        ("strings-without-value", _relax(STRINGS) + f"ALTER TABLE {STRINGS} DROP COLUMN value"),
    ],
)
def test_regression_sqlite_odd_cells_give_a_table(work, name, script):
    path = _sqlite_with(work / f"regression-{name}.sqlite", script)
    frame = read_nsys_sqlite(path)
    assert len(frame) == 65
    assert_tidy(frame)


def test_regression_sqlite_null_start_has_no_duration(work):
    # end - NULL gave durations of about 9.2e18 ns; end < start gave negative ones.
    path = _sqlite_with(
        work / "regression-null-start.sqlite",
        _relax(KERNEL) + f"UPDATE {KERNEL} SET start = NULL WHERE rowid % 3 = 0;"
        f' UPDATE {KERNEL} SET "end" = start - 1000 WHERE rowid % 3 = 1',
    )
    frame = read_nsys_sqlite(path)
    assert len(frame) == 65
    assert frame["duration_ns"].isna().sum() == 21 + 22  # rowid % 3 == 0 and == 1
    assert frame["start_ns"].isna().sum() == 21
    assert any("negative" in w for w in frame.attrs["warnings"])
    assert_tidy(frame)


@pytest.mark.parametrize(
    ("name", "script", "message"),
    [
        # UnicodeDecodeError: SQLite's error message quoted a schema that is not UTF-8
        (
            "schema-not-utf8",
            f"PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = "
            f"CAST(X'435245415445205441424c4520ff80' AS TEXT) WHERE name = '{KERNEL}'",
            "malformed database schema",
        ),
        # the same message over many lines (SQLite quoted a multi-line CREATE TABLE)
        (
            "schema-multiline",
            f"PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = "
            f"'CREATE TABLE x (a, -- one' || char(10) || 'b`, c' || char(10) || ')' "
            f"WHERE name = '{KERNEL}'",
            "malformed database schema",
        ),
        # a blob in an integer column: the message quoted all of the column's values
        (
            "blob-in-int-column",
            f"UPDATE {KERNEL} SET correlationId = X'00ff' WHERE rowid % 3 = 0",
            "not integers",
        ),
    ],
)
def test_regression_sqlite_errors_are_one_short_line(work, name, script, message):
    path = _sqlite_with(work / f"regression-{name}.sqlite", script)
    with pytest.raises(ReportError, match=re.escape(message)) as info:
        read_nsys_sqlite(path)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


@pytest.mark.parametrize(
    ("name", "offset", "payload"),
    [
        # bytes inserted in a length-prefixed block: a protobuf CHECK failed inside
        # ncu_report and aborted the interpreter (SIGABRT), taking nsprof down with it
        ("fixture_node.ncu-rep", 105238, bytes.fromhex("f027828403d3601d")),
        ("fixture_graph.ncu-rep", 18607, bytes.fromhex("175788")),
    ],
)
def test_regression_ncu_rep_native_crash_is_a_report_error(work, ncu_report, name, offset, payload):
    from nsprof.reports.ncu_rep import load_actions

    path = work / "regression-abort.ncu-rep"
    path.write_bytes(_ncu_rep_with(name, offset, payload, insert=True))
    # The loader's own process dies; the child's crash is the error, not nsprof's.
    with pytest.raises(ReportError, match="ncu_report crashed reading it") as info:
        load_actions(path, **NCU_REP_LIMITS)
    assert "SIGABRT" in str(info.value) and "\n" not in str(info.value)
    # read_report no longer gets that far: the inserted bytes break the block layout.
    with pytest.raises(ReportError, match="truncated or damaged") as info:
        read_report(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("offset", "payload"), [(9613079, b"\xd0"), (9613688, b"\xff\xff\xff\x7f")])
def test_regression_ncu_rep_undecodable_names(work, ncu_report, offset, payload):
    # ncu_report handed back names with lone surrogates; building the frame raised
    # UnicodeEncodeError (pyarrow) after the whole report had been read.
    path = work / "regression-names.ncu-rep"
    path.write_bytes(_ncu_rep_with("fixture_graph.ncu-rep", offset, payload, insert=False))
    assert check_outcome(_read_ncu_rep, path, "regression") == "table"


def test_ncu_rep_loader_time_limit(ncu_report, ncu_rep_dir):
    from nsprof.reports.ncu_rep import read_ncu_rep

    with pytest.raises(ReportError, match=r"did not finish reading it within 0.01 s"):
        read_ncu_rep(ncu_rep_dir / "fixture_node.ncu-rep", timeout_s=0.01)


def test_ncu_rep_loader_memory_limit_is_named(ncu_report, ncu_rep_dir):
    # Far too little memory: whichever way ncu_report fails, the message says the limit.
    from nsprof.reports.ncu_rep import read_ncu_rep

    with pytest.raises(ReportError, match=r"more than its 20 MiB memory limit") as info:
        read_ncu_rep(ncu_rep_dir / "fixture_node.ncu-rep", max_memory_bytes=20 << 20)
    assert "\n" not in str(info.value)
    assert len(read_ncu_rep(ncu_rep_dir / "fixture_node.ncu-rep", **NCU_REP_LIMITS)) == 27


# --- through the command line, as users see it ---------------------------------------------


def test_cli_reports_mutated_files_in_one_line(tmp_path, ncu_report):
    """`nsprof analyze` (in this process; the .ncu-rep reader in its own child): exit status 2, one stderr
    line, no traceback."""
    raw = CSV_SEEDS["fixture_node_raw.csv"]
    files = {
        "cut.csv": raw[:300],
        "no-units.csv": _without_line(raw, 1),
        "other-tool.csv": "Name,Time\nkernel,1\n".encode("utf-16"),
        "half.sqlite": SQLITE_SEED[: len(SQLITE_SEED) // 2],
        "crash.ncu-rep": _ncu_rep_with("fixture_graph.ncu-rep", 18607, bytes.fromhex("175788"), insert=True),
        "cut.ncu-rep": ncu_rep_seeds()["fixture_node.ncu-rep"][:1000],
    }
    _sqlite_with(tmp_path / "no-kernels.sqlite", f"DROP TABLE {KERNEL}")
    _sqlite_with(
        tmp_path / "bad-schema.sqlite",
        f"PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = "
        f"CAST(X'435245415445205441424c4520ff80' AS TEXT) WHERE name = '{KERNEL}'",
    )
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    for name in [*files, "no-kernels.sqlite", "bad-schema.sqlite"]:
        done = run_nsprof("analyze", tmp_path / name, in_process=True, timeout=120)
        assert done.returncode == 2, (name, done.returncode, done.stderr)
        assert done.stdout == "" and "Traceback" not in done.stderr, (name, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"nsprof: error: {tmp_path / name}:"), (
            name,
            done.stderr,
        )


def test_fuzz_case_count():
    """Well over 1,000 generated cases in all; each fuzz test checks that it ran its own (_every_case_ran)."""
    assert sum(EXAMPLES.values()) >= 1000
