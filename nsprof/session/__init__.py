"""One profiling session: all configs in one profiled worker process, restarted after faults.

The parent writes a job file, starts the profiler (which starts the worker), and follows the
worker's status file: it counts progress, kills a config that runs past its timeout, and when the
worker dies records that config as failed with the reason and starts a new worker at the next
config. The profiler is a Driver (nsprof.drivers.base) from nsprof.drivers.registry: it gives the
command line, the report, its rows, their labels and the one-line reason for a failure; the
session never asks which profiler it runs.

Modules, by job: run (run_session), request (SessionRun, Measured), supervise (one worker run, and
the one loop that follows a worker's status file, which nsprof.serve uses too), parts (the
standalone session's runs and what each leaves), served (a session through `nsprof serve`),
compile_step (the target's compile step beside a standalone session), timing (where the time went),
folders (work folders).

Names used outside the package, each imported from here: run_session, Measured,
work_folder, kept_in, timing_record, PHASES, PHASES_FILE.
"""

from nsprof.session.folders import kept_in, work_folder
from nsprof.session.request import Measured
from nsprof.session.run import run_session
from nsprof.session.timing import PHASES, PHASES_FILE, timing_record

__all__ = [
    "PHASES",
    "PHASES_FILE",
    "Measured",
    "kept_in",
    "run_session",
    "timing_record",
    "work_folder",
]
