"""nsprof's bare worker with a stand-in for the fast timers, for CPU tests of validate.

    python standin_timers.py JOB.json

The real worker program runs the job (its status file, its results file, one config after
another); only nsprof.timers.specs.run_method is replaced: a method "measures" the value the
config's launch carries for it (`launch.timer_ns[method]`), as a GPU timer would have.
"""

import sys

import nsprof.timers.specs as specs


def run_method(name, fn, reps):
    fn()
    value = float(fn.timer_ns[name])
    return {"median_ns": value, "min_ns": value, "conditions": {"tool": "standin"}}


specs.run_method = run_method

if __name__ == "__main__":
    from nsprof.worker.program import main

    main(sys.argv[1:])
