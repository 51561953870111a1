"""CPU spaces whose compile step runs in the worker (Space.compile_in_worker), for
tests/test_pool_compile.py. $NSPROF_TEST_LOG is a file the test owns: each compile's start and
end and each build append one JSON line {"what", "config", "n" (the shape's), "pid", "thread"}.

Config kinds, in the compile:
    ok      compiles at once
    fail    fails to compile (a ValueError)
    hang    never returns
    die     kills the process (os.abort, as a compiler's assertion does); its build too, as a
            compile at the config's first launch would
    slow    takes 0.7 s
    both    waits, for at most $NSPROF_TEST_BOTH_WAIT_S (default 20 s), until the next config's compile
            has begun: it can only where two compiles run at once
"""

import json
import os
import threading
import time
from pathlib import Path

import nsprof.space

_LOG = Path(os.environ.get("NSPROF_TEST_LOG", "pool_compile.log"))


def _log(what: str, config: dict, shape: dict) -> None:
    line = {"what": what, "config": config["i"], "n": shape["n"], "pid": os.getpid()}
    line["thread"] = threading.get_ident()
    with open(_LOG, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def compile_config(config, shape):
    _log("compile", config, shape)
    if config["kind"] == "fail":
        raise ValueError("no valid tile for this config (simulated)")
    if config["kind"] == "hang":
        time.sleep(3600)
    if config["kind"] == "die":
        os.abort()
    if config["kind"] == "slow":
        time.sleep(0.7)
    if config["kind"] == "both":
        deadline = time.monotonic() + float(os.environ.get("NSPROF_TEST_BOTH_WAIT_S", "20"))
        while f'"what": "compile", "config": {config["i"] + 1},' not in _LOG.read_text():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"config {config['i'] + 1}'s compile did not begin during config {config['i']}'s"
                )
            time.sleep(0.01)
    _log("compiled", config, shape)


def build(config, shape):
    _log("build", config, shape)
    if config["kind"] == "die":
        os.abort()
    return lambda: None


def _space(name, kinds, shapes):
    configs = [{"i": i, "kind": k} for i, k in enumerate(kinds)]
    return nsprof.space.Space(
        name=name,
        configs=configs,
        shapes=[{"n": n} for n in shapes],
        build=build,
        compile=compile_config,
        compile_in_worker=True,
        device="cpu",
    )


space = _space("in_worker", ["ok", "fail", "ok"], [1, 2])
parallel = _space("parallel", ["ok", "both", "ok"], [1])
dying = _space("dying", ["ok", "ok", "die", "ok"], [1])
slow_firsts = _space("slow_firsts", ["slow", "ok"], [1, 2, 3, 4, 5])  # each shape's first compile: 0.7 s
hanging = _space("hanging", ["ok", *["hang"] * 3, "ok"], [1])  # more hung compiles than threads (2)
stalled = _space("stalled", ["ok", *["hang"] * 11], [1])  # every compile of the pool hangs
