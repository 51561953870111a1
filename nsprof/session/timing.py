"""Where a session's time went.

Holds PHASES (every phase a session records, in order), PHASES_FILE (the record in a session's work
folder), timing_record (that record's shape, as JSON takes it), add_to_phases_file, phase_words,
runs_in_phases_file, and Timing (the phases gathered run by run).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nsprof.host.children import note
from nsprof.worker.phases import WORKER_RUN_PHASES, run_phases

# Every phase a session records, in order: a worker run's (nsprof.worker.phases.run_phases),
# then nsprof's own after each run: cleanup (making sure nothing of the run is left), export (the
# driver's finish: nsys export to SQLite) and parse (the driver's read).
PHASES = (*WORKER_RUN_PHASES, "cleanup", "export", "parse")

PHASES_FILE = "phases.json"  # in the session's work folder: every run's phases (see Timing.write)


def timing_record(
    wall_s: float, phases: dict[str, float], configs: dict[int, dict[str, float]], **extra
) -> dict:
    """Where a session's time went, as JSON takes it (PHASES_FILE, tune --json's first_pass_phases):
    {"wall_s", "phases": {name: s}, "configs": {"<id>": {"build": s, "measure": s}}, ...extra}."""
    return {
        "wall_s": wall_s,
        **extra,
        "phases": dict(phases),
        "configs": {str(c): dict(t) for c, t in sorted(configs.items())},
    }


def add_to_phases_file(work_dir: Path, **fields) -> None:
    """Add `fields` (what was timed beside the session: compile_ahead_s) to the session's
    PHASES_FILE in `work_dir`, when it is there (a session that failed early wrote none). One that
    cannot be read back or rewritten is left as it is, and said: only these times are missing."""
    path = Path(work_dir) / PHASES_FILE
    try:
        record = json.loads(path.read_text())
        record.update(fields)
        path.write_text(json.dumps(record, indent=1) + "\n")
    except FileNotFoundError:
        return
    except (OSError, ValueError, AttributeError) as exc:  # AttributeError: JSON that is no object
        print(f"nsprof: the compile step's time is not in {path}: {exc}", file=sys.stderr)


def runs_in_phases_file(path: Path) -> list[dict]:
    """The runs a PHASES_FILE holds (none where there is no file)."""
    try:
        return list(json.loads(path.read_text()).get("runs") or [])
    except FileNotFoundError:
        return []


def phase_words(phases: dict[str, float]) -> str:
    """`tool_start 1.23 s, worker_start 0.05 s, ...`: the phases in one line."""
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items())


class Timing:
    """Where a session's time went, run by run (Measured.phases, config_phases, PHASES_FILE)."""

    def __init__(self) -> None:
        self.runs: list[dict[str, float]] = []
        self.configs: dict[int, dict[str, float]] = {}

    def add(self, part, end, log: Path) -> None:
        """One worker run's phases: `part` (nsprof.session.reading.Part) as read after `end`
        (nsprof.session.supervise.RunEnd); the line they make goes to the run's `log`."""
        phases, configs = run_phases(part.status, end.launched, end.worker_gone, end.exited)
        phases.update(cleanup=max(0.0, end.cleaned - end.exited), export=part.export_s, parse=part.parse_s)
        self.runs.append(phases)
        for config_id, times in configs.items():
            entry = self.configs.setdefault(config_id, {"build": 0.0, "measure": 0.0})
            for name, seconds in times.items():
                entry[name] = entry.get(name, 0.0) + seconds
        try:
            with open(log, "a") as handle:
                note(handle, f"phases: {phase_words(phases)}")
        except OSError:
            pass

    def total(self) -> dict[str, float]:
        summed = {name: sum(run.get(name, 0.0) for run in self.runs) for name in PHASES}
        return {name: seconds for name, seconds in summed.items() if any(name in run for run in self.runs)}

    def write(self, path: Path, started_at: float, ended_at: float) -> None:
        """The phases as JSON (`began`/`ended`: the session's time.monotonic(), for a caller that timed
        the whole command on the same clock); a folder that cannot take it goes without."""
        record = {
            "began": started_at,
            "ended": ended_at,
            **timing_record(ended_at - started_at, self.total(), self.configs),
            "runs": self.runs,
        }
        try:
            path.write_text(json.dumps(record, indent=1) + "\n")
        except OSError:
            pass
