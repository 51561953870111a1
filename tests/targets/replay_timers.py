"""nsprof's bare worker replaying the result lines a worker wrote on a GPU, for CPU tests.

    NSPROF_TEST_REPLAY=timers0.jsonl:timers1.jsonl python replay_timers.py JOB.json

The real worker program runs the job (its status file, its results file, its rounds and batches);
what touches the GPU answers from the recorded lines (tests/fixtures/timers<i>.jsonl), found by the
launch's `i`, its config id in the recording:
- a plain timer gives its recorded line: median, least and conditions (the SM clock before and after);
- an interleaved timer's r-th visit gives the recorded value of round r in each sample, and the
  SM clock read after that visit is round r's recorded clock.
A recorded line keeps only the rounds that were not discarded, so only a recording that discarded
none can be replayed whole; this one says so rather than replay a part.
"""

import json
import os
import sys

import nsprof.timers.base as base
import nsprof.timers.interleave as interleave
import nsprof.timers.specs as specs

LINES = {}
for path in os.environ["NSPROF_TEST_REPLAY"].split(os.pathsep):
    with open(path, encoding="utf-8") as recorded:
        for text in recorded:
            line = json.loads(text)
            LINES[(line["config_id"], line["method"])] = line
CLOCK = [None]  # the clock of the round visited last


def run_method(name, fn, reps):
    line = LINES[(fn.i, name)]
    return {key: line[key] for key in ("median_ns", "min_ns", "conditions")}


def prepare(method, fn, calls_per_graph=20):
    line = LINES[(fn.i, method)]
    if line["throttled"]:
        raise SystemExit(f"config {fn.i} {method}: the recording discarded rounds, which it does not hold")
    visits = iter(zip(line["rounds_ns"], line["rounds_clock_mhz"]))

    def sample(reps):
        value, CLOCK[0] = next(visits)
        return [value] * reps

    conditions = {key: value for key, value in line["conditions"].items() if key != "rounds"}
    return interleave.Sampler(sample, conditions, fn)


specs.run_method = run_method
interleave.prepare = prepare
interleave.memory_full = lambda: False
interleave.release = lambda: None
base.sm_clock_mhz = lambda: CLOCK[0]

if __name__ == "__main__":
    from nsprof.worker.program import main

    main(sys.argv[1:])
