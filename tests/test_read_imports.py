"""A session imports what reading its reports needs (pandas: most of a report's "parse" phase on a
fresh process, about 0.7 s) in a thread while the worker runs, instead of after it. Read from a
real nsprof process: its driver records, when the reports come to be read, whether pandas was
already being imported in it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from standins import StatusDriver
    from nsprof.session.run import run_session
    from nsprof.settings import ProfileSettings

    seen = []

    class Recording(StatusDriver):
        def read(self, report, settings):
            seen.append("pandas" in sys.modules)  # pandas enters sys.modules as its import begins
            return super().read(report, settings)

    assert "pandas" not in sys.modules, "imported before the session: nothing to test"
    measured = run_session("t.py:space", 2, ProfileSettings(backend="ncu", reps=1, modes=("direct",)),
                           driver=Recording.for_session())
    print(json.dumps({"seen": seen, "rows": len(measured.frame)}))
""")
TARGET = """
from nsprof.space import Space
space = Space(name="t", configs=[{"i": 0}, {"i": 1}], build=lambda c: (lambda: None), device="cpu")
"""


def test_pandas_is_imported_while_the_worker_runs_not_after(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    (tmp_path / "run.py").write_text(SCRIPT)
    tests = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "run.py", str(tests)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["rows"] > 0 and result["seen"] == [True], result


HELD = textwrap.dedent("""
    import importlib.abc, os, signal, sys, threading, time

    class Slow(importlib.abc.MetaPathFinder):  # pandas' import made long enough to be interrupted in
        def find_spec(self, name, path=None, target=None):
            if name == "pandas":
                time.sleep(1.0)
            return None

    sys.meta_path.insert(0, Slow())
    from nsprof.host.children import interrupt_on_termination
    from nsprof.session.supervise import import_for_reading

    interrupt_on_termination()
    threading.Timer(0.3, os.kill, (os.getpid(), getattr(signal, sys.argv[1]))).start()
    try:
        import_for_reading()
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted after:", "pandas" in sys.modules and hasattr(sys.modules["pandas"], "DataFrame"))
""")


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_during_that_import_comes_after_it_not_in_its_middle(tmp_path, signame):
    """A Ctrl-C (SIGTERM, SIGHUP) in the middle of pandas' import would leave it half-imported, and the
    interrupted part's finished configs could not be read and kept: the signal is taken after it."""
    (tmp_path / "held.py").write_text(HELD)
    done = subprocess.run(
        [sys.executable, "held.py", signame], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "interrupted after: True", (done.stdout, done.stderr[-2000:])
