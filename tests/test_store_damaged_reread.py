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


def _tuned(tmp_path, target=SHAPED):
    (tmp_path / "t.py").write_text(target)
    done = run_nsprof(
        "tune",
        "t.py:space",
        "--backend",
        "ncu",
        "--mode",
        "direct",
        "--store",
        "s.sqlite",
        "--json",
        "--no-feed-back",
        "--no-tuner-pick",
        "--budget-s",
        "0",
        cwd=tmp_path,
        standins=True,
        in_process=True,
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
    ],
    ids=["shape JSON", "huge config id", "negative config id"],  # a huge id was a MemoryError
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
    done = run_nsprof(
        "results", "s.sqlite", "--target", "t.py:space", "--json", cwd=tmp_path, in_process=True
    )
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)

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
