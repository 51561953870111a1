"""Text nsprof did not write on the lines test_hostile_outputs.py does not cover (Dask's batch, worker and
calibration lines, an unfit server's waiting line, doctor's checks) is shown escaped, and a lone surrogate
read back from a results store or a saved run is shown escaped, not an internal error."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import run_nsprof
from test_hostile_outputs import OSC8, _raw_controls

HOSTILE = OSC8 + "\u202e\x9b"


PLAIN = (
    "import nsprof.space\n"
    "space = nsprof.space.Space(configs=[{'ns': 2000.0}, {'ns': 1000.0}],\n"
    "                           build=lambda c: (lambda: None), device='cpu')\n"
)


def _stored_tune(tmp_path) -> Path:
    """A results store holding one tune of a plain CPU target (stand-ins)."""
    (tmp_path / "t.py").write_text(PLAIN)
    done = run_nsprof(
        "tune", "t.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "2", "--store", "s.db",
        "--no-feed-back", "--no-tuner-pick", cwd=tmp_path, standins=True, in_process=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp_path / "s.db"


# --------------------------------------------------------------------------- lone surrogates read back


def test_results_lists_a_store_whose_settings_hold_a_lone_surrogate(tmp_path):
    """`nsprof results STORE`: a run's settings_json (a store from another machine, another nsprof) holding
    the JSON escape \\ud800 as its deploy truth. run_deploy hands the lone surrogate to the table;
    printable() leaves surrogates as they are, and click.echo to stdout (strict UTF-8) raises:
    `nsprof: internal error: UnicodeEncodeError`, no listing at all. It should be listed (the cell escaped)."""
    store = _stored_tune(tmp_path)
    with sqlite3.connect(store) as db:
        (settings,) = db.execute("SELECT settings_json FROM runs").fetchone()
        document = json.loads(settings)
        document["deploy"] = "ncu"
        edited = json.dumps(document).replace('"deploy": "ncu"', '"deploy": "x\\ud800"')
        db.execute("UPDATE runs SET settings_json = ?", (edited,))
    done = run_nsprof("results", store, cwd=tmp_path, in_process=True)
    assert "internal error" not in done.stderr, done.stderr
    assert done.returncode == 0 and "t.py:space" in done.stdout, done.stderr


@pytest.mark.parametrize("args", [["--run", "1"], ["--run", "1", "--json"]])
def test_results_run_of_a_stored_config_holding_a_lone_surrogate_is_no_internal_error(tmp_path, args):
    """`nsprof results STORE --run N`: a stored config_json holding \\ud800 (tune refuses such a config
    before measuring, but a store is read as it is) ends in `internal error: UnicodeEncodeError` in
    click.echo of the ranked table / the --json document. Expected: the value shown escaped, or one line
    naming the damaged store (as for the other damaged-store cases), never an internal error."""
    store = _stored_tune(tmp_path)
    with sqlite3.connect(store) as db:
        db.execute(
            "UPDATE measurements SET config_json = ? WHERE config_id = 1", ('{"ns":1000.0,"c":"a\\ud800"}',)
        )
    done = run_nsprof("results", store, *args, cwd=tmp_path, in_process=True)
    assert "internal error" not in done.stderr, done.stderr


def test_results_of_a_saved_tune_whose_config_holds_a_lone_surrogate_is_no_internal_error(tmp_path):
    """`nsprof results saved.json` (tune --json of another machine): a config value "\\ud800" in the
    file's configs. load_tune takes it; format_tune's `best: config 1 (...)` line carries it to click.echo
    and stdout raises UnicodeEncodeError: `internal error`, no ranking shown."""
    (tmp_path / "t.py").write_text(PLAIN)
    done = run_nsprof(
        "tune", "t.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "2", "--no-store",
        "--no-feed-back", "--no-tuner-pick", "--json", cwd=tmp_path, standins=True, in_process=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    document["configs"][1]["c"] = "x\ud800"
    (tmp_path / "saved.json").write_text(json.dumps(document))  # ensure_ascii: "\ud800" as an escape
    shown = run_nsprof("results", "saved.json", cwd=tmp_path, in_process=True)
    assert "internal error" not in shown.stderr, shown.stderr


# --------------------------------------------------------------------------- Dask cluster


FAILS_ON_GPU1 = """
import os, sys
import nsprof.space
if os.environ.get("CUDA_VISIBLE_DEVICES") == "1" and getattr(sys.modules["__main__"].__spec__, "name", "") == "nsprof.worker.__main__":
    raise RuntimeError("import boom" + {hostile!r} + "\\nnsprof: forged line")
space = nsprof.space.Space(configs=[{{"i": i, "ns": 1000.0 + 100 * i}} for i in range(6)],
                           build=lambda c: (lambda: None), device="cpu")
"""

BUILD_FAILS = """
import nsprof.space
def build(config):
    if config["i"] == 2:
        raise RuntimeError("build boom" + {hostile!r})
    return lambda: None
space = nsprof.space.Space(configs=[{{"i": i, "ns": 1000.0 + 100 * i}} for i in range(5)], build=build,
                           device="cpu")
"""


def _cluster_tune(tmp_path, source: str, *extra):
    pytest.importorskip("distributed")
    (tmp_path / "t.py").write_text(source.format(hostile=HOSTILE))
    return run_nsprof(
        "tune", "t.py:space", "--backend", "nsys", "--mode", "direct", "--reps", "2", "--devices", "0,1",
        "--no-feed-back", "--no-store", *extra, cwd=tmp_path, standins=True,
    )  # fmt: skip


def test_a_failed_dask_batchs_line_is_printed_escaped(tmp_path):
    """`tune --devices 0,1` (no --verbose): a batch whose session fails on one worker is told in
    `nsprof: a batch (configs a..b) on Dask worker W failed ({result['error']}): ...` (cluster._batch_result,
    a bare print): the session's error holds the target's exception text, which reaches stderr with its
    OSC 8 hyperlink, BEL, bidi override and C1 CSI. (The verbose `worker ...: batch N failed: ...` line
    repeats it, raw too.)"""
    done = _cluster_tune(tmp_path, FAILS_ON_GPU1)
    assert "import boom" in done.stderr, done.stderr[-2000:]
    assert not _raw_controls(done.stderr), repr(done.stderr[-1500:])


def test_verbose_dask_worker_state_lines_are_printed_escaped(tmp_path):
    """`tune --devices 0,1 --verbose`: `nsprof: worker W: config N fail: {detail}` (cluster._Follow.say)
    prints the worker's failure detail (the target's build exception) raw."""
    done = _cluster_tune(tmp_path, BUILD_FAILS, "--verbose")
    assert "config 2 fail" in done.stderr, done.stderr[-2000:]
    assert not _raw_controls(done.stderr), repr(done.stderr[-1500:])


def test_the_calibration_line_escapes_the_workers_gpu_names(capsys):
    """The calibration line (`nsprof: calibration: ... GPUs ({model}): medians {uuid} ...`, printed by
    cluster._Gather.measured with a bare print) names each worker's GPU by the UUID and model its worker
    reported (a remote worker of --scheduler, nvidia-smi/torch there): printed without printable()."""
    pytest.importorskip("distributed")
    from nsprof.cluster import _Gather
    from nsprof.schema import Points

    gather = _Gather(None, Points(n_configs=3), [[0, 1, 2]], 0, None, None, None)
    gather.medians = {"GPU-a" + HOSTILE: [1000.0], "GPU-b\nnsprof: forged": [1100.0]}
    gather.model = "NVIDIA H100" + HOSTILE
    gather.measured(0.0)
    err = capsys.readouterr().err
    assert "calibration" in err, err
    assert not _raw_controls(err), repr(err)
    assert not [line for line in err.splitlines() if line.startswith("nsprof: forged")], err


# --------------------------------------------------------------------------- nsprof serve


def test_the_unfit_servers_waiting_line_escapes_its_variable_names(tmp_path, own_gpu_lock_folder):
    """A live server whose state file (written by another process) names an environment variable the
    client lacks: with --wait the client prints `nsprof: nsprof serve (pid P) does not fit this run: its
    environment differs in NAME...; waiting for the GPU ...` (session/run.py, a bare print of
    Unfit.waiting()). A variable's name may hold any byte but '=' and NUL: its escapes reach stderr raw,
    and a line break in it forges an `nsprof:` line."""
    sys.path.insert(0, str(Path(__file__).parent))
    import standins

    from nsprof.serve_client import serve_paths
    from nsprof.serve_files import check_folder
    from nsprof.serve_identity import identity
    from nsprof.settings import ProfileSettings

    state_path, socket_path = serve_paths()
    assert check_folder(state_path.parent, create=True)
    mine = identity(standins.StatusDriver(), ProfileSettings(backend="nsys"))
    name = "X" + HOSTILE + "\nnsprof: forged line"
    theirs = {**mine, "environment": {**mine["environment"], name: "0123456789abcdef"}}
    # a live pid (this test's): the client takes it for a running server that does not fit
    state_path.write_text(json.dumps({"pid": os.getpid(), "identity": theirs, "socket": str(socket_path)}))
    (tmp_path / "t.py").write_text(PLAIN)
    done = run_nsprof(
        "profile", "t.py:space", "--backend", "nsys", "--mode", "direct", "--reps", "2", "--wait",
        cwd=tmp_path, standins=True, in_process=True,
    )  # fmt: skip
    assert "does not fit this run" in done.stderr, done.stderr
    assert not _raw_controls(done.stderr), repr(done.stderr)
    assert not [line for line in done.stderr.splitlines() if line.startswith("nsprof: forged")], done.stderr


# --------------------------------------------------------------------------- doctor

FAKE_SMI = f"""#!{sys.executable}
print("NVIDIA H100" + {HOSTILE!r} + ", 550.1, 1980 MHz, 1980 MHz, 2619 MHz")
"""
FAKE_NCU = f"""#!{sys.executable}
print("NVIDIA (R) Nsight Compute Command Line Profiler")
print("Version 2024.1" + {HOSTILE!r})
"""


def test_doctor_prints_tool_output_escaped(tmp_path):
    """`nsprof doctor` echoes nvidia-smi's GPU name and a tool's `--version` line (commands/doctor.py:
    `[ok  ] GPU  {detail}`) without printable(): what those programs print (a GPU name, a version, also
    torch's import error line) reaches the terminal with its escapes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("ncu", FAKE_NCU)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    done = run_nsprof(
        "doctor", cwd=tmp_path, in_process=True,
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "NSPROF_NCU": None},
    )  # fmt: skip
    assert "NVIDIA H100" in done.stdout and "Version 2024.1" in done.stdout, done.stdout
    assert not _raw_controls(done.stdout), repr(done.stdout[:600])
