"""Runs nsprof in this process, for tests that signal or SIGKILL it: `python run_nsprof.py SPEC.json`.

SPEC (JSON): "driver": null (backend none) or tests/standins.py StatusDriver's keyword arguments;
then either "argv" (run the `nsprof` command line with that driver) or "target",
"n_configs", "settings" (ProfileSettings keywords), optionally "config_ids", and "rows" (a file: one JSON line per
on_rows call, then an "interrupted" line if the interrupt reached this caller).
"""

import json
import sys
from pathlib import Path

import nsprof.drivers.registry
import nsprof.host.children
import nsprof.session
from nsprof.settings import ProfileSettings

if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    if spec.get("driver") is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from standins import StatusDriver

        driver = StatusDriver.for_session(**spec["driver"])
        nsprof.drivers.registry.get_driver = lambda name: driver
    if "argv" in spec:
        from nsprof.cli import main

        sys.argv = ["nsprof", *spec["argv"]]
        main()
    nsprof.host.children.interrupt_on_termination()
    rows = open(spec["rows"], "a", buffering=1)

    def on_rows(frame):
        rows.write(json.dumps(json.loads(frame.to_json(orient="records"))) + "\n")

    settings = ProfileSettings(**spec["settings"])
    try:
        nsprof.session.run_session(
            spec["target"], spec["n_configs"], settings, config_ids=spec.get("config_ids"), on_rows=on_rows
        )
    except KeyboardInterrupt:
        rows.write('"interrupted"\n')
        sys.exit(130)
