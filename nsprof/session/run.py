"""run_session: measure configs of a target under a profiler, in one session.

Holds run_session (the GPU lock, or an `nsprof serve` to measure through; where the target's
compile runs) and the session's own temporary folder, removed after a clean run and named when
anything failed.

What a session hands over as it goes: on_rows(frame) is called once per worker run ("part"), as
soon as its report is read, with the tidy rows (nsprof.schema.make_frame) of every config that
became final in it: the measurements of whole configs, and a row with `error` set for each config
that failed; configs left unrun at the end come in a last call. Every row of Measured.frame comes
through on_rows exactly once. On KeyboardInterrupt (SIGTERM and SIGHUP too, after
nsprof.host.children.interrupt_on_termination) the worker is asked to stop cleanly, and the
interrupted part's whole configs (and the failures it recorded) are handed over before the
interrupt goes on; the config it was measuring is neither measured nor failed. An exception raised
by on_rows goes through (the children are stopped first).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from nsprof.drivers import registry
from nsprof.drivers.base import Driver
from nsprof.errors import GpuBusy, NsprofError, printable
from nsprof.host.owned import own_folder
from nsprof.schema import Points
from nsprof.serve_client import Unfit, find_server
from nsprof.session.compile_step import CompileAhead
from nsprof.session.folders import kept_in, say_kept_on_interrupt
from nsprof.session.parts import run_parts
from nsprof.session.request import Measured, SessionRun
from nsprof.session.served import run_served
from nsprof.settings import ProfileSettings


def run_session(
    target: str,
    n_configs: int,
    settings: ProfileSettings,
    config_ids: list[int] | None = None,
    on_progress: Callable[[str, int, str], None] | None = None,
    job_extra: dict | None = None,
    on_rows: Callable[[object], None] | None = None,
    driver: Driver | None = None,
    n_shapes: int = 0,
    compiles: str = "",
    ahead=None,
) -> Measured:
    """Measure `config_ids` (default: all) of `target` under settings.backend (its driver from
    nsprof.drivers.registry, unless `driver` is given).

    For a target with `n_shapes` shapes the ids are point ids (nsprof.schema.Points(n_configs,
    n_shapes): every (shape, config) pair of one session), and so are the keys of
    Measured.failures and the ids given to on_progress; every row names its own config_id and
    shape.

    Every session holds the GPU lock (nsprof.host.lock), the fast timers' too: two nsprof runs
    never measure on the same GPU at once. The profiler and worker inherit the lock's
    descriptor, so it stays held while either lives. Where an `nsprof serve` of the same backend
    runs for the GPU (nsprof.serve; not with NSPROF_SERVE=0), the session is one job of its
    long-lived worker instead: the server holds the lock, and what a fault there leaves
    unmeasured is measured here, standalone, once the server has ended.

    `compiles`: where the target's compile step runs (Space.compiles). A standalone session runs a
    "beside" one beside itself (nsprof.session.compile_step); a served worker or one started ahead
    (`ahead`, nsprof.session.ahead.Ahead: a standalone session takes it for its first worker run, in its
    folder; its owner closes it), its imports paid, compiles each point itself, and so does every worker
    of a "worker" one. Always before the point's window: one that does not compile is a failure of kind
    compile, bounded by compile_timeout_s. on_rows and the interrupt: see this module's docstring.

    Without settings.work_dir the reports and logs go to a temporary folder, removed after
    a clean run (every config measured) and kept, named in Measured.work_dir or in the
    exception's message, when anything failed.
    """
    driver = driver or registry.get_driver(settings.backend)
    request = {
        "target": target,
        "ids": tuple(config_ids if config_ids is not None else Points(n_configs, n_shapes).all()),
        "points": Points(n_configs, n_shapes),
        "settings": settings,
        "driver": driver,
        "job_extra": job_extra,
        **({"notify": on_progress} if on_progress is not None else {}),
        **({"hand_over": on_rows} if on_rows is not None else {}),
    }
    return _routed(request, compiles, ahead)


def _routed(request: dict, compiles: str, ahead) -> Measured:
    """The session of `request` through a server of the GPU, or standalone (in `ahead`'s worker where it
    fits), its compile step beside it or in its worker."""
    settings, driver = request["settings"], request["driver"]
    # An `nsprof serve` of this GPU (it holds the lock): measure through it.
    server, unfit = find_server(driver, settings) if getattr(driver, "serves", False) else (None, None)
    if server is None:
        request["ahead"] = ahead.take(request["target"], settings, driver) if ahead is not None else None
    elif ahead is not None:
        ahead.close()  # the server's worker measures this session: the one started for it ends
    # A worker whose imports are paid (a served one, one started ahead) compiles each point itself.
    here = compiles == "worker" or server is not None or request.get("ahead") is not None
    if compiles and here:
        request["job_extra"] = {**(request["job_extra"] or {}), "compile_here": True}
    if server is not None:
        return _in_folder(request, server)
    beside = compiles == "beside" and not here
    return (_compiled_beside if beside else _standalone)(request, settings, driver, unfit)


def _compiled_beside(request: dict, settings: ProfileSettings, driver: Driver, unfit) -> Measured:
    """The standalone session with the target's compile step beside it, stopped when it ends."""
    extra = request["job_extra"] or {}
    ahead = CompileAhead.start(
        request["target"], request["points"], request["ids"], settings.python, extra.get("expect")
    )
    request["job_extra"] = {**extra, "compiled": str(ahead.folder)}
    try:
        result = _standalone(request, settings, driver, unfit)
    finally:
        ahead.finish()
    return ahead.noted(result)


def _standalone(request: dict, settings: ProfileSettings, driver: Driver, unfit) -> Measured:
    """The session run here, holding the GPU lock (if the driver takes it); `unfit`: why the
    server found for the GPU, if any, cannot take this run."""
    from nsprof.host.lock import gpu_lock

    never = isinstance(unfit, Unfit)  # find_server: a server of this GPU, which holds its lock
    if never and settings.wait_gpu:
        # The server that holds the GPU never fits this run: said, and waited for only until it ends.
        print(f"nsprof: {printable(unfit.waiting())}", file=sys.stderr, flush=True)  # the server's own words
    try:
        with (
            gpu_lock(0, wait=settings.wait_gpu, timeout_s=unfit.wait_bound_s if never else None)
            if driver.locks_gpu
            else contextlib.nullcontext()
        ):
            return _in_folder(request, None)
    except GpuBusy as exc:
        if never and not settings.wait_gpu and (exc.holder or {}).get("pid") == unfit.pid:
            raise GpuBusy(unfit.refusal(), device=exc.device, path=exc.path, holder=exc.holder) from None
        if unfit and unfit not in str(exc):
            raise GpuBusy(f"{exc} ({unfit})", device=exc.device, path=exc.path, holder=exc.holder) from None
        raise


def _in_folder(request: dict, server: dict | None) -> Measured:
    """The session of `request` (SessionRun's fields but its folder) in its work folder
    (settings.work_dir, or a temporary one), through the `nsprof serve` of `server` (its state) when
    given."""
    settings, ahead = request["settings"], request.get("ahead")
    temporary = settings.work_dir is None if ahead is None else ahead.temporary
    if ahead is not None:
        work_dir = ahead.folder  # its worker's files are there already
    else:
        work_dir = Path(tempfile.mkdtemp(prefix="nsprof-")) if temporary else Path(settings.work_dir)
    if not temporary and ahead is None:
        own_folder(work_dir, "--work-dir")
    run = SessionRun(work_dir=work_dir, **request)
    try:
        result = run_served(run, server) if server is not None else run_parts(run)
    except NsprofError as exc:
        # The logs explain the failure: keep them and say where they are.
        if temporary:
            raise kept_in(exc, work_dir) from exc
        raise
    except KeyboardInterrupt:  # its rows went through on_rows; its reports stay, named
        if temporary:
            say_kept_on_interrupt(work_dir)
        raise
    if temporary and not result.failures:
        import shutil

        try:
            shutil.rmtree(work_dir)
        except OSError:
            return result  # not all of it could go: the result still names the folder
        result.work_dir, result.reports = None, []
    return result
