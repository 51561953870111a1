"""A CPU space with a compile step whose build does not compile (the Space contract allows it), for a
served job (tests/test_serve.py): config 1 fails to compile. Each compile appends "<i> <pid>" to
compiled.log in $NSPROF_TEST_AHEAD_DIR, so a test can say which process compiled it."""

import os
from pathlib import Path

import nsprof.space

_DIR = Path(os.environ.get("NSPROF_TEST_AHEAD_DIR", "."))


def compile_config(config):
    if config["kind"] == "fail":
        raise ValueError("no valid tile for this config (simulated)")
    with open(_DIR / "compiled.log", "a") as log:
        log.write(f"{config['i']} {os.getpid()}\n")


def build(config):
    return lambda: None


space = nsprof.space.Space(
    name="compile_in_worker",
    configs=[{"i": i, "kind": k} for i, k in enumerate(["ok", "fail", "ok"])],
    build=build,
    compile=compile_config,
    device="cpu",
)
