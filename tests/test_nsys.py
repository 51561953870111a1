"""nsys SQLite parsing, checked against independent reads of the files (plain sqlite3).

The real fixture (tests/fixtures/fixture.sqlite) is an nsys 2025.3 export of a run of
scripts/fixture_workload.py on an H200. Expected values come from direct SQL in this file
(a simple quadratic join for NVTX attribution), never from the parser's own output.
Attribution edge cases use small hand-built databases with hand-worked answers.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES, run_nsprof

from nsprof.errors import ReportError, ToolNotFound
from nsprof.host.tools import find_nsys
from nsprof.reports.nsys.convert import export_nsys_rep
from nsprof.reports.nsys.reader import read_nsys_rep, read_nsys_sqlite
from nsprof.schema import COLUMN_DTYPES, COLUMNS, DEFAULT_DOMAIN

FIXTURE = FIXTURES / "fixture.sqlite"
NSYS_REP = FIXTURES / "fixture.nsys-rep"
CFG_RE = re.compile(r"cfg(\d+)\.(direct|graph)\.r(\d+)")
INT64_MAX = 2**63 - 1


def connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)


def na_to_none(values) -> list:
    return [None if pd.isna(v) else v for v in values]


# --- an independent read of the fixture -------------------------------------------------------


def expected_fixture_rows(path: Path = FIXTURE, domain: str | None = None) -> list[dict]:
    """Every kernel with its launch and NVTX ranges, by direct (quadratic) SQL."""
    con = connect_ro(path)
    domains = {0: DEFAULT_DOMAIN}
    domains.update(con.execute("SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75"))
    kernels = con.execute(
        """SELECT k.start, k.end, k.correlationId, k.graphNodeId, k.deviceId, k.streamId,
                  k.globalPid, s.value, r.start, r.globalTid
           FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN StringIds s ON s.id = k.shortName
           LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
           ORDER BY k.start, k.rowid"""
    ).fetchall()
    rows = []
    for start, end, corr, node, dev, stream, gpid, name, launch, gtid in kernels:
        holding = []
        if launch is not None:
            # Push/pop ranges of the launching thread, start/end ranges of its process,
            # whose [start, end] holds the launch call's start; outer first.
            holding = con.execute(
                """SELECT COALESCE(n.text, s.value), n.domainId FROM NVTX_EVENTS n
                   LEFT JOIN StringIds s ON s.id = n.textId
                   WHERE n.start <= :t AND (n.end IS NULL OR n.end >= :t)
                     AND ((n.eventType = 59 AND n.globalTid = :tid)
                          OR (n.eventType = 60 AND n.globalTid >> 24 = :tid >> 24))
                   ORDER BY n.start, COALESCE(n.end, 9223372036854775807) DESC""",
                {"t": launch, "tid": gtid},
            ).fetchall()
        named = [(text, domains[dom]) for text, dom in holding]
        eligible = [r for r in named if domain in (None, r[1])]
        inner = eligible[-1] if eligible else (None, None)
        groups: dict[str, list[str]] = {}
        for text, dom in named:
            groups.setdefault(dom, []).append(text)
        match = CFG_RE.fullmatch(inner[0] or "")
        rows.append(
            {
                "start_ns": start,
                "duration_ns": float(end - start),
                "launch_id": corr,
                "graph_node": node,
                "device": dev,
                "stream": stream,
                "pid": (gpid >> 24) & 0xFFFFFF,
                "tid": None if gtid is None else gtid & 0xFFFFFF,
                "kernel": name,
                "range": inner[0],
                "domain": inner[1],
                "nvtx_path": ";".join(f"{d}@{'/'.join(n)}" for d, n in groups.items()) or None,
                "config_id": int(match[1]) if match else None,
                "rep": int(match[3]) if match else None,
            }
        )
    con.close()
    return rows


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return read_nsys_sqlite(FIXTURE)


@pytest.fixture(scope="module")
def expected() -> list[dict]:
    return expected_fixture_rows()


def test_schema_columns_and_dtypes(frame):
    assert list(frame.columns) == COLUMNS
    wanted = {column: pd.api.types.pandas_dtype(dtype) for column, dtype in COLUMN_DTYPES.items()}
    assert frame.dtypes.to_dict() == wanted
    assert set(frame["source"]) == {"nsys"}
    assert set(frame["workload"]) == {"kernel"}
    assert set(frame["clock_control"]) == {"none"}
    assert set(frame["cache_control"]) == {"none"}
    assert frame["cycles"].isna().all() and frame["clock_hz"].isna().all()


def test_row_count_matches_the_kernel_table(frame):
    con = connect_ro(FIXTURE)
    (count,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert len(frame) == count == 65


def test_kernel_values_match_an_independent_read(frame, expected):
    for column in (
        "start_ns",
        "launch_id",
        "graph_node",
        "device",
        "stream",
        "pid",
        "tid",
        "kernel",
    ):
        assert na_to_none(frame[column]) == [e[column] for e in expected], column
    assert frame["duration_ns"].tolist() == [e["duration_ns"] for e in expected]


def test_attribution_matches_a_quadratic_sql_join(frame, expected):
    for column in ("range", "domain", "nvtx_path", "config_id", "rep"):
        assert na_to_none(frame[column]) == [e[column] for e in expected], column


def test_fixture_workload_structure(frame):
    """What scripts/fixture_workload.py launched, range by range."""
    in_cfg = frame[frame["range"].str.startswith("cfg", na=False)]
    per_range = in_cfg.groupby("range")["kernel"].apply(list).to_dict()
    assert len(per_range) == 3 * 2 * 3
    for name, kernels in per_range.items():
        config = int(CFG_RE.fullmatch(name)[1])
        if config < 2:
            assert kernels == ["gemm_kernel"], name
        else:  # torch.relu(x @ w): a matmul, then the relu
            assert kernels[0].startswith("nvjet") and len(kernels) == 2, name
            assert kernels[1] == "vectorized_elementwise_kernel", name
    assert set(in_cfg["domain"]) == {"nsprof"}
    assert (in_cfg["nvtx_path"] == "nsprof@nsprof/" + in_cfg["range"]).all()

    torch_push = frame[frame["range"] == "torch_push"]
    assert torch_push["kernel"].tolist() == ["gemm_kernel"]
    assert torch_push["domain"].tolist() == [DEFAULT_DOMAIN]
    # Innermost inside the nsprof outer range, which the path still shows.
    assert torch_push["nvtx_path"].tolist() == ["nsprof@nsprof;<default domain>@torch_push"]

    startend = frame[frame["range"] == "startend"]
    assert len(startend) == 2 and startend["domain"].eq(DEFAULT_DOMAIN).all()
    assert startend["nvtx_path"].eq("<default domain>@startend").all()

    # Warm-up, capture and the correctness check ran outside every range.
    outside = frame[frame["range"].isna()]
    assert len(outside) == 65 - 24 - 1 - 2
    assert outside["nvtx_path"].isna().all()
    assert (outside["start_ns"] < in_cfg["start_ns"].min()).all()


def test_graph_replays_have_graph_nodes(frame):
    con = connect_ro(FIXTURE)
    nodes = {
        corr: node
        for corr, node in con.execute("SELECT correlationId, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL")
    }
    graph = frame[frame["range"].str.contains(".graph.", regex=False, na=False)]
    direct = frame[frame["range"].str.contains(".direct.", regex=False, na=False)]
    assert len(graph) == 12 and len(direct) == 12
    assert graph["graph_node"].notna().all() and (graph["mode"] == "graph").all()
    assert direct["graph_node"].isna().all() and (direct["mode"] == "direct").all()
    # Both kernels of one cfg2 replay come from one cudaGraphLaunch (one correlationId),
    # as two different nodes.
    cfg2 = graph[graph["config_id"] == 2]
    assert cfg2.groupby("launch_id")["graph_node"].nunique().eq(2).all()
    # mode follows graphNodeId for every kernel, in ranges or not.
    expected_mode = ["graph" if nodes[c] is not None else "direct" for c in frame["launch_id"]]
    assert frame["mode"].tolist() == expected_mode


def test_config_mode_rep_filled_from_range_names(frame):
    named = frame[frame["range"].str.startswith("cfg", na=False)]
    parsed = [CFG_RE.fullmatch(name).groups() for name in named["range"]]
    assert named["config_id"].tolist() == [int(p[0]) for p in parsed]
    assert named["mode"].tolist() == [p[1] for p in parsed]
    assert named["rep"].tolist() == [int(p[2]) for p in parsed]
    assert sorted(set(zip(named["config_id"], named["mode"], named["rep"]))) == [
        (c, m, r) for c in range(3) for m in ("direct", "graph") for r in range(3)
    ]


def test_registered_strings_are_resolved(frame):
    con = connect_ro(FIXTURE)
    registered = {
        value
        for (value,) in con.execute(
            """SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
               WHERE n.eventType = 59 AND n.text IS NULL"""
        )
    }
    # The Python nvtx package registers its strings: the nsprof ranges have no text.
    assert len(registered) == 19 and "nsprof" in registered
    named = set(frame["range"].dropna())
    assert {r for r in registered if r != "nsprof"} <= named


def test_domain_filter(expected):
    filtered = read_nsys_sqlite(FIXTURE, domain="nsprof")
    independent = expected_fixture_rows(domain="nsprof")
    for column in ("range", "domain", "nvtx_path", "config_id", "rep"):
        assert na_to_none(filtered[column]) == [e[column] for e in independent], column
    # The torch_push kernel falls back to the enclosing nsprof range; startend has none.
    pushed = filtered["nvtx_path"] == "nsprof@nsprof;<default domain>@torch_push"
    assert filtered.loc[pushed, "range"].tolist() == ["nsprof"]
    assert filtered.loc[filtered["nvtx_path"] == "<default domain>@startend", "range"].isna().all()
    assert set(filtered["domain"].dropna()) == {"nsprof"}
    # nvtx_path lists every range whatever the filter.
    assert na_to_none(filtered["nvtx_path"]) == [e["nvtx_path"] for e in expected]


def test_default_domain_filter():
    frame = read_nsys_sqlite(FIXTURE, domain=DEFAULT_DOMAIN)
    assert set(frame["range"].dropna()) == {"torch_push", "startend"}


def test_labels_and_export_metadata(frame):
    con = connect_ro(FIXTURE)
    meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT"))
    assert frame.attrs["nsys_schema_version"] == meta["EXPORT_SCHEMA_VERSION"] == "3.20.3"
    assert frame.attrs["nsys_version"] == meta["EXPORT_PRODUCT_VERSION"]
    labelled = read_nsys_sqlite(FIXTURE, clock_control="base", cache_control="all")
    assert set(labelled["clock_control"]) == {"base"}
    assert set(labelled["cache_control"]) == {"all"}


def test_pid_tid_encoding_matches_the_processes_table(frame):
    """globalPid = hw << 48 | pid << 24; the launching thread here is the main thread."""
    con = connect_ro(FIXTURE)
    pids = dict(con.execute("SELECT globalPid, pid FROM PROCESSES"))
    (gpid,) = con.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert set(frame["pid"]) == {pids[gpid]}
    assert set(frame["tid"]) == {pids[gpid]}  # main thread: tid == pid on Linux


def test_file_is_not_modified_and_odd_paths_work(tmp_path):
    odd = tmp_path / "my report ü 'quoted' #1?.sqlite"
    shutil.copyfile(FIXTURE, odd)
    before = (odd.stat().st_mtime_ns, hashlib.sha256(odd.read_bytes()).hexdigest())
    fixture_before = (FIXTURE.stat().st_mtime_ns, hashlib.sha256(FIXTURE.read_bytes()).digest())
    frame = read_nsys_sqlite(odd)
    assert len(frame) == 65
    assert (odd.stat().st_mtime_ns, hashlib.sha256(odd.read_bytes()).hexdigest()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [odd.name]  # no journal or WAL
    read_nsys_sqlite(FIXTURE)
    after = (FIXTURE.stat().st_mtime_ns, hashlib.sha256(FIXTURE.read_bytes()).digest())
    assert after == fixture_before


def test_read_only_file_works(tmp_path):
    copy = tmp_path / "ro.sqlite"
    shutil.copyfile(FIXTURE, copy)
    copy.chmod(0o444)
    try:
        assert len(read_nsys_sqlite(str(copy))) == 65
    finally:
        copy.chmod(0o644)


# --- bad input --------------------------------------------------------------------------------


def assert_one_line_error(path: Path, *needles: str) -> str:
    with pytest.raises(ReportError) as info:
        read_nsys_sqlite(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(path.name) or message.startswith(str(path)), message
    for needle in needles:
        assert needle in message, message
    return message


def make_db(path: Path, statements: list[str]) -> Path:
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def test_missing_file(tmp_path):
    assert_one_line_error(tmp_path / "nope.sqlite", "no such file")


def test_empty_file(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert_one_line_error(empty, "empty")


def test_text_file(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("this is not a database\n" * 10)
    assert_one_line_error(text, "not an SQLite file")


def test_nsys_rep_given_instead_of_its_export():
    assert_one_line_error(NSYS_REP, "nsys-rep", "nsys export")


@pytest.mark.parametrize("keep", [50, 100, 4096, 100_000])
def test_truncated_copy_of_the_fixture(tmp_path, keep):
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(FIXTURE.read_bytes()[:keep])
    assert_one_line_error(cut, "truncated")


def test_truncated_copy_without_a_valid_size_header(tmp_path):
    # When the header's page count is not valid (an old writer), SQLite itself must notice.
    data = bytearray(FIXTURE.read_bytes()[: FIXTURE.stat().st_size // 2])
    data[92:96] = (int.from_bytes(data[24:28], "big") + 1).to_bytes(4, "big")
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(bytes(data))
    assert_one_line_error(cut, "unreadable SQLite database")


def test_corrupt_pages(tmp_path):
    data = bytearray(FIXTURE.read_bytes())
    data[4096:] = b"\xa5" * (len(data) - 4096)  # every page after the first is garbage
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(bytes(data))
    assert_one_line_error(bad, "unreadable SQLite database")


def test_database_without_a_kernel_table(tmp_path):
    db = make_db(tmp_path / "nokernels.sqlite", ["CREATE TABLE StringIds (id INTEGER, value TEXT)"])
    assert_one_line_error(db, "no CUDA kernel table", "-t cuda", "launch kernels")


def test_kernel_table_without_rows(tmp_path):
    db = make_db(
        tmp_path / "zero.sqlite",
        ["CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, shortName INTEGER)"],
    )
    assert_one_line_error(db, "no rows")


def test_fixture_kernel_table_emptied(tmp_path):
    copy = tmp_path / "emptied.sqlite"
    shutil.copyfile(FIXTURE, copy)
    make_db(copy, ["DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL"])
    assert_one_line_error(copy, "no rows")


# --- hand-built databases: attribution edge cases ------------------------------------------

HW = 1 << 48
P, Q = 100, 200  # two processes
GP, GQ = HW | P << 24, HW | Q << 24  # globalPid
T1, T2, T3 = GP | P, GP | 102, GQ | Q  # globalTid: P's main thread, P's second, Q's main
MYDOM, REGDOM = 7, 9

SCHEMA = [
    # The columns nsys writes, minus graphNodeId (missing optional column) and many others.
    """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
       deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
       globalPid INTEGER, demangledName INTEGER, shortName INTEGER NOT NULL)""",
    """CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
       eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL)""",
    """CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
       rangeId INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
       domainId INTEGER)""",
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
]
STRINGS = {
    1: "cudaLaunchKernel_v7000",
    2: "cudaGraphLaunch_v10000",
    3: "cuWeirdCall",  # a launching call without "Launch" in its name
    10: "B",  # a registered range name
    11: "regdom",  # a registered domain name
    20: "kern_a",
}
# (start, end, eventType, text, globalTid, textId, domainId)
NVTX = [
    # push/pop on T1, default domain: A > B > C, then an unclosed U > V
    (100, 1000, 59, "A", T1, None, 0),
    (200, 500, 59, None, T1, 10, 0),  # B: registered string (text NULL)
    (300, 400, 59, "C", T1, None, 0),
    (2000, None, 59, "U", T1, None, 0),  # never popped
    (2100, 2200, 59, "V", T1, None, 0),
    # push/pop on T1 in other domains, nested in time inside A / U
    (600, 700, 59, "D", T1, None, MYDOM),
    (5000, 5100, 59, "R", T1, None, REGDOM),
    # push/pop on T2 only
    (0, 10_000, 59, "X", T2, None, 0),
    # start/end ranges of process P (started on T2); S1 and S2 overlap, S3 is in both
    (3000, 3600, 60, "S1", T2, None, 0),
    (3300, 4000, 60, "S2", T2, None, MYDOM),
    (3400, 3500, 60, "S3", T2, None, 0),
    # a start/end range of process Q, and a push/pop range in Q's own domain 7 (domain ids
    # belong to a process: Q's 7 is not P's "mydom")
    (0, 10_000, 60, "Q1", T3, None, 0),
    (3000, 4000, 59, "QR", T3, None, MYDOM),
    # not ranges: domain creation (one named by text, one by a registered string), a mark
    (1, None, 75, "mydom", T1, None, MYDOM),
    (2, None, 75, None, T1, 11, REGDOM),
    (3, None, 75, "qdom", T3, None, MYDOM),
    (150, 150, 34, "a mark", T1, None, 0),
]
D = DEFAULT_DOMAIN
# kernel: (correlationId, launch time, launching thread, API name id, kernel globalPid,
#          expected range, expected domain, expected nvtx_path)
LAUNCHES = [
    (1, 50, T1, 1, GP, None, None, None),
    (2, 150, T1, 1, GP, "A", D, f"{D}@A"),
    (3, 350, T1, 1, GP, "C", D, f"{D}@A/B/C"),
    (4, 450, T1, 1, GP, "B", D, f"{D}@A/B"),  # C has ended: walk up to B
    (5, 300, T1, 1, GP, "C", D, f"{D}@A/B/C"),  # at C's start: closed interval
    (6, 400, T1, 1, GP, "C", D, f"{D}@A/B/C"),  # at C's end
    (19, 401, T1, 1, GP, "B", D, f"{D}@A/B"),  # 1 ns after C's end
    (7, 650, T1, 1, GP, "D", "mydom", f"{D}@A;mydom@D"),
    (8, 800, T1, 1, GP, "A", D, f"{D}@A"),
    (9, 2150, T1, 1, GP, "V", D, f"{D}@U/V"),
    (10, 2500, T1, 1, GP, "U", D, f"{D}@U"),  # unclosed U holds everything after it
    (11, 3100, T1, 1, GP, "S1", D, f"{D}@U/S1"),  # start/end range from another thread
    (12, 3450, T1, 1, GP, "S3", D, f"{D}@U/S1/S3;mydom@S2"),
    (13, 3700, T1, 1, GP, "S2", "mydom", f"{D}@U;mydom@S2"),  # S3, S1 ended; S2 holds
    (14, 5050, T1, 2, GP, "R", "regdom", f"{D}@U;regdom@R"),
    (15, 150, T2, 1, GP, "X", D, f"{D}@X"),  # T1's A does not count on T2
    (16, 3450, T3, 1, GQ, "QR", "qdom", f"{D}@Q1;qdom@QR"),  # none of P's ranges count
    (17, 150, T1, 3, GP, "A", D, f"{D}@A"),  # matched through the full runtime table
    (18, None, None, None, GP, None, None, None),  # no runtime row at all
]


def build_edge_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    for statement in SCHEMA:
        con.execute(statement)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        NVTX,
    )
    for position, (corr, launch, thread, name_id, gpid, *_) in enumerate(LAUNCHES):
        gpu_start = 1_000_000 + 1000 * position  # rows come back in this (GPU start) order
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, ?, 20, 20)",
            (gpu_start, gpu_start + 10 * corr, 7 + corr % 2, corr, gpid),
        )
        if launch is not None:
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?)",
                (launch, launch + 5, thread, corr, name_id),
            )
    # Unrelated API calls around the launches (not kernel launches).
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (90, 95, 0, ?, 999, 3)", (T1,))
    con.commit()
    con.close()
    return path


@pytest.fixture()
def edge_db(tmp_path) -> Path:
    return build_edge_db(tmp_path / "edges.sqlite")


def test_edge_cases_innermost_and_paths(edge_db):
    frame = read_nsys_sqlite(edge_db)
    assert frame["launch_id"].tolist() == [launch[0] for launch in LAUNCHES]
    assert na_to_none(frame["range"]) == [launch[5] for launch in LAUNCHES]
    assert na_to_none(frame["domain"]) == [launch[6] for launch in LAUNCHES]
    assert na_to_none(frame["nvtx_path"]) == [launch[7] for launch in LAUNCHES]


def test_edge_cases_missing_optional_columns(edge_db):
    frame = read_nsys_sqlite(edge_db)
    assert list(frame.columns) == COLUMNS
    assert frame["graph_node"].isna().all()  # no graphNodeId column
    assert set(frame["mode"]) == {"direct"}
    assert set(frame["kernel"]) == {"kern_a"}
    assert frame["duration_ns"].tolist() == [10.0 * launch[0] for launch in LAUNCHES]
    assert frame["stream"].tolist() == [7 + launch[0] % 2 for launch in LAUNCHES]
    assert frame.attrs["nsys_schema_version"] is None  # no META_DATA_EXPORT table


def test_edge_cases_pid_and_tid(edge_db):
    frame = read_nsys_sqlite(edge_db)
    tids = {T1: P, T2: 102, T3: Q}
    assert na_to_none(frame["tid"]) == [tids.get(launch[2]) for launch in LAUNCHES]
    assert frame["pid"].tolist() == [P if launch[4] == GP else Q for launch in LAUNCHES]


@pytest.mark.parametrize(
    ("domain", "expected"),
    [
        # kernel 12 (t=3450): U, S1, S3 (default) and S2 (mydom) hold it
        ("mydom", {7: "D", 12: "S2", 13: "S2", 3: None, 14: None, 16: None}),
        (DEFAULT_DOMAIN, {7: "A", 12: "S3", 13: "U", 14: "U", 3: "C", 16: "Q1"}),
        ("qdom", {16: "QR", 7: None}),
        ("regdom", {14: "R", 7: None, 12: None}),
        ("no such domain", {2: None, 12: None}),
    ],
)
def test_edge_cases_domain_filter(edge_db, domain, expected):
    frame = read_nsys_sqlite(edge_db, domain=domain).set_index("launch_id")
    for corr, name in expected.items():
        got = frame.loc[corr, "range"]
        assert (None if pd.isna(got) else got) == name, (domain, corr)
    everything = read_nsys_sqlite(edge_db).set_index("launch_id")
    assert frame["nvtx_path"].equals(everything["nvtx_path"])


def test_graph_launch_shares_its_launch_between_nodes(tmp_path):
    db = tmp_path / "graph.sqlite"
    make_db(
        db,
        [
            """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER,
               deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
               shortName INTEGER, graphNodeId INTEGER)""",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER,"
            " globalTid INTEGER, correlationId INTEGER, nameId INTEGER)",
            "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER,"
            " text TEXT, globalTid INTEGER, domainId INTEGER)",
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)",
            "INSERT INTO StringIds VALUES (1, 'cudaGraphLaunch_v10000'), (2, 'k1'), (3, 'k2')",
            f"INSERT INTO NVTX_EVENTS VALUES (10, 100, 59, 'cfg4.graph.r2', {T1}, 0)",
            f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (50, 60, {T1}, 5, 1)",
            f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (200, 230, 0, 7, 5, {GP}, 2, 41)",
            f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (231, 250, 0, 7, 5, {GP}, 3, 42)",
        ],
    )
    frame = read_nsys_sqlite(db)
    assert frame["kernel"].tolist() == ["k1", "k2"]
    assert frame["graph_node"].tolist() == [41, 42]
    assert frame["range"].tolist() == ["cfg4.graph.r2"] * 2
    assert frame[["config_id", "mode", "rep"]].values.tolist() == [[4, "graph", 2]] * 2


def test_no_runtime_or_nvtx_tables(tmp_path):
    db = make_db(
        tmp_path / "bare.sqlite",
        [
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, demangledName INTEGER)",
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)",
            "INSERT INTO StringIds VALUES (1, 'void ns::my_kernel<4, float>(float*, int)')",
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 25, 1), (30, 31, 99)",
        ],
    )
    frame = read_nsys_sqlite(db)
    assert frame["duration_ns"].tolist() == [15.0, 1.0]
    # shortName missing: the base name of demangledName; an unknown string id is NA.
    assert na_to_none(frame["kernel"]) == ["my_kernel", None]
    for column in ("range", "domain", "nvtx_path", "tid", "pid", "launch_id", "stream"):
        assert frame[column].isna().all(), column


# --- random nested ranges against brute force ----------------------------------------------


def random_trace(seed: int):
    """Random properly nested push/pop ranges per (thread, domain), overlapping start/end
    ranges, and launches, with distinct timestamps."""
    rng = random.Random(seed)
    threads = [T1, T2, GQ | 301]
    clock = 0
    stacks: dict[tuple[int, int], list[int]] = {}
    ranges: list[list] = []  # [start, end, type, name, thread, domain]
    launches = []
    for _ in range(600):
        clock += rng.randint(1, 5)
        thread, dom = rng.choice(threads), rng.choice([0, MYDOM])
        stack = stacks.setdefault((thread, dom), [])
        action = rng.random()
        if action < 0.3:
            ranges.append([clock, None, 59, f"p{len(ranges)}", thread, dom])
            stack.append(len(ranges) - 1)
        elif action < 0.6 and stack:
            ranges[stack.pop()][1] = clock
        elif action < 0.7:
            end = clock + rng.randint(1, 200) if rng.random() < 0.9 else None
            ranges.append([clock, end, 60, f"s{len(ranges)}", thread, rng.choice([0, MYDOM])])
        else:
            launches.append((clock, thread))
    for row in ranges:  # start/end ends may collide with later timestamps: make them odd
        if row[1] is not None and row[2] == 60:
            row[1] = row[1] * 10 + 7
        elif row[1] is not None:
            row[1] *= 10
        row[0] *= 10
    launches = [(t * 10, thread) for t, thread in launches]
    return ranges, launches


def brute_force(ranges, launches, domain_names):
    out = []
    for t, thread in launches:
        holding = [
            r
            for r in ranges
            if r[0] <= t <= (INT64_MAX if r[1] is None else r[1])
            and ((r[2] == 59 and r[4] == thread) or (r[2] == 60 and r[4] >> 24 == thread >> 24))
        ]
        holding.sort(key=lambda r: (r[0], -(INT64_MAX if r[1] is None else r[1])))
        groups: dict[str, list[str]] = {}
        for r in holding:
            groups.setdefault(domain_names[r[5]], []).append(r[3])
        out.append(
            (
                holding[-1][3] if holding else None,
                ";".join(f"{d}@{'/'.join(n)}" for d, n in groups.items()) or None,
            )
        )
    return out


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_match_brute_force(tmp_path, seed):
    ranges, launches = random_trace(seed)
    db = tmp_path / f"random{seed}.sqlite"
    con = sqlite3.connect(db)
    for statement in SCHEMA:
        con.execute(statement)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, domainId) VALUES (0, 75, 'mydom', ?)",
        (MYDOM,),
    )
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        ranges,
    )
    for corr, (t, thread) in enumerate(launches):
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, 20, 20)",
            (corr * 100, corr * 100 + 50, corr, thread & ~0xFFFFFF),
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1)",
            (t, t + 1, thread, corr),
        )
    con.commit()
    con.close()
    frame = read_nsys_sqlite(db)
    expected = brute_force(ranges, launches, {0: DEFAULT_DOMAIN, MYDOM: "mydom"})
    assert list(zip(na_to_none(frame["range"]), na_to_none(frame["nvtx_path"]))) == expected


# --- .nsys-rep export ----------------------------------------------------------------------


def fake_nsys(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def nsys_exporting(tmp_path, monkeypatch, source=FIXTURE):
    """A stand-in nsys that records its argv and "exports" `source` to -o's path."""
    nsys = fake_nsys(
        tmp_path,
        'printf "%s\\n" "$@" > "$(dirname "$0")/argv.txt"\n'
        'prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        f'cp "{source}" "$out"\n',
    )
    monkeypatch.setenv("NSPROF_NSYS", str(nsys))
    return nsys


def test_export_runs_nsys_and_reads_the_result(tmp_path, monkeypatch):
    nsys = nsys_exporting(tmp_path, monkeypatch)
    report = tmp_path / "run 1.nsys-rep"
    shutil.copyfile(NSYS_REP, report)
    out = export_nsys_rep(report)
    try:
        # nsprof's own fresh folder, never beside the report
        assert out.name == "run 1.sqlite" and out.parent != tmp_path
        assert out.parent.name.startswith("nsprof-nsys-")
        argv = (nsys.parent / "argv.txt").read_text().splitlines()
        assert argv == ["export", "--type", "sqlite", "-f", "true", "-o", str(out), str(report)]
    finally:
        shutil.rmtree(out.parent)
    assert not (tmp_path / "run 1.sqlite").exists()
    frame = read_nsys_rep(report, out_dir=tmp_path / "exports", domain="nsprof")
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["run 1.sqlite"]
    assert len(frame) == 65 and set(frame["domain"].dropna()) == {"nsprof"}


def test_export_leaves_files_beside_the_report_alone(tmp_path, monkeypatch):
    # `<stem>.sqlite` beside the report is a symbolic link to a file of the user's: nsys's
    # `-f true` there would have followed it and overwritten the file.
    nsys_exporting(tmp_path, monkeypatch)
    report = tmp_path / "run.nsys-rep"
    shutil.copyfile(NSYS_REP, report)
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (tmp_path / "run.sqlite").symlink_to(victim)
    frame = read_nsys_rep(report)
    assert len(frame) == 65
    assert victim.read_text() == "keep me" and (tmp_path / "run.sqlite").is_symlink()
    # the temporary export folder is gone after the read
    assert not any(Path(tempfile_dir()).glob("nsprof-nsys-*/run.sqlite"))


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_export_that_writes_nothing_never_reads_an_older_file(tmp_path, monkeypatch):
    nsys = fake_nsys(tmp_path, "exit 0\n")
    monkeypatch.setenv("NSPROF_NSYS", str(nsys))
    report = tmp_path / "run.nsys-rep"
    shutil.copyfile(NSYS_REP, report)
    shutil.copyfile(FIXTURE, tmp_path / "run.sqlite")  # an old export beside the report
    (tmp_path / "exports").mkdir()
    shutil.copyfile(FIXTURE, tmp_path / "exports" / "run.sqlite")  # and one in out_dir
    for out_dir in (None, tmp_path / "exports"):
        with pytest.raises(ReportError, match="exited 0 but wrote no SQLite file") as info:
            read_nsys_rep(report, out_dir=out_dir)
        assert str(report) in str(info.value)


def test_export_that_never_returns_is_killed(tmp_path, monkeypatch):
    import time

    # The stand-in starts a child that would outlive it: the whole group must go.
    nsys = fake_nsys(tmp_path, f'sleep 300 &\necho $! > "{tmp_path}/child.pid"\nwait\n')
    monkeypatch.setenv("NSPROF_NSYS", str(nsys))
    began = time.monotonic()
    with pytest.raises(ReportError, match="did not finish within 1 s") as info:
        export_nsys_rep(NSYS_REP, timeout_s=1)
    assert time.monotonic() - began < 60  # generous: the point is that it returns at all
    assert str(NSYS_REP) in str(info.value)
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(100):  # the killed child is reaped by init shortly
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the export's child process still runs")


def test_the_conversion_bound_follows_the_reports_size_and_the_environment_overrides_it(
    tmp_path, monkeypatch
):
    from nsprof.reports.nsys.convert import CONVERT_BASE_S, CONVERT_S_PER_MB, conversion_bound_s

    monkeypatch.delenv("NSPROF_CONVERT_TIMEOUT_S", raising=False)
    small, large = tmp_path / "small.nsys-rep", tmp_path / "large.qdstrm"
    small.write_bytes(b"x" * 1000)
    with open(large, "wb") as handle:
        handle.truncate(1000 * 10**6)  # sparse: 1 GB without writing it
    assert conversion_bound_s(small) == pytest.approx(CONVERT_BASE_S + CONVERT_S_PER_MB * 0.001)
    assert conversion_bound_s(large) == pytest.approx(CONVERT_BASE_S + CONVERT_S_PER_MB * 1000)
    assert (
        conversion_bound_s(small) < 900 < conversion_bound_s(large)
    )  # below the old fixed bound for a small report
    monkeypatch.setenv("NSPROF_CONVERT_TIMEOUT_S", "2.5")
    assert conversion_bound_s(small) == conversion_bound_s(large) == 2.5
    monkeypatch.setenv("NSPROF_CONVERT_TIMEOUT_S", "soon")
    with pytest.raises(ReportError, match="^NSPROF_CONVERT_TIMEOUT_S=soon is not a number$"):
        conversion_bound_s(small)


def test_analyze_of_an_nsys_rep_whose_export_hangs_is_one_line_after_the_bound(tmp_path):
    """`nsprof analyze r.nsys-rep` (a real child) with an nsys whose export never returns (and starts a
    helper): killed after the bound ($NSPROF_CONVERT_TIMEOUT_S, tiny), one line naming the tool, the
    bound and the report, which is left as it was."""
    import os
    import subprocess
    import sys

    from conftest import running, wait_for

    helper_pid = tmp_path / "helper.pid"
    nsys = fake_nsys(tmp_path, f'sleep 3600 &\necho $! > "{helper_pid}"\nwait\n')
    report = tmp_path / "run.nsys-rep"
    shutil.copyfile(NSYS_REP, report)
    env = {
        **os.environ,
        "NSPROF_NSYS": str(nsys),
        "NSPROF_CONVERT_TIMEOUT_S": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    try:
        result = subprocess.run(
            [sys.executable, "-m", "nsprof", "analyze", str(report)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"nsprof: error: {report}: nsys export did not finish within 1 s ($NSPROF_CONVERT_TIMEOUT_S); killed it. "
            f"The report is kept, nothing measured is lost: `nsprof analyze {report}` exports it again"
        ], result.stderr
        assert report.read_bytes() == NSYS_REP.read_bytes()
        helper = int(helper_pid.read_text())
        assert wait_for(lambda: not running(helper)), "the export's own child outlived the kill"
    finally:
        if helper_pid.exists() and running(int(helper_pid.read_text())):
            os.kill(int(helper_pid.read_text()), 9)


def test_export_failure_names_the_nsys_message(tmp_path, monkeypatch):
    nsys = fake_nsys(tmp_path, 'echo "Processing..." >&2\necho "ERROR: bad report" >&2\nexit 1\n')
    monkeypatch.setenv("NSPROF_NSYS", str(nsys))
    with pytest.raises(ReportError) as info:
        export_nsys_rep(NSYS_REP, out_dir=tmp_path)
    assert str(info.value) == f"{NSYS_REP}: nsys export failed: ERROR: bad report"


def test_export_without_nsys(monkeypatch, tmp_path):
    monkeypatch.setenv("NSPROF_NSYS", str(tmp_path / "no-nsys"))
    with pytest.raises(ToolNotFound):
        export_nsys_rep(NSYS_REP, out_dir=tmp_path)


def test_export_of_a_missing_report(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        export_nsys_rep(tmp_path / "missing.nsys-rep")


@pytest.mark.skipif(find_nsys(required=False) is None, reason="nsys is not installed here")
def test_real_nsys_export_matches_the_fixture_export(tmp_path):
    frame = read_nsys_rep(NSYS_REP, out_dir=tmp_path)
    reference = read_nsys_sqlite(FIXTURE)
    for column in ("kernel", "duration_ns", "range", "domain", "nvtx_path", "graph_node"):
        assert na_to_none(frame[column]) == na_to_none(reference[column]), column


def test_mode_comes_from_nsprofs_range_name_not_the_graph_node(tmp_path):
    # A "direct" measurement whose call replays a graph inside (torch.compile reduce-overhead)
    # still belongs to the direct mode, as in the ncu parsers.
    import shutil
    import sqlite3

    from nsprof.reports.nsys.reader import read_nsys_sqlite

    path = tmp_path / "graph_inside_direct.sqlite"
    shutil.copy(FIXTURE, path)
    with sqlite3.connect(path) as conn:
        correlation = conn.execute(
            "SELECT k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId JOIN NVTX_EVENTS n ON n.eventType = 59 "
            "AND r.start BETWEEN n.start AND n.end AND r.globalTid = n.globalTid "
            "JOIN StringIds s ON s.id = n.textId WHERE s.value = 'cfg0.direct.r0'"
        ).fetchone()[0]
        conn.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = 1 WHERE correlationId = ?", (correlation,)
        )
    frame = read_nsys_sqlite(path, domain="nsprof")
    row = frame[frame["range"] == "cfg0.direct.r0"].iloc[0]
    assert row["graph_node"] == 1 and row["mode"] == "direct"


# --- messages ----------------------------------------------------------------------------------


def test_a_locked_rollback_journal_database_names_the_lock(tmp_path, monkeypatch):
    import subprocess
    import sys

    import nsprof.reports.nsys.sqlite as nsys_module

    path = tmp_path / "sub" / "locked.sqlite"
    path.parent.mkdir()
    shutil.copyfile(FIXTURE, path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # rollback journal
    # A real writer process holds the exclusive lock until its stdin closes.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"conn = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "conn.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setattr(nsys_module, "_BUSY_TIMEOUT_S", 0.2, raising=False)
        with pytest.raises(ReportError) as info:
            read_nsys_sqlite(path)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    message = str(info.value)
    assert message.startswith(f"{path}:") and "locked by another process" in message
    assert "corrupt" not in message


# --- silent gaps: what a report lacks is said in one line --------------------------------------


@pytest.mark.parametrize(
    ("sql", "fragments"),
    [
        ("DROP TABLE NVTX_EVENTS", ["NVTX_EVENTS", "(no range)"]),
        ("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME", ["CUPTI_ACTIVITY_KIND_RUNTIME", "(no range)"]),
        ("DROP TABLE StringIds", ["StringIds", "'?'"]),
        (
            "ALTER TABLE NVTX_EVENTS DROP COLUMN globalTid",
            ["NVTX_EVENTS lacks column(s) globalTid", "(no range)"],
        ),
    ],
)
def test_a_missing_table_is_one_warning_line(tmp_path, sql, fragments):
    path = tmp_path / "gap.sqlite"
    shutil.copyfile(FIXTURE, path)
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    result = run_nsprof("analyze", path, in_process=True)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("nsprof: warning:")]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith(f"nsprof: warning: {path}: ")
    for fragment in fragments:
        assert fragment in warnings[0], (fragment, warnings[0])


def test_the_intact_fixture_gives_no_warning():
    result = run_nsprof("analyze", FIXTURE, "--domain", "nsprof", in_process=True)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_an_unknown_domain_is_one_warning_line():
    con = connect_ro(FIXTURE)
    domains = {
        DEFAULT_DOMAIN,
        *(text for (text,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 75")),
    }
    result = run_nsprof("analyze", FIXTURE, "--domain", "nsprf", in_process=True)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nsprof: warning: {FIXTURE}: "), result.stderr
    assert "'nsprf'" in lines[0] and "(no range)" in lines[0]
    assert all(name in lines[0] for name in domains), (domains, lines[0])


# --- kernels keyed by the full name, shown by the short one ------------------------------------


def expected_kernels_by_full_name(path: Path = FIXTURE) -> dict[str, tuple[str, list[int]]]:
    """full (demangled) name -> (short name, durations in ns), by plain SQL."""
    con = connect_ro(path)
    out: dict[str, tuple[str, list[int]]] = {}
    for full, short, duration in con.execute(
        "SELECT d.value, s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k"
        " JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName"
    ):
        out.setdefault(full, (short, []))[1].append(duration)
    return out


def test_rows_carry_the_full_name_and_the_short_one():
    import statistics

    from nsprof.analysis.summary import summarize

    expected = expected_kernels_by_full_name()
    shorts = [short for short, _ in expected.values()]
    assert shorts.count("vectorized_elementwise_kernel") == 5  # the fixture's pooled case
    frame = read_nsys_sqlite(FIXTURE)
    assert frame.columns.tolist() == COLUMNS and frame["kernel_full"].dtype == pd.api.types.pandas_dtype(
        COLUMN_DTYPES["kernel_full"]
    )
    assert dict(zip(frame["kernel_full"], frame["kernel"])) == {full: s for full, (s, _) in expected.items()}
    # one summary row per full name (all kernels in one group), with that kernel's own median
    summary = summarize(frame.assign(range=pd.NA, config_id=pd.NA))
    assert len(summary) == len(expected)
    for row in summary.itertuples():
        short, durations = expected[row.kernel_full]
        assert (row.kernel, row.count) == (short, len(durations))
        assert row.median_ns == statistics.median(durations)


def test_an_export_without_demangled_names_keys_by_what_it_has(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copyfile(FIXTURE, path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName")
        mangled = dict(
            conn.execute(
                "SELECT k.rowid, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k"
                " JOIN StringIds s ON s.id = k.mangledName"
            )
        )
    frame = read_nsys_sqlite(path)
    assert sorted(frame["kernel_full"]) == sorted(mangled.values())


# --- huge integers in range names -----------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["9" * 5000, f"cfg{'9' * 5000}.direct.r0", f"cfg0.direct.r{'9' * 5000}"],
    ids=["number", "config", "rep"],
)
def test_huge_integer_in_a_range_name_is_read_as_text(tmp_path, name):
    import json
    import shutil

    from click.testing import CliRunner

    from nsprof.cli import cli

    path = tmp_path / "huge.sqlite"
    shutil.copyfile(FIXTURE, path)
    with sqlite3.connect(path) as conn:
        assert (
            conn.execute("UPDATE StringIds SET value = ? WHERE value = 'cfg0.direct.r0'", (name,)).rowcount
            == 1
        )
    conn.close()
    result = CliRunner().invoke(cli, ["analyze", "--format", "json", str(path)])
    assert result.exit_code == 0, (result.stderr, repr(result.exception))
    rows = json.loads(result.stdout)
    by_range = {row["range"]: row for row in rows}
    assert by_range[name]["count"] == 1  # cfg0.direct.r0's one launch, under its own name
    assert by_range["cfg0.direct"]["count"] == 2
    frame = read_nsys_sqlite(path)
    assert frame.loc[frame["range"] == name, "config_id"].isna().all()


@pytest.mark.parametrize("rowid", [1 << 40, -(1 << 62)], ids=["far-above", "far-below"])
def test_a_kernel_table_whose_rowids_have_a_huge_gap_is_read_whole_without_hanging(tmp_path, rowid):
    """Rowids are SQLite's own and may have gaps (a valid database): the reader's chunks follow the
    rows there are, not the span of their numbers (2^40 of them would be millions of queries)."""
    path = tmp_path / "gap.sqlite"
    shutil.copyfile(FIXTURES / "fixture.sqlite", path)
    with sqlite3.connect(path) as db:
        (count,) = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        (moved,) = db.execute("SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = ? WHERE rowid = ?", (rowid, moved))
    code = "import sys; from nsprof.reports.nsys.reader import read_nsys_sqlite; print(len(read_nsys_sqlite(sys.argv[1])))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) == count
