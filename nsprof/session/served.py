"""A session through an `nsprof serve` (nsprof.serve): one job of its long-lived worker.

Holds run_served (the job, read as a standalone part is read, then what a fault there left
unmeasured measured standalone) and what it is made of: the job's report base in the work folder,
the request sent (nsprof.serve_client.submit), the server's answer read into a part, and the
standalone session's Measured merged after the served one's.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from nsprof.errors import GpuBusy, NsprofError, ToolFailed
from nsprof.reports.checks import one_line
from nsprof.schema import FAILURE_KINDS, Failure
from nsprof.serve_client import EXIT_WAIT_S, submit
from nsprof.serve_files import read_or_empty
from nsprof.session.folders import claim_base, numbered
from nsprof.session.parts import failure_rows, make_job, refuse_changed, run_parts
from nsprof.session.reading import Part, read_part, timeout_failure
from nsprof.session.request import Measured, SessionRun
from nsprof.session.supervise import RunEnd
from nsprof.session.timing import PHASES_FILE, Timing, runs_in_phases_file
from nsprof.worker.protocol import RunStatus, parse_status


def _served_base(work_dir: Path, driver) -> Path:
    """The report base of a served job in `work_dir`: `served`, or `served1`, `served2`... where an earlier
    run's job has that name. A job abandoned by its client (Ctrl-C) runs on in the server to the end of its
    current config and still writes its status file and report: the name is taken by creating the status
    file exclusively, so that no two runs share one, and a name under which a report lies (its status file
    removed) is passed over, so that only this job's collection can be read and no earlier one is lost."""

    def taken(base: Path) -> list[Path]:
        suffixes = {driver.suffix, ".nsys-rep", ".qdstrm", ".sqlite", ".log", ".job.json"} - {""}
        return [base.with_suffix(suffix) for suffix in suffixes]

    return claim_base(work_dir, numbered("served", bare_first=True), ".status", taken)


def _by_server(state: dict) -> str:
    return f"nsprof serve (pid {state['pid']}, worker pid {state.get('worker_pid')})"


def _say(notes: list[str], words: str) -> None:
    notes.append(words)
    print(f"nsprof: {words}", file=sys.stderr, flush=True)


def _submit(run: SessionRun, state: dict, base: Path) -> tuple[dict, bool, bool]:
    """Send the job of `run` to the server of `state`, its files under `base`, and follow it: (the
    server's last answer, whether the job started, whether nsprof was interrupted meanwhile)."""
    status_file, settings = base.with_suffix(".status"), run.settings
    base.with_suffix(".log").write_text(
        f"==NSPROF== measured by {_by_server(state)}; the worker's log: {state.get('log')}\n"
    )
    job_file = make_job(run, list(run.ids), status_file).write(base.with_suffix(".job.json"))
    request = {
        "op": "job",
        "job": str(job_file),
        "status": str(status_file),
        "report_base": str(base),
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "timeout_s": settings.timeout_s,
        "phase_bound_s": settings.phase_bound_s,
        "wait": settings.wait_gpu,
    }
    if state.get("busy") and settings.wait_gpu:  # a wait of unknown length: say why nothing moves
        print(
            f"nsprof: {_by_server(state)} is busy (another job, or a report it writes): "
            "this job waits in its queue",
            file=sys.stderr,
            flush=True,
        )
    return submit(state, request, status_file, settings, run.notify)


def _refuse(state: dict, answer: dict, status: RunStatus, log: Path, interrupted: bool) -> None:
    """The job that could not run (the GPU busy with another, a target changed or that does not load)
    refused; where nsprof was interrupted meanwhile, the interrupt is how the run ends (nothing was measured)."""
    try:
        _refused(state, answer, status, log)
    except NsprofError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise


def _refused(state: dict, answer: dict, status: RunStatus, log: Path) -> None:
    if answer.get("busy"):
        raise GpuBusy(
            f"nsprof serve (pid {state['pid']}) is measuring another job on this GPU; wait for it or "
            "pass --wait",
            device=0,
            path=Path(state.get("socket", "")),
            holder={"pid": state["pid"]},
        )
    refuse_changed(status, log)
    if _fault(answer) == "abort" or status.abort:
        raise ToolFailed(
            f"the profiled worker measured nothing: {status.abort or answer.get('reason')} "
            f"(log: {state.get('log')})"
        )


def _read_served(run: SessionRun, answer: dict, status: RunStatus, base: Path, end: RunEnd) -> Part:
    """The served job's part, with the fault the server knows: the config it was measuring is failed
    with the server's reason, or measured again where the server went away under it."""
    fault = _fault(answer)
    part = read_part(run, base, base.with_suffix(".log"), end)
    crashed = status.current
    if crashed is None or crashed in status.failed:
        return part
    if fault in ("crash", "timeout") and answer.get("config") == crashed:
        # The server knows the cause: its timeout (the bound this request gave it), or its
        # worker's crash with the kind the server's driver read from the log.
        part.failures[crashed] = (
            timeout_failure(run.settings.timeout_s)
            if fault == "timeout"
            else Failure(
                answer.get("reason") or part.failures[crashed],
                answer.get("kind") if answer.get("kind") in FAILURE_KINDS else "crash",
            )
        )
        run.notify("fail", crashed, part.failures[crashed])
    else:  # the server went away under it: not this config's fault, it is measured again
        part.failures.pop(crashed, None)
    return part


def _fault(answer: dict) -> str | None:
    """The server's fault of a job (None: it ended well)."""
    return None if answer.get("ok") else answer.get("fault") or "vanished"


def _served_end(answer: dict, began: float, answered: float) -> RunEnd:
    """The served job's end as a standalone run's would read (a fault: as a killed worker's)."""
    fault = _fault(answer)
    return RunEnd(
        returncode=0 if fault is None else -int(signal.SIGKILL),
        timed_out=answer.get("config") if fault == "timeout" else None,
        stalled="between" if fault == "stalled" else None,
        launched=began,
        exited=answered,
        cleaned=answered,
    )


def _settle(run: SessionRun, part: Part | None) -> tuple[list, dict[int, str], set[int]]:
    """What the served part made final, handed over at once: (its frames, its failures, the point
    ids it measured whole)."""
    if part is None:
        return [], {}, set()
    frames, failures, kept_ids = [], dict(part.failures), set()
    if part.kept is not None and len(part.kept):
        frames.append(part.kept)
        kept_ids = set(int(c) for c in run.points.of_frame(part.kept).dropna())
    if failures:
        frames.append(failure_rows(failures, run))
    if frames:
        import pandas as pd

        run.hand_over(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    return frames, failures, kept_ids


def _standalone(run: SessionRun) -> Measured:
    """`run` measured standalone, once the ended server has released the GPU (it does once it has
    shut its worker down)."""
    from nsprof.host.lock import gpu_lock

    with gpu_lock(0, wait=True, timeout_s=None if run.settings.wait_gpu else EXIT_WAIT_S):
        return run_parts(run)


def run_served(run: SessionRun, state: dict) -> Measured:
    """The session `run` through the `nsprof serve` of `state` (nsprof.serve_client.find_server): one job
    of its worker, read as a part is read (nsprof.session.reading.read_part); what a fault there left
    unmeasured (whole configs only count) is measured standalone (run_parts), under the GPU lock once
    the server has released it."""
    import pandas as pd

    from nsprof.schema import make_frame

    began = time.monotonic()
    # The server and its worker run in the server's folder: every path they are given is absolute, and
    # the worker runs the job in the client's folder (request "cwd"), where a relative target is.
    base = _served_base(Path(run.work_dir).absolute(), run.driver)
    log = base.with_suffix(".log")
    answer, started, interrupted = _submit(run, state, base)
    end = _served_end(answer, began, time.monotonic())
    status = parse_status(read_or_empty(base.with_suffix(".status")))
    _refuse(state, answer, status, log, interrupted)
    part = _read_served(run, answer, status, base, end) if started else None
    frames, failures, kept_ids = _settle(run, part)
    if interrupted:  # what the job measured is handed over: the interrupt goes on
        raise KeyboardInterrupt
    remaining = [c for c in run.ids if c not in kept_ids and c not in failures]
    for config_id in status.done:
        if config_id in remaining:
            run.notify("retry", config_id, "not measured whole by nsprof serve; measuring again without it")
    timing = Timing()
    if part is not None:
        timing.add(part, end, log)
    notes: list[str] = []
    if started:
        _say(notes, f"measured by {_by_server(state)}")
    measured = Measured(
        frame=pd.concat(frames, ignore_index=True) if frames else make_frame([]),
        failures=failures,
        device=status.device,
        reports=[part.report] if part is not None and part.report is not None else [],
        work_dir=run.work_dir,
        notes=notes,
        phases=timing.total(),
        config_phases=timing.configs,
    )
    if remaining:
        why = one_line(str(answer.get("reason") or _fault(answer)), 200)
        _say(
            notes,
            f"nsprof serve (pid {state['pid']}) ended during this run ({why}); {len(remaining)} configs "
            "measured without it",
        )
        measured = _merged(measured, _standalone(run.only(remaining)))
        # the standalone session's runs, after the served run
        timing.runs += runs_in_phases_file(run.work_dir / PHASES_FILE)
        timing.configs = measured.config_phases
    measured.wall_s = time.monotonic() - began
    timing.write(run.work_dir / PHASES_FILE, began, time.monotonic())
    return measured


def _merged(first: Measured, second: Measured) -> Measured:
    """One Measured of a served part and the standalone session after it."""
    import pandas as pd

    frames = [f for f in (first.frame, second.frame) if len(f)]
    first.frame = (
        pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else first.frame)
    )
    first.failures.update(second.failures)
    first.device = first.device or second.device
    first.reports.extend(second.reports)
    first.notes.extend(second.notes)
    for name, seconds in second.phases.items():
        first.phases[name] = first.phases.get(name, 0.0) + seconds
    for config_id, times in second.config_phases.items():
        entry = first.config_phases.setdefault(config_id, {})
        for name, seconds in times.items():
            entry[name] = entry.get(name, 0.0) + seconds
    return first
