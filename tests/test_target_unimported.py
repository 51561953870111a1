"""nsprof's own process never imports the target (torch, the tuner): a child describes it
(nsprof.space_view), and the next run over the same source reads that description back, checked by
the worker as it loads the target. The target records every process that imports it, so that the processes are
read from themselves; real nsprof runs with the stand-in profiler (tests/standins.py).

What the source does not show (here: the configs, the tuner and the compile step come from a data
file and an environment variable) can leave a saved description behind the target; each test of that
kind checks the run against what a run with nothing saved gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import STANDINS

from nsprof.space_view import KEEP_DAYS

# Every process that imports a module with this line records its pid and argv.
RECORD = textwrap.dedent("""
    import json, os, sys

    with open(os.environ["NSPROF_TEST_RECORD"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv,
                            "order": os.environ.get("CUDA_DEVICE_ORDER")}) + "\\n")
""")
# The configs: configs.json beside the target (or 3 of them). With $NSPROF_TEST_EXTRAS=1 the Space has
# a tuner hook and a compile step (each compile appends to compiled.txt), with $NSPROF_TEST_TUNER=1 the
# tuner hook alone; with $NSPROF_TEST_OBJECT=1
# each config holds an object, whose text (`<... object at 0x...>`) differs in every process.
TARGET = RECORD + textwrap.dedent("""
    import pathlib
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    HERE = pathlib.Path(__file__).parent
    print("the target's import prints this")


    class Hook(TunerHook):
        name = "the test's tuner"

        def feed_back(self, latencies_ms):
            best = min(latencies_ms, key=latencies_ms.get)
            return f"stored config {best} = {CONFIGS[best]['ns']} ns"


    def compile(config):
        with open(HERE / "compiled.txt", "a") as f:
            f.write(f"{config['ns']}\\n")


    DATA = HERE / "configs.json"
    CONFIGS = json.loads(DATA.read_text()) if DATA.exists() else [{"ns": ns} for ns in (3000, 2000, 1000)]
    if os.environ.get("NSPROF_TEST_OBJECT") == "1":
        CONFIGS = [{**config, "policy": object()} for config in CONFIGS]
    EXTRAS = os.environ.get("NSPROF_TEST_EXTRAS") == "1"
    TUNER = EXTRAS or os.environ.get("NSPROF_TEST_TUNER") == "1"
    class Launch:  # what the stand-in fast timers read (tests/targets/standin_timers.py)
        def __init__(self, config):
            self.timer_ns = {"event": config["ns"]}

        def __call__(self):
            return None


    space = Space(name="t", configs=CONFIGS, build=Launch, device="cpu",
                  tuner=Hook() if TUNER else None, compile=compile if EXTRAS else None)
""")
TUNE = ["--backend", "ncu", "--mode", "direct", "--reps", "3", "--budget-s", "0", "--json"]


def nsprof(folder: Path, *args, **env) -> tuple[int, subprocess.CompletedProcess]:
    """One nsprof command in a child process, its targets' views saved in folder/cache: (its pid, what
    it did)."""
    environ = {
        **os.environ,
        "NSPROF_TEST_RECORD": str(folder / "record.jsonl"),
        "XDG_CACHE_HOME": str(folder / "cache"),
        **env,
    }
    with subprocess.Popen(
        [sys.executable, str(STANDINS), *args],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        out, err = child.communicate(timeout=300)
    return child.pid, subprocess.CompletedProcess(args, child.returncode, out, err)


def tune(folder: Path, *more, **env) -> dict:
    _, done = nsprof(folder, "tune", "t.py:space", *TUNE, *more, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def importers(folder: Path) -> list[tuple[int, str]]:
    """(pid, the module it ran as: its argv[0]'s folder/name) of each process that imported the target."""
    lines = [json.loads(line) for line in (folder / "record.jsonl").read_text().splitlines()]
    return [(r["pid"], "/".join(Path(r["argv"][0]).parts[-2:])) for r in lines]


def test_nsprof_imports_the_target_in_no_process_of_its_own_and_a_saved_view_in_none_to_read_it(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    first, done = nsprof(tmp_path, "tune", "t.py:space", *TUNE, "--no-store", NSPROF_TEST_EXTRAS="1")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["best_config_id"] == 2
    assert any("stored config 2 = 1000 ns" in note for note in document["notes"]), document["notes"]
    assert "the target's import prints this" in done.stderr  # standard output holds the JSON alone
    seen = importers(tmp_path)
    assert first not in [pid for pid, _ in seen]
    # the child that describes it, the tuner's child, the session's worker and its compile step
    ran = ["nsprof/feedback.py", "worker/__main__.py", "worker/compile.py"]
    assert sorted(name for _, name in seen) == sorted([*ran, "nsprof/space_view.py"])
    assert sorted((tmp_path / "compiled.txt").read_text().split()) == ["1000", "2000", "3000"]

    (tmp_path / "record.jsonl").unlink()
    second, done = nsprof(tmp_path, "tune", "t.py:space", *TUNE, "--no-store", NSPROF_TEST_EXTRAS="1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["best_config_id"] == 2
    seen = importers(tmp_path)
    assert second not in [pid for pid, _ in seen]
    assert sorted(name for _, name in seen) == ran  # the saved description: no child imports it to read it


def test_configs_holding_objects_are_measured_once_a_run_from_a_saved_view(tmp_path):
    # An object's text holds its address, another in every process: the worker's check does not count it.
    (tmp_path / "t.py").write_text(TARGET)
    for _ in range(2):
        (tmp_path / "record.jsonl").unlink(missing_ok=True)
        _, done = nsprof(tmp_path, "tune", "t.py:space", *TUNE, "--no-store", NSPROF_TEST_OBJECT="1")
        assert done.returncode == 0 and "running again" not in done.stderr, done.stderr
        assert [name for _, name in importers(tmp_path)].count("worker/__main__.py") == 1


def test_a_view_saved_without_the_tuner_and_the_compile_step_gets_them_once_they_are_there(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    tune(tmp_path, "--no-store")
    document = tune(tmp_path, "--no-store", NSPROF_TEST_EXTRAS="1")
    assert any("stored config 2 = 1000 ns" in note for note in document["notes"]), document["notes"]
    assert sorted((tmp_path / "compiled.txt").read_text().split()) == ["1000", "2000", "3000"]


def test_a_resume_of_stored_rows_never_hands_the_tuner_a_saved_views_configs(tmp_path):
    # Everything is stored: no worker runs to check the view. The configs file turned around since.
    (tmp_path / "t.py").write_text(TARGET)
    data = [{"bs": 32, "ns": 3000}, {"bs": 64, "ns": 2000}, {"bs": 128, "ns": 1000}]
    (tmp_path / "configs.json").write_text(json.dumps(data))
    tune(tmp_path, NSPROF_TEST_EXTRAS="1")
    (tmp_path / "configs.json").write_text(json.dumps(data[::-1]))
    document = tune(tmp_path, "--resume", NSPROF_TEST_EXTRAS="1")
    assert document["best_config_id"] == 0 and document["best_config"] == {"bs": 128, "ns": 1000}
    assert any("stored config 0 = 1000 ns" in note for note in document["notes"]), document["notes"]


def test_a_config_added_since_the_view_was_saved_can_be_named_and_is_measured(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    data = [{"ns": 3000}, {"ns": 2000}, {"ns": 1000}]
    (tmp_path / "configs.json").write_text(json.dumps(data))
    tune(tmp_path, "--no-store")
    (tmp_path / "configs.json").write_text(json.dumps([*data, {"ns": 500}]))
    document = tune(tmp_path, "--no-store", "--configs", "2,3")
    assert document["best_config_id"] == 3
    assert {row["config_id"]: row["value_ns"] for row in document["ranked"]} == {2: 1000, 3: 500}
    again = tune(tmp_path, "--no-store")  # and the view saved since is the target's
    assert [row["config_id"] for row in again["ranked"]] == [3, 2, 1, 0]
    (tmp_path / "configs.json").write_text(json.dumps([*data, {"ns": 500}, {"ns": 400}]))
    _, profiled = nsprof(
        tmp_path, "profile", "t.py:space", "--mode", "direct", "--reps", "2", "--configs", "4"
    )
    assert profiled.returncode == 0 and "running again" in profiled.stderr, profiled.stderr
    assert "400" in profiled.stdout


def test_a_saved_view_behind_the_target_is_read_again_on_dask_workers_too(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    data = [{"ns": 3000}, {"ns": 2000}, {"ns": 1000}]
    (tmp_path / "configs.json").write_text(json.dumps(data))
    lock = {"NSPROF_LOCK_DIR": str(tmp_path / "locks")}
    tune(tmp_path, "--no-store", "--devices", "0", "--no-feed-back", **lock)
    (tmp_path / "configs.json").write_text(json.dumps([*data, {"ns": 500}]))
    document = tune(tmp_path, "--no-store", "--devices", "0", "--no-feed-back", **lock)
    assert [row["config_id"] for row in document["ranked"]] == [3, 2, 1, 0]


def test_a_descriptions_folder_others_can_write_is_not_used(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    folder = tmp_path / "cache" / "nsprof" / "targets"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    for _ in range(2):
        tune(tmp_path, "--no-store")
    described = [name for _, name in importers(tmp_path) if name == "nsprof/space_view.py"]
    assert len(described) == 2 and not list(folder.iterdir())


def test_a_target_that_ends_its_importing_process_is_one_line(tmp_path):
    (tmp_path / "t.py").write_text("import os\nos._exit(3)\n")
    _, done = nsprof(tmp_path, "tune", "t.py:space", *TUNE, "--no-store")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "t.py:space" in lines[0] and "exit status 3" in lines[0], done.stderr


def test_a_target_whose_import_hangs_is_one_line_after_the_bound_and_leaves_no_process(tmp_path, monkeypatch):
    from nsprof.errors import TargetError
    from nsprof.space_view import read_target

    (tmp_path / "t.py").write_text(
        "import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(3600)\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TargetError, match=r"importing t\.py:space took longer than 2 s") as raised:
        read_target("t.py:space", bound_s=2)
    assert "\n" not in str(raised.value)
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_module_target_in_a_package_is_read_without_running_the_package(tmp_path):
    # `pkg.t:space`: finding pkg/t.py to fingerprint it runs no pkg/__init__.py in nsprof's process.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text(RECORD)
    (package / "t.py").write_text(TARGET)
    for _ in range(2):
        pid, done = nsprof(tmp_path, "tune", "pkg.t:space", *TUNE, "--no-store")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["best_config_id"] == 2
        assert pid not in [p for p, _ in importers(tmp_path)]
    # the package's and the module's import, in the first run's describing child alone
    described = [name for _, name in importers(tmp_path) if name == "nsprof/space_view.py"]
    assert len(described) == 2


def test_a_module_target_of_an_editable_install_is_fingerprinted_by_its_files(tmp_path, monkeypatch):
    # An editable install (setuptools') finds its packages through a finder of its own on sys.meta_path,
    # not on sys.path: the fingerprint follows that finder to the files, and imports nothing.
    from importlib.machinery import PathFinder

    from nsprof.space_source import target_fingerprint

    package = tmp_path / "elsewhere" / "editable_kernels"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "spaces.py").write_text("from editable_kernels.kernel import build\nspace = None\n")
    (package / "kernel.py").write_text("def build(config):\n    return 1\n")

    class EditableFinder:
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            if fullname == "editable_kernels":
                return PathFinder.find_spec(fullname, [str(package.parent)])
            return None

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, EditableFinder])
    before = target_fingerprint("editable_kernels.spaces:space")
    (package / "kernel.py").write_text("def build(config):\n    return 2\n")
    assert target_fingerprint("editable_kernels.spaces:space") != before
    assert "editable_kernels" not in sys.modules


def test_saved_views_nobody_read_for_a_month_are_removed_when_one_is_saved(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    folder = tmp_path / "cache" / "nsprof" / "targets"
    tune(tmp_path, "--no-store")
    [kept] = folder.glob("*.json")
    folder.joinpath("left-by-an-old-source.json").write_text("{}")
    folder.joinpath(".part-killed-mid-write").write_text("{")
    long_ago = kept.stat().st_mtime - 31 * 86400
    for name in ("left-by-an-old-source.json", ".part-killed-mid-write"):
        os.utime(folder / name, (long_ago, long_ago))
    os.utime(kept, (long_ago, long_ago))
    tune(tmp_path, "--no-store")  # reads `kept`, and touches it
    assert kept.stat().st_mtime > long_ago + KEEP_DAYS * 86400
    (tmp_path / "configs.json").write_text(json.dumps([{"ns": 500}, {"ns": 400}]))
    tune(tmp_path, "--no-store")  # behind the target: the new view is saved, the old files pruned
    assert sorted(p.name for p in folder.iterdir()) == [kept.name]


def test_a_changed_value_that_looks_hexadecimal_is_a_change(tmp_path):
    # Only an object's address is left out of the comparison, not a value such as a seed or a mask.
    (tmp_path / "t.py").write_text(TARGET)
    data = [{"seed": "0xaaaaaa00", "ns": 3000}, {"seed": "0xbbbbbb00", "ns": 1000}]
    (tmp_path / "configs.json").write_text(json.dumps(data))
    tune(tmp_path)
    data[1]["seed"] = "0xdddddd00"
    (tmp_path / "configs.json").write_text(json.dumps(data))
    document = tune(tmp_path, "--resume")
    assert document["best_config"] == {"seed": "0xdddddd00", "ns": 1000}


def test_a_thread_left_running_by_the_targets_import_does_not_hold_nsprof(tmp_path):
    # The describing child is done once it has described: a thread its import started (here for an
    # hour, in that child alone) is not waited for.
    started = "import threading, time\nif sys.argv[0].endswith('space_view.py'):\n"
    started += "    threading.Thread(target=time.sleep, args=(3600,)).start()\n"
    (tmp_path / "t.py").write_text(RECORD + started + TARGET.removeprefix(RECORD))
    assert tune(tmp_path, "--no-store")["best_config_id"] == 2


def test_profile_and_validate_do_not_run_again_for_a_tuner_they_do_not_ask(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    timers = ["--timers", "event", "--no-external", "--no-repeat", "--truth", "ncu"]
    for command, more in (("profile", ["--reps", "2"]), ("validate", [*timers, "--reps", "2"])):
        for tuner in ("1", "0"):  # the view saved with the tuner, then the target without it
            _, done = nsprof(
                tmp_path, command, "t.py:space", "--mode", "direct", *more,
                NSPROF_TEST_TUNER=tuner, NSPROF_STANDIN_TIMERS="1",
            )  # fmt: skip
            assert done.returncode == 0 and "running again" not in done.stderr, done.stderr


def test_validates_timers_measure_only_the_target_as_read(tmp_path):
    # The configs turned around since the view was saved: the timers' worker refuses it as the
    # ground truth's does, and the run goes once, on the target as it is.
    (tmp_path / "t.py").write_text(TARGET)
    args = ["validate", "t.py:space", "--timers", "event", "--no-external", "--no-repeat", "--truth", "ncu",
            "--mode", "direct", "--reps", "2", "--json"]  # fmt: skip
    nsprof(tmp_path, *args, NSPROF_STANDIN_TIMERS="1")
    (tmp_path / "configs.json").write_text(json.dumps([{"ns": 1000}, {"ns": 2000}, {"ns": 3000}]))
    (tmp_path / "record.jsonl").unlink()
    _, done = nsprof(tmp_path, *args, NSPROF_STANDIN_TIMERS="1")
    assert done.returncode == 0 and "running again" in done.stderr, done.stderr
    truth = {
        r["config_id"]: r["value_ns"]
        for r in json.loads(done.stdout)["per_config"]
        if r["method"] == "ncu:direct"
    }
    assert truth == {0: 1000, 1: 2000, 2: 3000}
    # the timers' worker refused the view (and the run went again), before any truth's worker ran
    names = [name for _, name in importers(tmp_path)]
    assert names.count("targets/standin_timers.py") == 2 and names.count("worker/__main__.py") == 1


def test_a_run_refused_on_a_saved_view_behind_the_target_is_stored_as_that_not_as_a_failure(tmp_path):
    import sqlite3

    (tmp_path / "t.py").write_text(TARGET)
    store = tmp_path / "results.db"
    tune(tmp_path, "--store", str(store))
    (tmp_path / "configs.json").write_text(json.dumps([{"ns": ns} for ns in (1000, 2000, 3000)]))
    document = tune(tmp_path, "--store", str(store))  # the saved view's configs turned around
    assert document["best_config_id"] == 0
    with sqlite3.connect(store) as db:
        statuses = [status for (status,) in db.execute("SELECT status FROM runs ORDER BY id")]
        refused = db.execute(
            "SELECT COUNT(*) FROM measurements WHERE run_id = (SELECT id FROM runs ORDER BY id LIMIT 1 OFFSET 1)"
        ).fetchone()[0]
    # the first tune; the run the worker refused (nothing measured), said as such; the run again
    assert statuses == ["ok", "target changed", "ok"], statuses
    assert refused == 0


def test_every_process_that_runs_the_target_numbers_the_gpus_as_nvidia_smi_does(tmp_path):
    # nsprof locks and keys "GPU 0" by nvidia-smi's numbering (PCI bus order); CUDA's own default
    # (FASTEST_FIRST) can put another GPU first on a host of mixed GPUs, which nsprof would then
    # measure outside its lock
    (tmp_path / "t.py").write_text(TARGET)
    _, done = nsprof(
        tmp_path,
        "tune",
        "t.py:space",
        *TUNE,
        "--no-store",
        NSPROF_TEST_EXTRAS="1",
        CUDA_DEVICE_ORDER="FASTEST_FIRST",
    )
    assert done.returncode == 0, done.stderr
    assert "CUDA_DEVICE_ORDER=FASTEST_FIRST is not used" in done.stderr
    records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    ran = {"/".join(Path(r["argv"][0]).parts[-2:]) for r in records}
    # the describing child, the compile step, the worker and the tuner's child
    assert {"nsprof/space_view.py", "worker/compile.py", "worker/__main__.py", "nsprof/feedback.py"} <= ran, (
        ran
    )
    assert {r["order"] for r in records} == {"PCI_BUS_ID"}, records


def test_a_validate_run_again_on_the_changed_target_leaves_no_folder_of_the_refused_run(tmp_path):
    """The configs turned around since the view was saved: the refused run's work folder goes with it."""
    (tmp_path / "t.py").write_text(TARGET)
    (tmp_path / "tmp").mkdir()
    args = ["validate", "t.py:space", "--timers", "event", "--no-external", "--no-repeat", "--truth", "ncu",
            "--mode", "direct", "--reps", "2"]  # fmt: skip
    env = {"NSPROF_STANDIN_TIMERS": "1", "TMPDIR": str(tmp_path / "tmp")}
    nsprof(tmp_path, *args, **env)  # saves the view
    (tmp_path / "configs.json").write_text(json.dumps([{"ns": 1000}, {"ns": 2000}, {"ns": 3000}]))
    _, done = nsprof(tmp_path, *args, **env)
    assert done.returncode == 0 and "running again" in done.stderr, done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []
