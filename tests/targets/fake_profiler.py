"""A stand-in for ncu/nsys as a process: it starts the worker as its own child and exits with
the worker's status, as the real tools do.

    python fake_profiler.py [--close-fds] [--outlive-parent] -- WORKER COMMAND...

--close-fds: the worker inherits no file descriptor beyond stdin/out/err (a profiler that
    does not pass them through; nsprof must not rely on its pipe alone).
--outlive-parent: clear the parent-death signal nsprof set and ignore SIGTERM/SIGHUP, as a
    profiler might; it then ends only when its worker does (the worker must notice nsprof's death).
--exit-file PATH: write the worker's exit status there (negative: killed by that signal), for a
    stand-in report that, like nsys's, keeps kernels only when the worker exited by itself.
--start-delay S / --exit-delay S: sleep S seconds before starting the worker (a profiler's own
    start-up) / after it exited (a profiler writing its report), for the phase tests.
--passes N: run the worker N times, one after the other, as ncu's application replay runs the program
    once per pass; the first run that fails ends it, unless --every-pass (then every run is made).
"""

import os
import signal
import subprocess
import sys
import time

if __name__ == "__main__":
    args = sys.argv[1:]
    split = args.index("--")
    flags, command = args[:split], args[split + 1 :]
    if "--outlive-parent" in flags:
        import ctypes

        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0: none
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if "--start-delay" in flags:
        time.sleep(float(flags[flags.index("--start-delay") + 1]))
    if "--close-fds" not in flags:
        keep = [fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2]
        for fd in keep:
            try:
                os.set_inheritable(fd, True)
            except OSError:
                pass
    passes = int(flags[flags.index("--passes") + 1]) if "--passes" in flags else 1
    for _ in range(passes):
        worker = subprocess.Popen(command, close_fds="--close-fds" in flags)
        while True:
            try:
                code = worker.wait()
                break
            except KeyboardInterrupt:
                continue
        if code != 0 and "--every-pass" not in flags:
            break
    if "--exit-delay" in flags:
        time.sleep(float(flags[flags.index("--exit-delay") + 1]))
    if "--exit-file" in flags:
        with open(flags[flags.index("--exit-file") + 1], "w") as handle:
            handle.write(str(code))
    sys.exit(code if code >= 0 else 128 - code)
