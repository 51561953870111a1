"""Reading results: `analyze --sort` both ways, tune's config column readable for
realistic TileLang configs, and `doctor` useful on a machine without a GPU.

Numbers come from independent reads of the real fixtures (plain SQL on the nsys SQLite export
through test_analyze_options' readers, the csv module on profile's recorded CSV), never from
nsprof's own output.
"""

from __future__ import annotations

import csv
import importlib.util
import itertools
import json
import os
import re
import statistics
import subprocess
import sys

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, report_of
from test_analyze_options import NO_RANGE, SQLITE, by_key, csv_rows, natural, nsys_kernels, ok, table_rows
from test_env_faults import bare_env

from nsprof.analysis.ranking import rank
from nsprof.cli import cli
from nsprof.profile import config_summary
from nsprof.render.json import tune_document
from nsprof.render.tune_tables import format_ranked, format_shapes
from nsprof.schema import make_frame
from nsprof.tune import Ranking, ShapeReport

PYPROJECT = FIXTURES.parents[1] / "pyproject.toml"


def pyproject_extras() -> dict:
    """pyproject.toml's optional-dependencies, read with tomllib (Python 3.11+)."""
    tomllib = pytest.importorskip("tomllib")
    with open(PYPROJECT, "rb") as handle:
        return tomllib.load(handle)["project"]["optional-dependencies"]


RULE = re.compile(r"-+(\s+-+)+")  # a table's rule under its header
STAT = {"median": statistics.median, "total": sum, "count": len}


# --- --sort both ways ---------------------------------------------------------------------------


def test_sort_median_reversed_top_gives_the_fastest():
    groups = by_key(nsys_kernels())
    medians = sorted(statistics.median(v) for v in groups.values())
    out = csv_rows(ok(SQLITE, "--sort", "median", "--reverse", "--top", "5", "--format", "csv").stdout)
    assert [float(r["median_ns"]) for r in out] == pytest.approx(medians[:5])
    for r in out:  # each printed row is the group it names
        assert statistics.median(groups[(r["range"], r["kernel_full"])]) == pytest.approx(
            float(r["median_ns"])
        )
    # the printed table (a small report's plain-list path) orders the same way
    _, rows = table_rows(ok(SQLITE, "--sort", "median", "--reverse", "--top", "3", "--timeunit", "ns").stdout)
    header, _ = table_rows(ok(SQLITE, "--timeunit", "ns").stdout)
    column = next(i for i, h in enumerate(header) if h.startswith("median"))
    printed = [float(row[column].replace(",", "")) for row in rows]
    assert printed == pytest.approx(medians[:3], abs=0.5)


@pytest.mark.parametrize("sort_by", ["median", "total", "count"])
def test_reverse_puts_the_smallest_first_for_every_number(sort_by):
    groups = by_key(nsys_kernels())
    out = csv_rows(ok(SQLITE, "--sort", sort_by, "--reverse", "--format", "csv").stdout)
    assert len(out) == len(groups)
    values = [STAT[sort_by](groups[(r["range"], r["kernel_full"])]) for r in out]
    assert values == sorted(values)


def test_reverse_of_range_and_name_keeps_no_range_last():
    groups = by_key(nsys_kernels())
    out = csv_rows(ok(SQLITE, "--sort", "range", "--reverse", "--format", "csv").stdout)
    ranges = list(dict.fromkeys(r["range"] for r in out))
    named = sorted({r for r, _ in groups if r != NO_RANGE}, key=natural, reverse=True)
    assert ranges == named + [NO_RANGE]
    names = [
        r["kernel"] for r in csv_rows(ok(SQLITE, "--sort", "name", "--reverse", "--format", "csv").stdout)
    ]
    assert names == sorted(names, reverse=True)


def test_sort_help_says_how_to_reverse():
    result = CliRunner().invoke(cli, ["analyze", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--reverse" in text
    assert "--sort median --reverse: the fastest first" in text


# --- tune's config column -------------------------------------------------------------------------

# A realistic 5-key TileLang space over the 32 configs of the recorded seed run: block_M and
# threads constant, the other three varying; config 15 and 13 (the recorded run's two fastest)
# share their first 44 characters.
TILELANG = [
    {"block_M": 16, "block_N": n, "block_K": k, "num_stages": s, "threads": 128}
    for n, k, s in itertools.product((16, 32, 64, 128), (64, 128), (1, 2, 3, 4))
]
VARYING = ("block_N", "block_K", "num_stages")


def recorded_medians(mode: str) -> dict[int, float]:
    """{config_id: median over reps of the summed kernel durations} of profile_ncu.csv, by csv."""
    sums: dict[tuple[int, int], float] = {}
    with open(FIXTURES / "profile_ncu.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["error"] or row["mode"] != mode:
                continue
            key = (int(row["config_id"]), int(row["rep"]))
            sums[key] = sums.get(key, 0.0) + float(row["duration_ns"])
    reps: dict[int, list[float]] = {}
    for (config_id, _), value in sorted(sums.items()):
        reps.setdefault(config_id, []).append(value)
    return {c: statistics.median(v) for c, v in reps.items()}


def tilelang_result(mode: str) -> Ranking:
    """The recorded run ranked as tune ranks it, its configs the TileLang space above."""
    from nsprof.space import config_label

    frame = make_frame(pd.read_csv(FIXTURES / "profile_ncu.csv").to_dict("list"))
    summary = config_summary(frame)
    table = rank(summary[summary["mode"].isna() | (summary["mode"] == mode)], "median")
    table.insert(2, "config", [config_label(TILELANG[int(c)]) for c in table["config_id"]])
    return Ranking(table, "ncu", "ncu", f"ncu, mode {mode}")


def config_cells(text: str) -> dict[int, str]:
    """{config id: its config cell} of format_ranked's table."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    cells = {}
    for line in lines[rule + 1 :]:
        if not line.strip() or line.startswith(("best:", "note:")):
            break
        parts = re.split(r"\s{2,}", line.strip())
        cells[int(parts[1])] = parts[2]
    return cells


def test_config_column_shows_the_varying_keys_whole_and_the_constant_once():
    medians = recorded_medians("direct")
    first, second = sorted(medians, key=lambda c: (medians[c], c))[:2]
    assert (first, second) == (15, 13)
    result = tilelang_result("direct")
    text = format_ranked(result, TILELANG)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if RULE.fullmatch(line.rstrip())) - 1
    assert "all configs: block_M=16, threads=128" in lines[:header]
    cells = config_cells(text)
    assert set(cells) == set(range(32)) and set(medians) < set(cells)  # failed configs are rows too
    for config_id, cell in cells.items():  # every varying value whole, no constant key repeated
        assert cell == ",".join(f"{k}={TILELANG[config_id][k]}" for k in VARYING)
    assert cells[first] != cells[second]
    assert cells[first] == "block_N=32,block_K=128,num_stages=4"
    # the best line and --json keep the whole config
    assert "best: config 15 (block_M=16,block_N=32,block_K=128,num_stages=4,threads=128)" in lines
    ranked = {
        r["config_id"]: r["config"] for r in json.loads(tune_document(report_of(result, TILELANG)))["ranked"]
    }
    assert ranked[13] == "block_M=16,block_N=32,block_K=128,num_stages=2,threads=128"


def test_config_column_of_a_space_without_constant_keys_is_unchanged():
    configs = [{"block_N": n, "block_K": k} for n, k in itertools.product((32, 64), (64, 128))]
    configs = (configs * 8)[:32]
    frame = make_frame(pd.read_csv(FIXTURES / "profile_ncu.csv").to_dict("list"))
    summary = config_summary(frame)
    table = rank(summary[summary["mode"] == "direct"], "median")
    table.insert(
        2,
        "config",
        [f"block_N={configs[c]['block_N']},block_K={configs[c]['block_K']}" for c in table["config_id"]],
    )
    text = format_ranked(Ranking(table, "ncu", "ncu", "ncu, mode direct"), configs)
    assert "all configs:" not in text
    assert config_cells(text)[15] == "block_N=64,block_K=128"


def test_per_shape_table_shows_the_varying_keys_whole():
    shapes = []
    for index, mode in enumerate(("direct", "graph")):  # the two recorded modes as two shapes
        value = {"M": 1, "N": 1024, "K": 1024 * (index + 1)}
        shapes.append(ShapeReport({"ncu": tilelang_result(mode)}, "ncu", index, value))
    text = format_shapes(shapes, TILELANG)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if RULE.fullmatch(line.rstrip())) - 1
    assert "all configs: block_M=16, threads=128" in lines[:header]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[header + 2 :]]
    for index, mode in enumerate(("direct", "graph")):
        medians = recorded_medians(mode)
        winner = min(medians, key=lambda c: (medians[c], c))
        row = rows[index]
        assert int(row[2]) == winner
        assert row[3] == ",".join(f"{k}={TILELANG[winner][k]}" for k in VARYING)
        assert row[1] == f"M=1,N=1024,K={1024 * (index + 1)}"


# --- doctor without a GPU -------------------------------------------------------------------------


def test_doctor_without_a_gpu_says_what_works_and_what_to_install(tmp_path):
    from conftest import run_nsprof

    result = run_nsprof("doctor", env=bare_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    lines = out.splitlines()
    assert lines[-1] == "[FAIL] verdict   no ground truth available here"
    assert "nsprof analyze" in out and "nsprof results" in out
    assert any("offline" in line and "analyze" in line for line in lines)
    extras = pyproject_extras()
    modules = {"matplotlib": "plot", "pyarrow": "parquet", "dask": "dask", "torch": "torch"}
    for module, extra in modules.items():
        assert extra in extras
        line = next(line for line in lines if re.search(rf"\b{module}\b", line) and "optional" in line)
        if importlib.util.find_spec(module) is not None:
            assert line.startswith("[ok  ]"), line
        else:
            assert line.startswith("[--  ]") and f"pip install 'nsprof[{extra}]'" in line, line
    reader = next(line for line in lines if "ncu_report" in line and "optional" in line)
    assert ".ncu-rep" in reader


def test_doctor_names_only_extras_that_pyproject_has():
    from nsprof.doctor import OPTIONAL

    extras = pyproject_extras()
    named = {extra for _, extra, _ in OPTIONAL if extra}
    assert named and named <= set(extras)
    assert {"plot", "parquet", "dask", "torch", "tilelang", "cupti"} <= named


def test_doctor_finds_the_optional_packages_without_importing_them(tmp_path):
    heavy = ("matplotlib", "pyarrow", "dask", "distributed", "ncu_report", "torch", "tilelang", "triton")
    code = (
        "import sys; from nsprof.doctor import run_doctor; checks, ok = run_doctor(run_kernels=False); "
        f"print([m for m in {heavy!r} if m in sys.modules]); print(sum(c.name == 'optional' for c in checks))"
    )
    env = {k: v for k, v in bare_env(tmp_path).items() if v is not None}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr
    imported, optional = done.stdout.split("\n")[:2]
    assert imported == "[]"
    from nsprof.doctor import OPTIONAL

    assert int(optional) == len(OPTIONAL)


def test_split_configs_keeps_whole_what_it_cannot_split():
    from nsprof.render.configs import split_configs

    assert split_configs(TILELANG) == ({"block_M": 16, "threads": 128}, list(VARYING))
    assert split_configs([{"a": 1, "b": 2}, {"a": 1, "b": 2}]) == ({}, None)  # nothing varies
    assert split_configs([{"a": 1}]) == ({}, None)  # one config
    assert split_configs([{"a": 1}, "x"]) == ({}, None)  # not every config a dict
    assert split_configs([{"a": 1, "b": 2}, {"a": 1}]) == ({"a": 1}, ["b"])  # a key some lack varies


def test_doctor_no_run_on_a_gpu_machine_says_ground_truth_is_untested(tmp_path):
    from conftest import run_nsprof

    env = bare_env(tmp_path)
    for name, lines in {
        "nvidia-smi": ["NVIDIA H200, 580.159.04, 345 MHz, 1980 MHz, 3201 MHz"],
        "ncu": ["NVIDIA (R) Nsight Compute Command Line Profiler", "Version 2025.3.1.0"],
    }.items():  # stand-ins printing what the real tools print for doctor's questions
        tool = tmp_path / "bin" / name
        tool.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines))
        tool.chmod(0o755)
    result = run_nsprof("doctor", "--no-run", env=env)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("[ok  ] GPU") for line in lines)
    assert any(line.startswith("[ok  ] ncu") for line in lines)
    more = next(line for line in lines if line.startswith("[--  ] for more"))
    assert "nsprof doctor without --no-run" in more and "a GPU with its driver" not in more
    assert lines[-1] == "[FAIL] verdict   no ground truth available here"
