"""nsprof serve at its edges: a module target's helpers, the client's environment (real processes: the
stand-in server of tests/test_serve.py)."""

from __future__ import annotations

import json
import os
import signal

from test_serve import (  # noqa: F401  (server: the fixture)
    STANDINS,
    _client,
    _ended,
    _measured,
    _rows,
    _status,
    server,
)

MODULE_TARGET = """
import json, os, pathlib
import mthelper
import nsprof.space

def build(config):
    with open(pathlib.Path(__file__).parent / "observed.jsonl", "a") as out:
        out.write(json.dumps({"version": mthelper.VERSION, "pid": os.getpid()}) + "\\n")
    return lambda: None

space = nsprof.space.Space(name="mt", configs=[{"i": 0}, {"i": 1}], build=build, device="cpu")
"""


def test_a_module_targets_edited_helper_is_seen_by_the_next_served_job(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    """docs/serve.md: "the target is loaded fresh (the modules imported from the target's folder are dropped
    first, so an edited helper is seen too)". A module target (`mt:space`, found from the client's folder)
    whose helper is edited between two runs: the second served job must run the edited helper, as a
    standalone worker would (the client's fingerprint already covers the edit, so nothing refuses it)."""
    project, server_cwd = tmp_path / "project", tmp_path / "server_cwd"
    project.mkdir()
    server_cwd.mkdir()
    (project / "mt.py").write_text(MODULE_TARGET)
    helper = project / "mthelper.py"
    helper.write_text("VERSION = 1\n")
    proc, state = server("--idle-exit", "120", cwd=server_cwd)
    first = _client(tmp_path, "first", target="mt:space", configs="0,1", cwd=project)
    assert first.returncode == 0, first.stderr
    helper.write_text("VERSION = 22  # edited\n")
    os.utime(helper, (helper.stat().st_atime + 10, helper.stat().st_mtime + 10))
    second = _client(tmp_path, "second", target="mt:space", configs="0,1", cwd=project)
    assert second.returncode == 0, second.stderr
    assert _status(tmp_path, "second").pid == state["worker_pid"], "served"
    seen = [json.loads(line)["version"] for line in (project / "observed.jsonl").read_text().splitlines()]
    assert seen[:2] == [1, 1]
    assert seen[2:] == [22, 22], f"the served job ran the helper as it was before the edit: {seen}"
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0


def test_a_variable_the_client_unset_after_it_started_is_not_the_served_jobs(
    tmp_path,
    server,  # noqa: F811 (the fixture imported above)
    own_gpu_lock_folder,
):
    """The mirror of test_serve.py's "a variable the client set after it started": a program that removes a
    variable before it measures gives a standalone worker an environment without it; a served job must not
    see it either (the worker keeps every variable of its own start that the client's request lacks)."""
    (tmp_path / "u.py").write_text(
        "import os\n\nimport nsprof.space\n\n"
        "def build(config):\n"
        "    if 'NSPROF_TEST_UNSET_BY_CLIENT' in os.environ:\n"
        "        raise RuntimeError('the job sees a variable its client removed')\n"
        "    return lambda: None\n\n"
        "space = nsprof.space.Space(name='u', configs=[{}, {}], build=build, device='cpu')\n"
    )
    program = tmp_path / "client.py"
    program.write_text(
        "import os, runpy, sys\n"
        "del os.environ['NSPROF_TEST_UNSET_BY_CLIENT']\n"
        f"sys.argv[0] = {str(STANDINS)!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    env = {"NSPROF_TEST_UNSET_BY_CLIENT": "1"}
    target = f"{tmp_path / 'u.py'}:space"
    standalone = _client(tmp_path, "alone", target=target, configs="0,1", program=program, env=env)
    assert standalone.returncode == 0 and _measured(_rows(standalone)) == {0: 2, 1: 2}, standalone.stderr
    proc, state = server("--idle-exit", "120", env=env)
    served = _client(tmp_path, "served", target=target, configs="0,1", program=program, env=env)
    assert served.returncode == 0, served.stderr
    assert _status(tmp_path, "served").pid == state["worker_pid"], "served"
    errors = [row["error"] for row in _rows(served) if row["error"]]
    assert not errors and _measured(_rows(served)) == {0: 2, 1: 2}, errors
    proc.send_signal(signal.SIGTERM)
    assert _ended(proc, own_gpu_lock_folder) == 0
