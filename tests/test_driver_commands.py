"""The ncu and nsys command lines (build_command), asserted whole, on the CPU: fake tool paths, so that
no ncu or nsys is needed, and nothing is run."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from nsprof.drivers.ncu import NcuDriver
from nsprof.drivers.nsys import NsysDriver
from nsprof.settings import CACHE_CONTROLS, CLOCK_CONTROLS, GRAPH_PROFILING, TRUTH_VARIANTS, ProfileSettings

NCU_METRICS = "gpu__time_duration.sum,gpc__cycles_elapsed.max,gpc__cycles_elapsed.avg.per_second"


@pytest.fixture
def paths(tmp_path) -> tuple[Path, Path, Path]:
    """A fake tool folder, a job file and a report base (with a space in the folder's name)."""
    work = tmp_path / "work dir"
    return tmp_path / "bin", work / "part0.job.json", work / "part0"


def _ncu(
    tool: Path,
    job: Path,
    report: Path,
    clock: str = "base",
    cache: str = "all",
    graph: str = "node",
    python: str = sys.executable,
) -> list[str]:
    return [
        str(tool / "ncu"),
        "--nvtx",
        "--nvtx-include",
        "nsprof@nsprof/",
        "--metrics",
        NCU_METRICS,
        "--clock-control",
        clock,
        "--cache-control",
        cache,
        "--graph-profiling",
        graph,
        "--force-overwrite",
        "--export",
        str(report),
        *_worker(python, job),
    ]


def _worker(python: str, job: Path) -> list[str]:
    """`python -m nsprof.worker JOB`, with the current folder dropped from sys.path before any import."""
    code = "import sys; sys.path[:1] == [''] and sys.path.pop(0); import runpy; "
    code += "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
    return [python, "-c", code, "nsprof.worker", str(job)]


def _nsys(tool: Path, job: Path, report: Path, python: str = sys.executable) -> list[str]:
    return [
        str(tool / "nsys"),
        "profile",
        "--trace",
        "cuda,nvtx",
        "--sample",
        "none",
        "--cpuctxsw",
        "none",
        "--cuda-graph-trace",
        "node",
        "--force-overwrite",
        "true",
        "--output",
        str(report),
        *_worker(python, job),
    ]


def test_ncu_by_default_locks_clocks_flushes_caches_and_profiles_nsprofs_ranges_only(paths):
    tool, job, report = paths
    command = NcuDriver(tool / "ncu").build_command(ProfileSettings(backend="ncu"), job, report)
    assert command == _ncu(tool, job, report)


@pytest.mark.parametrize(
    ("clock", "cache", "graph"), list(itertools.product(CLOCK_CONTROLS, CACHE_CONTROLS, GRAPH_PROFILING))
)
def test_ncu_takes_the_clock_cache_and_graph_profiling_settings(paths, clock, cache, graph):
    tool, job, report = paths
    settings = ProfileSettings(backend="ncu", clock_control=clock, cache_control=cache, graph_profiling=graph)
    command = NcuDriver(tool / "ncu").build_command(settings, job, report)
    assert command == _ncu(tool, job, report, clock, cache, graph)


@pytest.mark.parametrize("condition", sorted(TRUTH_VARIANTS))
def test_a_truths_condition_becomes_ncus_clock_and_cache_flags(paths, condition):
    """ncu@free-warm and the other conditions: the words map onto --clock-control and --cache-control."""
    tool, job, report = paths
    overrides = TRUTH_VARIANTS[condition]
    command = NcuDriver(tool / "ncu").build_command(ProfileSettings(backend="ncu", **overrides), job, report)
    clock = {"base": "base", "free": "none"}[condition.split("-")[0]]
    cache = {"cold": "all", "warm": "none"}[condition.split("-")[1]]
    assert command == _ncu(tool, job, report, clock, cache)


@pytest.mark.parametrize("modes", [("direct",), ("graph",), ("direct", "graph")])
@pytest.mark.parametrize("driver", ["ncu", "nsys"])
def test_the_modes_travel_in_the_job_file_not_on_the_command_line(paths, modes, driver):
    tool, job, report = paths
    made = (NcuDriver if driver == "ncu" else NsysDriver)(tool / driver)
    command = made.build_command(ProfileSettings(backend=driver, modes=modes, reps=7, warmup=0), job, report)
    assert command == (_ncu if driver == "ncu" else _nsys)(tool, job, report)


def test_nsys_traces_cuda_and_nvtx_only_with_node_level_graph_trace(paths):
    tool, job, report = paths
    command = NsysDriver(tool / "nsys").build_command(ProfileSettings(backend="nsys"), job, report)
    assert command == _nsys(tool, job, report)


@pytest.mark.parametrize(("clock", "cache", "graph"), [("none", "none", "graph"), ("base", "all", "node")])
def test_nsys_takes_none_of_ncus_controls(paths, clock, cache, graph):
    tool, job, report = paths
    settings = ProfileSettings(
        backend="nsys", clock_control=clock, cache_control=cache, graph_profiling=graph
    )
    assert NsysDriver(tool / "nsys").build_command(settings, job, report) == _nsys(tool, job, report)


@pytest.mark.parametrize("driver", ["ncu", "nsys"])
def test_the_worker_runs_with_the_settings_python_and_the_paths_given(tmp_path, driver):
    tool = tmp_path / "tools dir"
    job, report = tmp_path / "w" / "part3.job.json", tmp_path / "w" / "part3"
    python = str(tmp_path / "venv" / "bin" / "python3")
    made = (NcuDriver if driver == "ncu" else NsysDriver)(tool / driver)
    command = made.build_command(ProfileSettings(backend=driver, python=python), job, report)
    assert command == (_ncu if driver == "ncu" else _nsys)(tool, job, report, python=python)
    assert command[-5:] == _worker(python, job)
