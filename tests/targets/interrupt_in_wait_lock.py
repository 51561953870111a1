"""nsprof's CLI (with tests/standins.py's stand-in profilers) in this process, with a Ctrl-C made to
land at one instant: `python interrupt_in_wait_lock.py ARMED FIRED nsprof-args...`.

Popen.poll() and Popen.wait(timeout) take the Popen's wait lock without blocking, then enter the
`try` that releases it; a SIGINT handled in between (at the bytecode check after the acquire
returns) leaves the lock held for good, and every later wait on that process blocks. Real Ctrl-Cs
land there now and then; here, while the file ARMED exists, the first such acquire in the main
thread removes it, writes FIRED and sends this process a real SIGINT from inside the acquire (its
default handler raises the KeyboardInterrupt there, with the lock held), which is the same instant.
"""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ARMED, FIRED = Path(sys.argv[1]), Path(sys.argv[2])


class _InterruptedLock:
    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking=True, timeout=-1):
        got = self._lock.acquire(blocking, timeout)
        if got and not blocking and threading.current_thread() is threading.main_thread():
            try:
                ARMED.unlink()
            except FileNotFoundError:
                return got
            FIRED.write_text("fired\n")
            os.kill(os.getpid(), signal.SIGINT)
        return got

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self):
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


_popen_init = subprocess.Popen.__init__


def _init(self, *args, **kwargs):
    _popen_init(self, *args, **kwargs)
    self._waitpid_lock = _InterruptedLock()


if __name__ == "__main__":
    subprocess.Popen.__init__ = _init
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import standins

    standins.install()
    from nsprof.cli import main

    sys.argv = ["nsprof", *sys.argv[3:]]
    main()
