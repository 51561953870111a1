"""CPU spaces with a compile step, for the compile step beside the session
(nsprof.session.compile_step.CompileAhead).

$NSPROF_TEST_AHEAD_DIR is a folder the test owns. Config kinds, in the compile step:
    ok      compiles at once
    after0  compiles only once the worker has built config 0 (a file its build writes): it can
            compile only while the session runs, never before it (then it fails after
            $NSPROF_TEST_AFTER0_WAIT_S, default 60 s); with $NSPROF_TEST_WAITED_DIR, only once
            the worker also waits for it
    fail    fails to compile (a ValueError)
    die     kills the compile step's process (os._exit), as a crashing compiler would, once the
            worker has built config 0
and each compile appends "compiled <i>" to compiled.log there, so a test can count them.
"""

import os
import time
from pathlib import Path

import nsprof.space

_DIR = Path(os.environ.get("NSPROF_TEST_AHEAD_DIR", "."))


def compile_config(config):
    kind = config["kind"]
    if kind in ("after0", "die"):
        deadline = time.monotonic() + float(os.environ.get("NSPROF_TEST_AFTER0_WAIT_S", "60"))
        while not (_DIR / "built0").exists() or (kind == "after0" and not _waited_for(config["i"])):
            if time.monotonic() > deadline:
                raise TimeoutError("config 0 was never built while this config compiled")
            time.sleep(0.01)
    if kind == "fail":
        raise ValueError("no valid tile for this config (simulated)")
    if kind == "die":
        os._exit(7)
    with open(_DIR / "compiled.log", "a") as log:
        log.write(f"compiled {config['i']}\n")
    return kind


def _waited_for(i: int) -> bool:
    """With $NSPROF_TEST_WAITED_DIR (a session's work folder): whether its worker has said it waits
    for config i's compile (a `wait <i>` line in a status file there); without it, True."""
    folder = os.environ.get("NSPROF_TEST_WAITED_DIR")
    return not folder or any(f"\nwait {i}\n" in p.read_text() for p in Path(folder).rglob("*.status"))


def build(config):
    if config["i"] == 0:
        (_DIR / "built0").write_text("")
    return lambda: None


def _space(name, kinds):
    return nsprof.space.Space(
        name=name,
        configs=[{"i": i, "kind": k} for i, k in enumerate(kinds)],
        build=build,
        compile=compile_config,
        device="cpu",
    )


overlapped = _space("overlapped", ["ok", "after0", "fail", "after0"])
dying = _space("dying", ["ok", "die", "ok"])
