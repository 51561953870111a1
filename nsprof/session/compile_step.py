"""The compile step beside a standalone session (nsprof.worker.compile), from nsprof's side.

Holds CompileAhead: the step's process, started with the session, stopped after it, its folder
kept (and named) only when a config failed to compile or the step itself did.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from nsprof.host.children import dies_with_nsprof, python_module
from nsprof.schema import Points
from nsprof.session.request import Measured
from nsprof.session.timing import add_to_phases_file
from nsprof.worker.compile import END, compile_pool_size, write_marker


class CompileAhead:
    """The space's compile step as a process beside a standalone session (run_session), started
    with it: the compilers run while the profiler, the worker, torch and CUDA start up, and with a
    cold cache while the first configs are measured. The worker waits for each config's marker
    before building it, outside every range; its compile failures are that session's failed
    configs. Its output goes to a log in its folder, kept (and named) only when a config failed
    to compile or the step itself did.

        ahead = CompileAhead.start(target, layout, points)
        try:
            result = session(job_extra={"compiled": str(ahead.folder)})
        finally:
            ahead.finish()
        ahead.noted(result)
    """

    def __init__(self, folder: Path, proc, log: Path) -> None:
        self.folder, self.proc, self.log = folder, proc, log
        self.began = time.monotonic()
        self.seconds: float | None = None  # how long the step ran (None while it runs)
        self.kept = False  # finish() kept the folder: a config failed to compile, or the step did
        self._watcher = None  # the watch thread (_watch())
        self._stopping = False  # finish() stops the step: its death is no news for the worker

    @classmethod
    def start(
        cls,
        target: str,
        layout: Points,
        points: list[int],
        python: str | None = None,
        expect: dict | None = None,
    ) -> CompileAhead:
        """The step for `points` (point ids of `layout`) of `target`, run by `python`; `expect`: what
        nsprof read of the target (Space.as_read), which the step checks before it compiles."""
        folder = Path(tempfile.mkdtemp(prefix="nsprof-compile-"))
        job = folder / "job.json"
        job.write_text(
            json.dumps(
                {
                    "target": target,
                    "points": list(points),
                    "n_configs": layout.n_configs,
                    "n_shapes": layout.n_shapes,
                    "folder": str(folder),
                    "jobs": compile_pool_size(),
                    "expect": expect,
                }
            )
        )
        import subprocess  # here, not at import: `import nsprof` stays light

        from nsprof.host.gpu import child_environ

        log = folder / "compile.log"
        with open(log, "wb") as handle:
            proc = subprocess.Popen(
                python_module(python or sys.executable, "nsprof.worker.compile", str(job)),
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=child_environ(),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=dies_with_nsprof(),
            )
        ahead = cls(folder, proc, log)
        ahead._watch()
        return ahead

    def _say_died(self, code: int) -> None:
        """Tell the worker, in `end`, that the step died: it stops waiting for what it will never compile."""
        if not (self.folder / END).exists():
            write_marker(self.folder / END, f"the compile step exited with status {code} (log: {self.log})")

    def finish(self) -> None:
        """Stop the step if it still runs (the session ended before it: nothing more is needed),
        with its compilers' own children (nvcc, ptxas: its process group), then remove its folder
        unless a config failed to compile or the step itself failed."""
        import shutil
        import signal

        # Not proc.poll(): while the watch thread waits it holds Popen's wait lock, and poll says
        # None even for a step that has exited. returncode is set once the step was reaped.
        stopped = self.proc.returncode is None
        self._stopping = True  # the watch thread writes no `end` now: nothing waits for it
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # start_new_session: its group is its pid
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if self._watcher is not None:
            self._watcher.join()  # it is done with the folder before anything is removed
        if self.seconds is None:
            self.seconds = time.monotonic() - self.began
        code = self.proc.returncode
        failed = code != 0 and not (stopped and code == -signal.SIGKILL)
        if failed:
            self._say_died(code)
        if not failed and not any(self.folder.glob("*.fail")):
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            self.kept = True

    def _watch(self) -> None:
        """Say in `end` when the step died (a compiler that crashed the process, a kill): a thread of
        nsprof's own, run for the session's length."""
        import threading

        def wait() -> None:
            code = self.proc.wait()
            self.seconds = time.monotonic() - self.began
            if code != 0 and not self._stopping:
                self._say_died(code)

        self._watcher = threading.Thread(target=wait, daemon=True, name="nsprof-compile-watch")
        self._watcher.start()

    def noted(self, result: Measured) -> Measured:
        """`result` (the session's) saying where the compilers' output is kept, if it is (at once
        on stderr too, as the session says which path measured), with the step's time in the
        session's phases file (compile_ahead_s: it ran overlapped)."""
        if self.kept:
            note = f"the compilers' output is kept in {self.log}"
            print(f"nsprof: {note}", file=sys.stderr, flush=True)
            result.notes.append(note)
        if result.work_dir is not None:
            add_to_phases_file(result.work_dir, compile_ahead_s=self.seconds)
        return result
