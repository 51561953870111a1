"""Stand-in profilers for tests that run nsprof in real child processes on machines without a GPU.

    python tests/standins.py profile t.py:space --backend ncu ...   # nsprof's CLI, stand-in profiler

The stand-in runs the real worker bare; its "report" is the worker's own status file, and each
config that reached `done` gets `reps` rows per mode whose duration is the config's "ns" value
(1000 + config id when it has none): what a profiler would have measured, known in advance.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nsprof.drivers.base import Driver


class StatusDriver(Driver):
    name = "standin"
    suffix = ".standin.json"
    labels_like = None  # the Driver class whose row labels this stand-in gives (None: the default)

    @classmethod
    def labels(cls, settings):
        return cls.labels_like.labels(settings) if cls.labels_like else super().labels(settings)

    def tool_version(self):
        return "standin 1.0"

    def build_command(self, settings, job_file, report_base):
        import os

        from nsprof.worker.protocol import worker_command

        agent = os.environ.get("NSPROF_STANDIN_AGENT")
        if not agent:
            return worker_command(settings, job_file)
        # Like nsys: the profiler first starts an agent in a session of its own, which inherits its
        # descriptors (the GPU lock's among them) and lives on; its pid goes to $NSPROF_STANDIN_AGENT.
        # The shell stays the worker's parent (no exec), as nsys does: it, not the worker, has the
        # parent-death signal.
        script = f"setsid sh -c 'echo $$ > {agent}; exec sleep 3600' & \"$@\""
        return ["sh", "-c", script, "sh", *worker_command(settings, job_file)]

    def finish(self, report_base, log):
        from nsprof.worker.protocol import parse_status

        status = parse_status(report_base.with_suffix(".status").read_text())
        job = json.loads(report_base.with_suffix(".job.json").read_text())
        report = report_base.with_suffix(self.suffix)
        report.write_text(json.dumps({"done": status.done, "job": job}))
        return report

    def read(self, report, settings):
        from nsprof.schema import make_frame
        from nsprof.space import load_target

        data = json.loads(Path(report).read_text())
        job = data["job"]
        configs = load_target(job["target"]).configs
        rows = [{"source": settings.backend, "config_id": c, "mode": mode, "rep": rep, "kernel": "standin_kernel",
                 "duration_ns": float(configs[c].get("ns", 1000 + c)), **self.labels(settings)}
                for c in data["done"] for mode in job["modes"] for rep in range(job["reps"])]
        return make_frame(rows)


def install() -> None:
    """Make every ncu/nsys session of this process use the stand-in (and need no tool on PATH),
    labelling its rows as the tool it stands in for would."""
    from nsprof.drivers import registry

    for name in ("ncu", "nsys"):
        registry.register(name, type(f"StatusDriver_{name}", (StatusDriver,), {"labels_like": registry.driver_class(name)}))


if __name__ == "__main__":
    install()
    from nsprof.cli import main

    sys.argv[0] = "nsprof"
    main()
