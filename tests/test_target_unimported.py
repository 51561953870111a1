"""nsprof's own process never imports the target (torch, the tuner): a child describes it once
(nsprof.space_view), and the next run over the same source reads that description back without one.
The target records every process that imports it, so that the processes are read from themselves;
real nsprof runs with the stand-in profiler (tests/standins.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import STANDINS

# Every process that imports a module with this line records its pid and argv.
RECORD = textwrap.dedent("""
    import json, os, sys

    with open(os.environ["NSPROF_TEST_RECORD"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv}) + "\\n")
""")
# N configs from $NSPROF_TEST_N: what the source alone does not show.
TARGET = RECORD + textwrap.dedent("""
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    print("the target's import prints this")

    class Hook(TunerHook):
        name = "the test's tuner"

        def feed_back(self, latencies_ms):
            return "stored " + str(min(latencies_ms, key=latencies_ms.get))

    N = int(os.environ.get("NSPROF_TEST_N", "3"))
    space = Space(name="t", configs=[{"i": i, "ns": 1000 * (N - i)} for i in range(N)],
                  build=lambda config: (lambda: None), device="cpu", tuner=Hook())
""")
TUNE = ["--backend", "ncu", "--mode", "direct", "--reps", "3", "--budget-s", "0"]


def tune(
    folder: Path, record: Path, cache: Path, n: int = 3, spec: str = "t.py:space"
) -> tuple[int, dict, str]:
    """One `nsprof tune --json` in a child process: (its pid, its document, its stderr)."""
    env = {
        **os.environ,
        "NSPROF_TEST_RECORD": str(record),
        "NSPROF_TEST_N": str(n),
        "XDG_CACHE_HOME": str(cache),
    }
    args = [sys.executable, str(STANDINS), "tune", spec, *TUNE, "--no-store", "--json"]
    with subprocess.Popen(
        args, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as nsprof:
        out, err = nsprof.communicate(timeout=300)
    assert nsprof.returncode == 0, err
    return nsprof.pid, json.loads(out), err


def importers(record: Path) -> list[str]:
    """The module each process that imported the target ran as (its argv[0]'s name), by pid."""
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    return [(r["pid"], Path(r["argv"][0]).parent.name + "/" + Path(r["argv"][0]).name) for r in lines]


def test_nsprof_imports_the_target_in_no_process_of_its_own_and_describes_it_once(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    record, cache = tmp_path / "record.jsonl", tmp_path / "cache"
    first, document, err = tune(tmp_path, record, cache)
    assert document["best_config_id"] == 2
    assert any("stored 2" in note for note in document["notes"]), document["notes"]
    assert "the target's import prints this" in err  # on standard error: stdout holds the JSON alone
    seen = importers(record)
    assert first not in [pid for pid, _ in seen]
    assert sorted(name for _, name in seen) == [
        "nsprof/feedback.py",
        "nsprof/space_view.py",
        "worker/__main__.py",
    ]

    record.unlink()
    second, again, _ = tune(tmp_path, record, cache)
    assert again["best_config_id"] == 2 and again["configs"] == document["configs"]
    seen = importers(record)
    assert second not in [pid for pid, _ in seen]
    # the description saved by the first run: no process imports the target only to describe it
    assert sorted(name for _, name in seen) == ["nsprof/feedback.py", "worker/__main__.py"]


def test_a_saved_description_the_source_does_not_show_is_behind_is_read_again(tmp_path):
    # The configs come from an environment variable: the second run's source is the first's, its
    # configs are not. The worker refuses the saved description; nsprof reads the target again.
    (tmp_path / "t.py").write_text(TARGET)
    record, cache = tmp_path / "record.jsonl", tmp_path / "cache"
    tune(tmp_path, record, cache, n=3)
    _, document, _ = tune(tmp_path, record, cache, n=4)
    assert [c["i"] for c in document["configs"]] == [0, 1, 2, 3]
    assert document["best_config_id"] == 3
    table = {row["config_id"]: row["value_ns"] for row in document["ranked"]}
    assert table == {0: 4000, 1: 3000, 2: 2000, 3: 1000}


def test_a_descriptions_folder_others_can_write_is_not_used(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    record, cache = tmp_path / "record.jsonl", tmp_path / "cache"
    folder = cache / "nsprof" / "targets"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    for _ in range(2):
        tune(tmp_path, record, cache)
    described = [name for _, name in importers(record) if name == "nsprof/space_view.py"]
    assert len(described) == 2 and not list(folder.iterdir())


def test_a_target_that_ends_its_importing_process_is_one_line(tmp_path):
    (tmp_path / "t.py").write_text("import os\nos._exit(3)\n")
    done = subprocess.run(
        [sys.executable, str(STANDINS), "tune", "t.py:space", *TUNE, "--no-store"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "t.py:space" in lines[0] and "exit status 3" in lines[0], done.stderr


def test_a_module_target_in_a_package_is_read_without_running_the_package(tmp_path):
    # `pkg.t:space`: finding pkg/t.py to fingerprint it runs no pkg/__init__.py in nsprof's process.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text(RECORD)
    (package / "t.py").write_text(TARGET)
    record, cache = tmp_path / "record.jsonl", tmp_path / "cache"
    for _ in range(2):
        nsprof, document, err = tune(tmp_path, record, cache, spec="pkg.t:space")
        assert document["best_config_id"] == 2
        assert nsprof not in [pid for pid, _ in importers(record)]
    described = [name for _, name in importers(record) if name == "nsprof/space_view.py"]
    assert len(described) == 2  # the package's import and the module's, in the first run's child alone
