"""A CPU space for nsprof serve's tests: config 1 waits in its build until the file named by
$NSPROF_TEST_GATE exists (at most 120 s), so that a test can hold a served job open, deterministically."""

import os
import time
from pathlib import Path

import nsprof.space


def build(config):
    if config["kind"] == "gate":
        gate = Path(os.environ["NSPROF_TEST_GATE"])
        deadline = time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    def launch():
        return None

    return launch


space = nsprof.space.Space(
    name="gate", configs=[{"kind": k} for k in ["ok", "gate", "ok"]], build=build, device="cpu"
)
