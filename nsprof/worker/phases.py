"""Where one worker run's time went, read from its status file's `at` lines (nsprof.worker.protocol)
beside nsprof's own clock: WORKER_RUN_PHASES, run_phases (a run's phases and each config's build and
measure)."""

from __future__ import annotations

from nsprof.worker.protocol import CONFIG_WORDS, RunStatus

# The phases of one worker run, in order (run_phases; nsprof.session.timing adds nsprof's own after it).
WORKER_RUN_PHASES = (
    "tool_start",
    "worker_start",
    "target_import",
    "cuda_init",
    "compile_wait",
    "build",
    "measure",
    "between",
    "worker_exit",
    "tool_exit",
)


def run_phases(
    status: RunStatus, launched: float, worker_gone: float | None, exited: float
) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    """Where one worker run's time went: ({phase: s}, {config_id: {"build": s, "measure": s}}).

    From nsprof's own times (`launched`: just before the profiler's exec; `worker_gone`: when it
    first saw the worker gone, None if never; `exited`: when it saw the profiler exit) and the
    worker's `at` lines, all on CLOCK_MONOTONIC. Phases, each ending at its boundary:
        tool_start     the profiler's exec until the worker process began (`process`)
        worker_start   until its first status line (`pid`): Python's start, nsprof's worker imports
        target_import  until the target was imported (`target`)
        cuda_init      until the device line: the device's imports and its CUDA context
        configs        until the worker's last line, split into build (each config's start line
                       to its build's return), measure (from then to the config's next line:
                       warm-up, graph capture, the reps' ranges; every visit of an interleaved job)
                       and between (the rest: status lines, dropping a config's inputs)
        worker_exit    until nsprof saw the worker gone (Python's exit; nsys flushes its CUPTI buffers)
        tool_exit      until nsprof saw the profiler exit (the report written)
    A boundary not seen (a worker that aborted or crashed) gives its time to the next phase seen;
    boundaries are clamped to be in order, so the phases sum to exited - launched. nsprof sees
    the worker gone and the profiler exit by polling: those two are late by up to its poll interval.
    """
    phases: dict[str, float] = {}
    previous = launched
    for name, at in _boundaries(status, worker_gone, exited):
        if at is None:
            continue
        at = min(max(at, previous), max(exited, previous))
        phases[name] = phases.get(name, 0.0) + at - previous
        previous = at
    configs = _config_times(status.times)
    _split_config_window(phases, configs)
    return {name: phases[name] for name in WORKER_RUN_PHASES if name in phases}, configs


def _boundaries(
    status: RunStatus, worker_gone: float | None, exited: float
) -> list[tuple[str, float | None]]:
    """run_phases' (phase, time of its end boundary or None where not seen), in order."""
    worker_last = status.times[-1][0] if status.times else None
    # The config stretch opens at the first config line of any kind: a start, or a wait for the
    # compile step (or a config that failed to compile) before any start line.
    opened = [t for t, word, _ in status.times if word in ("start", "wait", "fail")]
    first_start = min(opened) if opened else None
    starting = [
        ("tool_start", status.time_of("process")),
        ("worker_start", status.time_of("pid")),
        ("target_import", status.time_of("target")),
        ("cuda_init", status.time_of("device")),
    ]
    if first_start is None:
        # No config began (the target did not import, CUDA did not start): the worker's last line
        # ends the phase it was in.
        seen = [i for i, (_, at) in enumerate(starting) if at is not None]
        missing = seen[-1] + 1 if seen else None
        if missing is not None and missing < len(starting) and worker_last is not None:
            starting[missing] = (starting[missing][0], worker_last)
        running = []
    else:
        running = [("between", first_start), ("configs", worker_last)]
    return [*starting, *running, ("worker_exit", worker_gone), ("tool_exit", exited)]


def _split_config_window(phases: dict[str, float], configs: dict[int, dict[str, float]]) -> None:
    """Replace the "configs" phase by the configs' build, measure and compile_wait times, the
    rest of the window going to "between"."""
    window = phases.pop("configs", 0.0)
    if "between" in phases or window:
        build = sum(c.get("build", 0.0) for c in configs.values())
        measure = sum(c.get("measure", 0.0) for c in configs.values())
        wait = sum(c.get("compile_wait", 0.0) for c in configs.values())
        # Worker times inside the config window: they fit it unless a boundary was clamped.
        scale = min(1.0, window / (build + measure + wait)) if build + measure + wait > window else 1.0
        phases["build"], phases["measure"] = build * scale, measure * scale
        if wait:
            phases["compile_wait"] = wait * scale
        phases["between"] = phases.get("between", 0.0) + window - (build + measure + wait) * scale


def _config_times(times: list[tuple[float, str, str]]) -> dict[int, dict[str, float]]:
    """Per config, from the worker's `at` lines: build (first start line to its `built` mark, or to
    its fail line), measure (from `built`, and from each later start line, to the next line) and,
    where the compile step ran beside the session, compile_wait (its first `wait` line to its start
    or fail line: the worker waiting for the compiler)."""
    configs: dict[int, dict[str, float]] = {}
    building: dict[int, float] = {}
    waiting: dict[int, float] = {}
    started: set[int] = set()
    for index, (t, word, arg) in enumerate(times):
        if word not in CONFIG_WORDS or not arg.isdigit():
            continue
        config_id = int(arg)
        after = times[index + 1][0] if index + 1 < len(times) else t
        if word == "wait":
            waiting.setdefault(config_id, t)
            continue
        entry = configs.setdefault(config_id, {"build": 0.0, "measure": 0.0})
        if config_id in waiting and word in ("start", "fail"):
            entry["compile_wait"] = max(0.0, t - waiting.pop(config_id))
        if word == "start" and config_id not in started:
            started.add(config_id)
            building[config_id] = t
        elif word == "start":
            entry["measure"] += max(0.0, after - t)  # a later visit (an interleaved job)
        elif word == "built":
            entry["build"] += max(0.0, t - building.pop(config_id, t))
            entry["measure"] += max(0.0, after - t)
        elif word == "fail" and config_id in building:
            entry["build"] += max(0.0, t - building.pop(config_id))
    return configs
