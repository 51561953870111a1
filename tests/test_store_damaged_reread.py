"""A results store damaged where `results` re-reads a tune: one line naming the store, never an internal
error (the config and settings columns: tests/test_tune_report.py)."""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest
from conftest import run_nsprof

SHAPED = textwrap.dedent("""
    from nsprof.space import Space
    configs = [{"id": i, "ns_shapes": [1000 + i, 2000 + i]} for i in range(3)]
    space = Space(configs=configs, shapes=[{"M": 1}, {"M": 16}],
                  build=lambda c, s: (lambda: None), device="cpu")
""")


def _tuned(tmp_path, target=SHAPED, adaptive=False) -> dict:
    """A real tune of `target` into s.sqlite (with or without adaptive reps): its --json."""
    (tmp_path / "t.py").write_text(target)
    options = ["--backend", "ncu", "--mode", "direct", "--store", "s.sqlite", "--json", "--no-feed-back"]
    options += ["--no-tuner-pick", *([] if adaptive else ["--budget-s", "0"])]
    done = run_nsprof("tune", "t.py:space", *options, cwd=tmp_path, standins=True, in_process=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _reread(tmp_path) -> dict:
    """`results s.sqlite --target t.py:space --json`."""
    done = run_nsprof(
        "results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path, in_process=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _edit(store: Path, sql: str) -> None:
    with sqlite3.connect(store) as db:
        db.execute(sql)


@pytest.mark.parametrize(
    "edit, named",
    [
        ("UPDATE measurements SET shape_json = '[' WHERE config_id = 1", "shape"),  # was: JSONDecodeError
        ("UPDATE measurements SET config_id = 1099511627776 WHERE config_id = 0", "config id 1099511627776"),
        ("UPDATE measurements SET config_id = -3 WHERE config_id = 0", "config id -3"),
        ("UPDATE runs SET settings_json = json_set(settings_json, '$.truths', json('[1]'))", "settings"),
        ("UPDATE runs SET settings_json = json_set(settings_json, '$.truths', json('[[1]]'))", "settings"),
        ("UPDATE measurements SET duration_ns = 9e999 WHERE config_id = 1", "inf in column duration_ns"),
        ("UPDATE measurements SET clock_hz = -9e999 WHERE config_id = 1", "-inf in column clock_hz"),
        (
            "UPDATE runs SET settings_json = json_set(settings_json, '$.ranked_points', json('[[1]]'))",
            "ranked",
        ),
    ],
    # a huge id was a MemoryError; a truth that is no text an AttributeError; an infinite duration was
    # ranked (numpy's warnings printed)
    ids=[
        "shape JSON",
        "huge config id",
        "negative config id",
        "truth a number",
        "truth a list",
        "inf duration",
        "-inf clock",
        "ranked points",
    ],
)
def test_a_damaged_store_is_one_line_naming_what_it_holds(tmp_path, edit, named):
    _tuned(tmp_path)
    _edit(tmp_path / "s.sqlite", edit)
    done = run_nsprof("results", "s.sqlite", "--target", "t.py:space", cwd=tmp_path, in_process=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "internal error" not in line and "damaged or edited by hand" in line and named in line, line
    assert "s.sqlite" in line


UNSORTED = textwrap.dedent("""
    from nsprof.space import Space
    configs = [{"block_N": 32 * (i + 1), "block_K": 64, "ns": 1000 + 100 * i} for i in range(3)]
    shapes = [{"N": 64, "M": m} for m in (1, 16)]
    space = Space(configs=configs, shapes=shapes, build=lambda c, s: (lambda: None), device="cpu")
""")


def test_a_reread_labels_its_configs_and_shapes_as_the_tune_did(tmp_path):
    """The store keeps a config or shape as canonical JSON (its keys sorted): a tune labelled its configs in
    the target's key order (block_N=32,block_K=64) and `results` in the store's (block_K=64,block_N=32), so
    two outputs of one run differed wherever a config or shape was named. A re-read keeps the run's order."""
    live = _tuned(tmp_path, UNSORTED)
    again = _reread(tmp_path)

    def labels(report):
        return [
            (
                list(shape["shape_value"]),
                list(shape["best_config"]),
                [row["config"] for row in shape["ranked"]],
            )
            for shape in report["shapes"]
        ]

    assert labels(again) == labels(live)
    assert labels(live)[0][0] == ["N", "M"] and labels(live)[0][2][0].startswith("block_N="), labels(live)


# configs close enough that the first pass leaves a tie: tune's adaptive reps (on by default) run
TIED_UNSORTED = textwrap.dedent("""
    from nsprof.space import Space
    configs = [{"block_N": 32 * (i + 1), "block_K": 64, "ns": 1000 + i, "ns_sigma": 0.01, "seed": i}
               for i in range(3)]
    shapes = [{"N": 64, "M": m} for m in (1, 16)]
    space = Space(configs=configs, shapes=shapes, build=lambda c, s: (lambda: None), device="cpu")
""")


def test_a_reread_after_adaptive_reps_keeps_the_tunes_key_order(tmp_path):
    """tune's adaptive sessions are runs of their own, which record no key order; `results --target` anchors
    on the target's latest run, an adaptive one: the key order is the newest first pass's."""
    live = _tuned(tmp_path, TIED_UNSORTED, adaptive=True)
    assert any(shape["adaptive"]["sessions"] for shape in live["shapes"])  # the adaptive sessions did run

    def shapes(report):
        return [list(shape["shape_value"]) for shape in report["shapes"]]

    assert shapes(live) == [["N", "M"], ["N", "M"]]
    assert shapes(_reread(tmp_path)) == shapes(live)


NESTED = textwrap.dedent("""
    from nsprof.space import Space
    configs = [{"kw": {"num_warps": 4 * (i + 1), "BLOCK": 64}, "ns": 1000 + 300 * i} for i in range(3)]
    space = Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
""")


def test_a_reread_labels_a_config_holding_a_dict_as_the_tune_did(tmp_path):
    """A dict inside a config keeps its keys' order too (the store's canonical JSON sorted them: the tune's
    kw={'num_warps': 4, 'BLOCK': 64} read back as kw={'BLOCK': 64, 'num_warps': 4})."""
    live = _tuned(tmp_path, NESTED)
    labels = [row["config"] for row in live["ranked"]]
    assert labels[0].startswith("kw={'num_warps': 4"), labels
    assert [row["config"] for row in _reread(tmp_path)["ranked"]] == labels


# A run's recorded key order edited by hand: ignored, never an internal error.


def _set_keys(store, config_keys_sql_json: str) -> None:
    with sqlite3.connect(store) as db:
        (settings,) = db.execute("SELECT settings_json FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        record = json.loads(settings)
        record["config_key_orders"] = {"orders": ["@@"]}  # every config's order
        text = json.dumps(record, sort_keys=True).replace('"@@"', config_keys_sql_json)
        db.execute("UPDATE runs SET settings_json = ?", (text,))


@pytest.mark.parametrize("keys", ['[[["a"], []]]', '[[{"a": 1}, []]]'], ids=["list key", "dict key"])
def test_a_hand_edited_config_keys_with_an_unhashable_key_is_no_internal_error(tmp_path, keys):
    _tuned(tmp_path, UNSORTED)
    _set_keys(tmp_path / "s.sqlite", keys)
    done = run_nsprof("results", "s.sqlite", "--target", "t.py:space", cwd=tmp_path, in_process=True)
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 2), done.stderr


@pytest.mark.parametrize(
    "keys",
    ["[1]", '[["a"]]', "[[1, 2]]", '"x"', "null", '[["block_N", 5]]', "[" * 5000 + "]" * 5000],
    ids=["ints", "short pair", "int pair", "text", "null", "odd inner", "deep"],
)
def test_other_malformed_config_keys_are_ignored(tmp_path, keys):
    _tuned(tmp_path, UNSORTED)
    _set_keys(tmp_path / "s.sqlite", keys)
    done = run_nsprof("results", "s.sqlite", "--target", "t.py:space", cwd=tmp_path, in_process=True)
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "configs",
    [
        '[{2: "b", 1: "a"}, {2: "c", 1: "d"}]',
        '[{"x": {"q": 1, "p": 2}}, {"x": 3}]',
    ],
    ids=["int keys", "dict then int"],
)
def test_odd_configs_reread_as_labelled(tmp_path, configs):
    target = textwrap.dedent(f"""
        from nsprof.space import Space
        configs = {configs}
        space = Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
    """)
    live = _tuned(tmp_path, target)
    done = run_nsprof(
        "results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path, in_process=True
    )
    assert done.returncode == 0, done.stderr
    labels = lambda r: sorted(row["config"] for row in r["ranked"])  # noqa: E731
    assert labels(json.loads(done.stdout)) == labels(live)


def test_a_deep_settings_json_lists_in_one_line(tmp_path):
    _tuned(tmp_path, UNSORTED)
    _set_keys(tmp_path / "s.sqlite", "[" * 5000 + "]" * 5000)
    done = run_nsprof("results", "s.sqlite", cwd=tmp_path, in_process=True)
    assert "internal error" not in done.stderr, done.stderr


DIFFERING = textwrap.dedent("""
    from nsprof.space import Space
    configs = [{"b": 1, "ns": 1000}, {"a": 2, "b": 2, "ns": 1300}, {"ns": 1600, "b": 3}]
    space = Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
""")


def test_configs_whose_keys_differ_in_order_read_back_each_in_its_own(tmp_path):
    """One order merged over every config ({b, ns}, then {a, b, ns}) read the second back as b=2,ns=1300,a=2:
    each config keeps its own."""
    live = _tuned(tmp_path, DIFFERING)
    labels = sorted(row["config"] for row in live["ranked"])
    assert "a=2,b=2,ns=1300" in labels and "ns=1600,b=3" in labels, labels
    assert sorted(row["config"] for row in _reread(tmp_path)["ranked"]) == labels


def test_a_reread_of_an_earlier_run_takes_that_runs_key_order(tmp_path):
    """`results --run N` labels configs in the order run N recorded, not a newer run's of the same target."""
    live = _tuned(tmp_path, UNSORTED)
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(runs)") if row[1] != "id"]
        (settings,) = db.execute("SELECT settings_json FROM runs WHERE id = 1").fetchone()
        record = json.loads(settings)
        orders = record["config_key_orders"]["orders"]
        orders[0] = orders[0][::-1]  # a later run that recorded another order
        db.execute(
            f"INSERT INTO runs ({', '.join(columns)}) SELECT {', '.join(columns)} FROM runs WHERE id = 1"
        )
        db.execute("UPDATE runs SET settings_json = ? WHERE id = 2", (json.dumps(record, sort_keys=True),))
    done = run_nsprof("results", "s.sqlite", "--run", "1", "--json", cwd=tmp_path, in_process=True)
    assert done.returncode == 0, done.stderr
    first = [row["config"] for row in json.loads(done.stdout)["ranked"]]
    assert first == [row["config"] for row in live["ranked"]]
    assert [row["config"] for row in _reread(tmp_path)["ranked"]] != first  # run 2, the newest: its order


RESUME = ["--backend", "ncu", "--mode", "direct", "--store", "s.sqlite", "--no-feed-back", "--no-tuner-pick"]
READERS = [
    ("results", "s.sqlite", "--target", "t.py:space"),
    ("results", "s.sqlite"),
    ("results", "s.sqlite", "--export", "out.csv"),
    ("tune", "t.py:space", *RESUME, "--budget-s", "0", "--resume"),
]


@pytest.mark.parametrize(
    "column, text", [("duration_ns", "inf"), ("cycles", "-Infinity"), ("clock_hz", "nan")], ids=str
)
def test_a_number_stored_as_text_is_the_damaged_store_line_in_every_reader(tmp_path, column, text):
    """SQLite keeps 'inf' (or 'nan') written into a REAL column as text, which pandas reads as a float: the
    finite check asked math.isfinite of the text (an internal error). An infinite value is the one damaged-store
    line; 'nan' reads as an empty value, as it did before there was a check."""
    _tuned(tmp_path)
    _edit(tmp_path / "s.sqlite", f"UPDATE measurements SET {column} = '{text}' WHERE config_id = 1")
    for command in READERS:
        done = run_nsprof(*command, cwd=tmp_path, standins=True, in_process=True)
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr, (command, done.stderr)
        if text != "nan":
            assert done.returncode == 2 and "damaged or edited by hand" in done.stderr, (command, done.stderr)
        else:
            assert done.returncode == 0, (command, done.stderr)


def test_a_failures_timeout_that_is_no_number_is_the_damaged_store_line_on_resume(tmp_path):
    """ResultStore.missing read each failure's timeout_s with float(): text there was a ValueError."""
    _tuned(tmp_path)
    _edit(
        tmp_path / "s.sqlite",
        "UPDATE measurements SET duration_ns = NULL, error = 'timeout: still running after 1 s', "
        "failure_kind = 'timeout', timeout_s = 'abc' WHERE config_id = 1",
    )
    done = run_nsprof(*READERS[-1], cwd=tmp_path, standins=True, in_process=True)
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2 and "damaged or edited by hand" in done.stderr, done.stderr


ZERO_WINNER = textwrap.dedent("""
    from nsprof.space import Space
    configs = [{"id": i, "ns_shapes": [0 if i == 1 else 1000 + i, 2000 + i]} for i in range(3)]
    space = Space(configs=configs, shapes=[{"M": 1}, {"M": 16}], build=lambda c, s: (lambda: None), device="cpu")
""")


ZERO_WINNER_UNSHAPED = textwrap.dedent("""
    from nsprof.space import Space
    configs = [{"id": i, "ns": 0 if i == 1 else 1000 + i} for i in range(3)]
    space = Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
""")


def test_a_shape_won_in_zero_ns_prints_its_table(tmp_path):
    """A report can say 0 ns (nothing blanks it): the tune table divided the runner-up's time by it."""
    (tmp_path / "t.py").write_text(ZERO_WINNER)
    done = run_nsprof(
        "tune", "t.py:space", *RESUME, "--budget-s", "0", cwd=tmp_path, standins=True, in_process=True
    )
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr
    first = next(line for line in done.stdout.splitlines() if line.startswith("0  M=1"))
    words = first.split()
    assert words[2] == "1" and words[-2:] == ["-", "winner"], first  # config 1 (0 ns) wins, by no ratio
    (tmp_path / "t.py").write_text(ZERO_WINNER_UNSHAPED)
    done = run_nsprof(
        "tune", "t.py:space", *RESUME, "--budget-s", "0", cwd=tmp_path, standins=True, in_process=True
    )
    assert done.returncode == 0 and "inf%" not in done.stdout, done.stdout  # without shapes: the same
