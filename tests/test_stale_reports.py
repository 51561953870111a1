"""A session never reads a report that an earlier run left in a reused --work-dir, nor removes it:
real worker processes under a driver that, like nsys killed before it wrote its report, leaves no
new report (a stand-in whose report is whatever file lies at the part's report path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from nsprof.errors import ToolFailed
from nsprof.session import run_session
from nsprof.settings import ProfileSettings

sys.path.insert(0, str(FIXTURES.parent))
from standins import StatusDriver  # noqa: E402

TARGET = str(FIXTURES.parent / "targets" / "phases.py") + ":healthy"


class NoNewReport(StatusDriver):
    """The worker runs bare, as the stand-in's does; the profiler writes nothing, and finish returns
    the report at the part's path if there is one (as ncu's and nsys's finish do)."""

    def finish(self, report_base, log):
        report = report_base.with_suffix(self.suffix)
        return report if report.exists() else None


def test_a_report_left_by_an_earlier_run_in_the_work_dir_is_never_read_as_this_runs(tmp_path):
    # an earlier run (same --work-dir, same config ids) left part0's report, holding configs 0-3
    stale = tmp_path / f"part0{NoNewReport.suffix}"
    stale.write_text(
        json.dumps(
            {
                "done": [0, 1, 2, 3],
                "pid": 1,
                "job": {
                    "target": TARGET,
                    "config_ids": [0, 1, 2, 3],
                    "status": "",
                    "reps": 2,
                    "modes": ["direct"],
                },
            }
        )
    )
    settings = ProfileSettings(
        backend="nsys", modes=("direct",), reps=2, warmup=1, timeout_s=30, work_dir=tmp_path
    )
    kept = stale.read_bytes()
    # this run's profiler wrote no report: that is an error in one line, not the old run's rows
    with pytest.raises(ToolFailed, match="wrote no report") as raised:
        run_session(TARGET, 4, settings, driver=NoNewReport.for_session())
    assert "part1.log" in str(raised.value)  # this run took the next name
    assert stale.read_bytes() == kept  # and the earlier run's report is kept as it was


def test_a_report_left_without_its_status_file_is_passed_over_and_kept(tmp_path):
    """nsys's finish imports a .qdstrm left at the part's path: a name under which any file of the
    driver's report lies is never taken, even with its status file gone."""
    from nsprof.drivers.nsys import NsysDriver
    from nsprof.session.folders import claim_base, numbered

    driver = NsysDriver(Path("nsys"))
    (tmp_path / "part0.qdstrm").write_bytes(b"an earlier run's trace")
    (tmp_path / "part1.status").write_text("")
    base = claim_base(tmp_path, numbered("part"), ".status", driver.report_files)
    assert base == tmp_path / "part2" and (tmp_path / "part2.status").read_text() == ""
    assert (tmp_path / "part0.qdstrm").read_bytes() == b"an earlier run's trace"


def test_nsys_counts_its_qdstrm_and_export_among_its_report_files(tmp_path):
    # nsys's finish imports a .qdstrm left at the part's path: an old one would become this run's report
    from nsprof.drivers.nsys import NsysDriver

    base = tmp_path / "part0"
    assert sorted(p.name for p in NsysDriver(Path("nsys")).report_files(base)) == [
        "part0.nsys-rep",
        "part0.qdstrm",
        "part0.sqlite",
    ]
