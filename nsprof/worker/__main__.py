import atexit
import faulthandler
import os
import sys
from pathlib import Path


def _keep_native_crash_stacks(argv: list[str]) -> None:
    """A crash in native code (a compiler, a profiler's injection) leaves the Python stack of every thread
    beside the job's files (`<job>.stack`; a serving worker's `worker.stack`): where it died, not only
    that it did. The log keeps its own lines, whose last one says why (nsprof.drivers.base.worker_failure);
    a file still empty at a clean exit is removed."""
    if len(argv) == 3 and argv[1] == "--serve":
        path = Path(argv[2]) / "worker.stack"
    elif len(argv) == 2:
        path = Path(argv[1]).with_suffix(".stack")
    else:
        return
    try:
        stack = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open while the process lives
    except OSError:
        return  # no stacks then; the worker itself says what it cannot open
    faulthandler.enable(stack, all_threads=True)
    pid = os.getpid()

    def remove_if_empty() -> None:
        if os.getpid() == pid and stack.tell() == 0:  # not a forked child's exit: the file is its parent's
            path.unlink(missing_ok=True)

    atexit.register(remove_if_empty)


_keep_native_crash_stacks(sys.argv)

if len(sys.argv) == 3 and sys.argv[1] == "--serve":  # the long-lived worker of `nsprof serve`
    from nsprof.worker.serving import serve

    sys.exit(serve(Path(sys.argv[2])))

from nsprof.worker.program import main  # noqa: E402

main()
