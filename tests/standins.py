"""The stand-in profiler for tests that run nsprof in real child processes on machines without a GPU.

    python tests/standins.py profile t.py:space --backend ncu ...   # nsprof's CLI, stand-in profiler
    NSPROF_STANDIN_TIMERS=1 python tests/standins.py validate ...    # the fast timers stood in for too

StatusDriver runs the real worker (bare, or under tests/targets/fake_profiler.py); its "report"
is derived from the worker's own status file: each config that reached `done` gets `kernels`
rows per (mode, rep) whose duration is the config's "ns" value (1000 + config id when it has
none, or with `config_ns=False`, which leaves the target unimported in nsprof's own process;
a config's optional "ns_reps" list gives rep r the value ns_reps[r % len], for reps that vary;
(for a job with shapes: "ns_shapes", one value per shape, and rows named only by their range names);
its optional "ns_at" maps "<clock_control>-<cache_control>" of the rows' labels to the value under
those conditions, for truths that disagree; its optional "l2_hit" maps "ncu" (cache control all), "flush"
(cache control none, a rep the worker flushed L2 before: Job.flushed) and "none" (neither) to the L2 hit rate
in percent the rows carry when the session collects it (ProfileSettings.l2_hit_rate; default 10, 10, 80;
at shape s, s more);
its optional "ns_on" maps the CUDA_VISIBLE_DEVICES of the
process reading the report to the value on that "GPU", for GPUs that differ while the config does not);
"ns_sigma" multiplies it by 1 + ns_sigma·z, z a standard normal drawn per (config, rep) from a
generator seeded by the config's "seed", its id and the rep, so that a rep's value does not depend
on when or in which session it was measured):
what a profiler would have measured, known in advance. StatusDriver.for_session() is the
session tests' kind: two kernels per rep, and an empty report is an error.

`lossy=True` behaves like nsys: the report holds nothing unless the worker exited cleanly, since
CUPTI buffers are flushed only then: by itself, not by a signal (read from the stand-in
profiler's exit file), and with `end` or `stopped` last in its status file. Without it the
report is like ncu's, written as the kernels run. `empty_is_error=True`: a report without a
config in it is a ReportError, as a real report without a kernel table is.

install() registers it as ncu and nsys (one registry call each, through nsprof.drivers.registry).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nsprof.drivers.base import Driver
from nsprof.measure import Backend

FAKE_PROFILER = Path(__file__).parent / "targets" / "fake_profiler.py"
L2_CHECK_PASSES = (
    3  # ncu's passes for the L2 check's two metrics on the H200 (its reports' profiler__replayer_passes)
)


class StatusDriver(Driver):
    name = "standin"
    suffix = ".standin.json"
    labels_like = None  # the Driver class whose row labels this stand-in gives (None: the default)

    def __init_subclass__(cls, **kwargs):
        # labelled like a driver that controls clocks and caches: it controls them too (its rows say so)
        super().__init_subclass__(**kwargs)
        if cls.labels_like is not None and "controls_conditions" not in cls.__dict__:
            cls.controls_conditions = cls.labels_like.controls_conditions
        if cls.labels_like is not None and "serves" not in cls.__dict__:  # serves where that tool does
            cls.serves, cls.serve_refusal = cls.labels_like.serves, cls.labels_like.serve_refusal

    def __init__(
        self,
        kernels: int = 1,
        lossy: bool = False,
        profiler_flags: list[str] | None = None,
        empty_is_error: bool = False,
        config_ns: bool = True,
    ) -> None:
        self.kernels = kernels
        self.config_ns = config_ns
        self.lossy = lossy
        self.profiler_flags = profiler_flags  # None: no profiler process, the worker runs bare
        self.empty_is_error = empty_is_error

    @classmethod
    def for_session(cls, **kwargs) -> StatusDriver:
        """The session tests' stand-in: two kernels per rep, an empty report is an error, the
        target is not imported here."""
        return cls(**{"kernels": 2, "empty_is_error": True, "config_ns": False, **kwargs})

    @classmethod
    def labels(cls, settings):
        return cls.labels_like.labels(settings) if cls.labels_like else super().labels(settings)

    @classmethod
    def conditions(cls, settings):
        return cls.labels_like.conditions(settings) if cls.labels_like else super().conditions(settings)

    def tool_version(self):
        return "standin 1.0"

    def build_command(self, settings, job_file, report_base):
        import os

        from nsprof.worker.protocol import worker_command

        command = worker_command(settings, job_file)
        flags = self.profiler_flags
        if settings.l2_hit_rate:  # as ncu's application replay (the L2 check's sessions): a run per pass
            flags = [*(flags or []), "--passes", str(L2_CHECK_PASSES)]
        if flags is not None:
            exit_file = report_base.with_suffix(".exit")
            return [
                sys.executable,
                str(FAKE_PROFILER),
                *flags,
                "--exit-file",
                str(exit_file),
                "--",
                *command,
            ]
        agent = os.environ.get("NSPROF_STANDIN_AGENT")
        if not agent:
            return command
        # Like nsys: the profiler first starts an agent in a session of its own, which inherits its
        # descriptors (the GPU lock's among them) and lives on; its pid goes to $NSPROF_STANDIN_AGENT.
        # The shell stays the worker's parent (no exec), as nsys does: it, not the worker, has the
        # parent-death signal.
        script = f"setsid sh -c 'echo $$ > {agent}; exec sleep 3600' & \"$@\""
        return ["sh", "-c", script, "sh", *command]

    # nsprof serve: the real serving worker, bare (or under the stand-in profiler: profiler_flags, or for the
    # CLI's stand-in $NSPROF_STANDIN_SERVE_PROFILER, its flags or "-" for none); a collection is a line in the
    # server's log, and the report is still derived from each job's status file (finish). With
    # $NSPROF_STANDIN_STOP_GATE a collection's stop waits until that file exists (at most 120 s), as a slow `nsys stop`.
    serves = True

    def serve_command(self, settings, serve_dir, session):
        import os

        from nsprof.worker.protocol import serve_worker_command

        command = serve_worker_command(settings, serve_dir)
        flags = self.profiler_flags
        if flags is None and os.environ.get(
            "NSPROF_STANDIN_SERVE_PROFILER"
        ):  # the CLI's stand-in, under a profiler
            flags = os.environ["NSPROF_STANDIN_SERVE_PROFILER"].split()
        if flags is not None:
            return [sys.executable, str(FAKE_PROFILER), *[f for f in flags if f != "-"], "--", *command]
        return command

    def serve_start(self, session, report_base, log):
        log.write(f"==NSPROF== standin start --session={session} -o {report_base}\n")
        log.flush()

    def serve_stop(self, session, report_base, log):
        import os
        import time

        log.write(f"==NSPROF== standin stop --session={session}\n")
        log.flush()
        gate = os.environ.get(
            "NSPROF_STANDIN_STOP_GATE"
        )  # a slow `nsys stop` (a long job's report): until it exists
        deadline = time.monotonic() + 120
        while gate and not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    def serve_shutdown(self, session, log):
        log.write(f"==NSPROF== standin shutdown --session={session}\n")
        log.flush()

    def finish(self, report_base, log):
        from nsprof.worker.protocol import parse_status

        status = parse_status(report_base.with_suffix(".status").read_text())
        clean = status.ended or status.stopped
        if self.profiler_flags is not None:
            exit_file = report_base.with_suffix(".exit")
            clean = clean and exit_file.exists() and int(exit_file.read_text() or -1) >= 0
        job = json.loads(report_base.with_suffix(".job.json").read_text())
        report = report_base.with_suffix(self.suffix)
        report.write_text(
            json.dumps(
                {"done": status.done if clean or not self.lossy else [], "job": job, "pid": status.pid}
            )
        )
        return report

    @staticmethod
    def configs_run(job: dict) -> list:
        """The configs the worker ran: those nsprof read (the job's expect), which a worker that ran
        at all found unchanged; the target read again where the job carries none. (Read again now,
        a target edited since the worker loaded it would give the edit's values, not what ran.)"""
        from nsprof.space import load_target

        read = (job.get("expect") or {}).get("configs")
        return [json.loads(c) for c in read] if read else load_target(job["target"]).configs

    def read(self, report, settings):
        import os

        from nsprof.errors import ReportError
        from nsprof.schema import make_frame

        data = json.loads(Path(report).read_text())
        if self.empty_is_error and not data["done"]:
            raise ReportError(f"{Path(report).name}: no CUDA kernel table")
        configs = self.configs_run(data["job"]) if self.config_ns else {}
        labels = self.labels(settings)

        def duration(c: int, rep: int) -> float:
            if not configs:
                return float(1000 + c)
            at = configs[c].get("ns_at", {}).get(f"{labels['clock_control']}-{labels['cache_control']}")
            if at is not None:  # what this config takes under these clock and cache conditions
                return float(at)
            on = configs[c].get("ns_on", {}).get(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
            if on is not None:  # what this config takes on this "GPU"
                return float(on)
            per_rep = configs[c].get("ns_reps")
            ns = float(per_rep[rep % len(per_rep)] if per_rep else configs[c].get("ns", 1000 + c))
            sigma = configs[c].get("ns_sigma")
            if sigma:  # a known distribution: normal, relative sd `sigma`, drawn per (config, rep), seeded
                import random

                ns *= 1.0 + sigma * random.Random(f"{configs[c].get('seed', 0)}:{c}:{rep}").gauss(0.0, 1.0)
            return ns

        from nsprof.worker.protocol import Job

        job = Job(**data["job"])  # its rep numbers: an interleaved job's continue after the first pass's
        if job.n_shapes:
            return self._read_shapes(job, data, configs, labels, settings)
        frame = make_frame(
            [
                {
                    "source": settings.backend,
                    "config_id": c,
                    "mode": mode,
                    "rep": rep,
                    "kernel": f"k{k}",
                    "duration_ns": duration(c, rep),
                    "pid": data.get("pid"),  # the worker's, as a real report's rows carry it
                    **labels,
                }
                for c in data["done"]
                for mode in settings.modes
                for rep in job.rep_numbers(c)
                for k in range(self.kernels)
            ]
        )
        if settings.l2_hit_rate:
            frame["l2_hit_pct"] = [
                self.l2_hit(configs[c] if configs else {}, labels, job.flushed(int(rep)))
                for c, rep in zip(frame["config_id"], frame["rep"])
            ]
        return frame

    @staticmethod
    def l2_hit(config: dict, labels: dict, flushed: bool, shape: int | None = None) -> float:
        """The L2 hit rate a config's row carries (its "l2_hit"), by what came before the kernel; at a
        shape, its value plus the shape's index (so that each shape's rates differ)."""
        condition = "ncu" if labels["cache_control"] == "all" else ("flush" if flushed else "none")
        rate = float({"ncu": 10.0, "flush": 10.0, "none": 80.0, **config.get("l2_hit", {})}[condition])
        return rate + (shape or 0)

    def _read_shapes(self, job, data, configs, labels, settings):
        """A job with shapes: its ids are point ids. Each row is named only by its range name, as a real
        report's are (config_id and shape parsed from `cfg<id>.s<shape>.<mode>.r<rep>` by make_frame), and
        carries the worker's pid; its duration is the config's "ns_shapes"[shape] (1000 + 100 * shape +
        config id without one), or under the rows' conditions "ns_shapes_at"[<clock>-<cache>][shape]; with
        "ns_sigma", each rep drawn around it (seeded by config, shape and rep)."""
        from nsprof.schema import make_frame, range_name

        def duration(c: int, shape: int, rep: int) -> float:
            condition = f"{labels['clock_control']}-{labels['cache_control']}"
            at = (configs[c].get("ns_shapes_at") or {}).get(condition) if configs else None
            if at is not None:  # per shape, under these clock and cache conditions
                return float(at[shape])
            per_shape = configs[c].get("ns_shapes") if configs else None
            ns = float(per_shape[shape]) if per_shape else float(1000 + 100 * shape + c)
            sigma = configs[c].get("ns_sigma") if configs else None
            if sigma:  # normal, relative sd `sigma`, drawn per (config, shape, rep), seeded
                import random

                seed = f"{configs[c].get('seed', 0)}:{c}:{shape}:{rep}"
                ns *= 1.0 + sigma * random.Random(seed).gauss(0.0, 1.0)
            return ns

        rows = []
        for point in data["done"]:
            c, shape = job.points.split(point)
            for mode in settings.modes:
                for rep in job.rep_numbers(point):
                    l2 = self.l2_hit(configs[c] if configs else {}, labels, job.flushed(rep), shape)
                    for k in range(self.kernels):
                        rows.append(
                            {
                                "source": settings.backend,
                                "range": range_name(c, mode, rep, shape),
                                "kernel": f"k{k}",
                                "duration_ns": duration(c, shape, rep),
                                "pid": data.get("pid"),
                                **({"l2_hit_pct": l2} if settings.l2_hit_rate else {}),
                                **labels,
                            }
                        )
        return make_frame(rows)


# Which GPU model a stand-in Dask worker says it measured on, by its CUDA_VISIBLE_DEVICES.
MODELS = {"0": "NVIDIA H200", "1": "NVIDIA A100-SXM4-80GB"}


class NamedGpus(Backend):
    """Another Backend whose Measured.device names the GPU model MODELS gives this process's
    CUDA_VISIBLE_DEVICES (what a real worker says after CUDA init): stand-in GPUs of two models."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def labels(self):
        return self.inner.labels

    def in_subfolder(self, name):
        return NamedGpus(self.inner.in_subfolder(name))

    def measure(self, request, *, on_progress=None, on_rows=None):
        import os

        measured = self.inner.measure(request, on_progress=on_progress, on_rows=on_rows)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        measured.device = {"uuid": f"GPU-standin-{visible}", "name": MODELS.get(visible, "NVIDIA H200")}
        return measured


STANDIN_TIMERS = Path(__file__).parent / "targets" / "standin_timers.py"


def standin_timers(program: Path = STANDIN_TIMERS):
    """The fast timers' bare worker with the timers stood in for (tests/targets/standin_timers.py,
    or another such `program`)."""
    from nsprof.drivers.none import PlainDriver

    class StandinTimers(PlainDriver):
        locks_gpu = False

        def build_command(self, settings, job_file, report_base):
            return [settings.python, str(program), str(job_file)]

    return StandinTimers


def install(timers: bool = False) -> None:
    """Make every ncu/nsys session of this process use the stand-in (and need no tool on PATH),
    labelling its rows as the tool it stands in for would; with `timers` the fast timers too."""
    from nsprof.drivers import registry

    for name in ("ncu", "nsys"):
        registry.register(
            name, type(f"StatusDriver_{name}", (StatusDriver,), {"labels_like": registry.driver_class(name)})
        )
    if timers:
        registry.register("none", standin_timers(), ground_truth=False)


if __name__ == "__main__":
    import os

    install(timers=os.environ.get("NSPROF_STANDIN_TIMERS") == "1")
    from nsprof.cli import main

    sys.argv[0] = "nsprof"
    main()
