"""CPU spaces whose compile step misbehaves, for the review tests of the compile step beside the
session (tests/test_compile_ahead_faults.py). $NSPROF_TEST_AHEAD_DIR is a folder the test owns.

    ok       compiles at once
    spawn    starts a child process (`sleep 300`, as a compiler starts nvcc/ptxas), writes its pid
             to child.pid there and waits for it: the compile step is busy in a subprocess
    hang     never finishes compiling (a compiler stuck on a lock, a license server, a loop)
    fail     fails to compile (a ValueError)
    crash    compiles; its build kills the worker (os._exit), so the session starts a new part
    abort    kills the compile step (os.abort) until $NSPROF_TEST_AHEAD_DIR/fixed exists (a compiler
             that crashes, then is fixed)
    needs    compiles only when $NSPROF_TEST_AHEAD_DIR/artifact-<i> can be written; the build
             refuses to run without the artifact its compile wrote (an AOT-compiled kernel)
"""

import os
import subprocess
import time
from pathlib import Path

import nsprof.space

_DIR = Path(os.environ.get("NSPROF_TEST_AHEAD_DIR", "."))


def compile_config(config):
    kind = config["kind"]
    if kind == "abort" and not (_DIR / "fixed").exists():
        os.abort()
    if kind == "hang":
        while True:
            time.sleep(1)
    if kind == "fail":
        raise ValueError("no valid tile (simulated)")
    if kind == "spawn":
        child = subprocess.Popen(["sleep", "300"])
        # written whole, then renamed: a reader that sees child.pid sees the pid in it
        (_DIR / "child.pid.tmp").write_text(str(child.pid))
        os.replace(_DIR / "child.pid.tmp", _DIR / "child.pid")
        child.wait()
    (_DIR / f"artifact-{config['i']}").write_text("compiled")
    with open(_DIR / "compiled.log", "a") as log:
        log.write(f"compiled {config['i']}\n")
    return kind


def build(config):
    if config["kind"] == "abort" and not (_DIR / f"artifact-{config['i']}").exists():
        compile_config(config)  # not compiled ahead: its build compiles it, as a JIT compiler's would
    if config["kind"] == "crash":
        os._exit(3)
    if config["kind"] == "needs" and not (_DIR / f"artifact-{config['i']}").exists():
        raise RuntimeError(f"config {config['i']} was never compiled")
    return lambda: None


def _space(name, kinds, **extra):
    return nsprof.space.Space(
        name=name,
        configs=[{"i": i, "kind": k, **extra} for i, k in enumerate(kinds)],
        build=build,
        compile=compile_config,
        device="cpu",
    )


spawning = _space("spawning", ["ok", "spawn", "ok"])
needs = _space("needs", ["needs", "needs", "needs"])
hanging = _space("hanging", ["ok", "hang", "ok"])
stuck = _space("stuck", ["hang", "hang", "hang"])  # every compile hangs: the step is stalled
restarting = _space("restarting", ["ok", "fail", "crash", "ok", "fail", "ok"])
aborting = _space("aborting", ["abort", "ok", "ok", "ok", "ok"])  # the step dies on config 0
failing = _space("failing", ["fail", "fail"])  # no config compiles: the worker launches no kernel
