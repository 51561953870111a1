"""Bad input of kinds the other bad-input tests do not cover keeps nsprof's rule (one clear line on stderr, a
non-zero exit, never a traceback or an internal error, nothing measured lost): configs that are no list, a
tuner name JSON cannot hold, huge integers in a saved run, time bounds past what a wait can take, closed or
failing standard streams, output files that cannot be written, and empty or folder-like output names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, STANDINS, run_nsprof

PLAIN = (
    "import nsprof.space\n"
    "space = nsprof.space.Space(configs=[{'i': 0}, {'i': 1}], build=lambda c: (lambda: None), device='cpu')\n"
)
QUICK = ["--backend", "nsys", "--mode", "direct", "--reps", "2"]


def _one_line(done) -> str:
    text = done.stderr.strip()
    assert done.returncode != 0, (done.returncode, done.stdout[-2000:], text[-2000:])
    assert "Traceback" not in text and "internal error" not in text, text[-3000:]
    assert len(text.splitlines()) == 1, text[-3000:]
    return text


# ---------------------------------------------------------------- a Space whose configs are no list

CONFIGS_NOT_A_LIST = """
import nsprof.space

def build(config):
    open({marker!r}, "a").write("built\\n")
    return lambda: None

space = nsprof.space.Space(configs={configs}, build=build, device="cpu")
"""


@pytest.mark.parametrize(
    "configs",
    [
        '({"i": i} for i in range(2))',  # a generator: measured as the 34 characters of its repr
        '{"a": {"i": 1}, "b": {"i": 2}}',  # a dict: built by key 0, 1, then an internal error (KeyError: 0)
    ],
    ids=["generator", "dict"],
)
def test_configs_that_are_not_a_list_are_refused_in_one_line_before_anything_is_built(tmp_path, configs):
    marker = tmp_path / "built"
    (tmp_path / "t.py").write_text(CONFIGS_NOT_A_LIST.format(marker=str(marker), configs=configs))
    done = run_nsprof("profile", "t.py:space", *QUICK, cwd=tmp_path, standins=True, in_process=True)
    line = _one_line(done)
    assert "configs" in line, line
    assert not marker.exists(), "a config was built from configs that are not a list"


@pytest.mark.parametrize(
    "configs",
    [
        '[{"a": 1, 2: 3}, {"a": 2, 2: 4}]',  # keys of two kinds: no order for the config's JSON
        '[{"tile": {64: 2, "x": 1}}, {"tile": {128: 2}}]',  # the same, inside a config
        "[{(1, 2): 3}, {(2, 1): 3}]",  # a key JSON has no form for
    ],
    ids=["mixed", "nested", "tuple"],
)
def test_a_config_with_no_json_form_is_refused_in_one_line_naming_the_config(tmp_path, configs):
    """A config is stored and matched by its canonical JSON (sorted keys): one whose keys cannot be sorted
    or written is refused before anything is built, naming the config (keys that are all numbers work)."""
    marker = tmp_path / "built"
    (tmp_path / "t.py").write_text(CONFIGS_NOT_A_LIST.format(marker=str(marker), configs=configs))
    done = run_nsprof("profile", "t.py:space", *QUICK, cwd=tmp_path, standins=True, in_process=True)
    line = _one_line(done)
    assert "config 0 has no JSON form" in line, line
    assert not marker.exists(), "a config was built"


def test_a_shape_with_no_json_form_is_refused_in_one_line_naming_the_shape():
    from nsprof.errors import TargetError
    from nsprof.space import Space

    with pytest.raises(TargetError, match=r"shape 1 has no JSON form \('<' not supported"):
        Space(configs=[{"b": 1}], shapes=[{"N": 2}, {1: 16, "N": 2}], build=lambda c, s: None, device="cpu")


def test_a_set_of_configs_is_refused_as_no_list():
    """A set lists its items in its hashes' order, another in another process (the worker): refused."""
    from nsprof.errors import TargetError
    from nsprof.space import Space

    with pytest.raises(TargetError, match="configs must be a list"):
        Space(configs={"alpha", "beta"}, build=lambda c: None, device="cpu")


def test_the_keys_of_a_dict_are_taken_as_shapes_in_their_order():
    """A dict's keys view lists in insertion order, the same in the worker: taken as shapes (unlike a set)."""
    from nsprof.space import Space

    table = {(1, 64): "small", (16, 64): "big"}
    space = Space(configs=[{"b": 1}], shapes=table.keys(), build=lambda c, s: lambda: None, device="cpu")
    assert space.shapes == [(1, 64), (16, 64)]


# ---------------------------------------------------------------- a tuner hook whose name is no text

TUNER_NAME_BYTES = """
import nsprof.space
from nsprof.tuner import TunerHook

class Hook(TunerHook):
    name = b"my-tuner"
    def feed_back(self, latencies_ms):
        return "ok"

space = nsprof.space.Space(configs=[{"i": 0}, {"i": 1}], build=lambda c: (lambda: None), device="cpu",
                           tuner=Hook())
"""


def test_a_tuner_hook_whose_name_json_cannot_hold_is_one_line_without_a_traceback(tmp_path):
    # A real child process: the child that describes the target (nsprof.space_view.main) writes to fd 2
    # itself, where a traceback would show.
    (tmp_path / "t.py").write_text(TUNER_NAME_BYTES)
    done = run_nsprof("profile", "t.py:space", *QUICK, cwd=tmp_path, standins=True, timeout=120)
    _one_line(done)


# ---------------------------------------------------------------- a saved run holding a huge integer

BIG = (
    "@@an integer of 401 digits@@"  # written in place of this text (json.dumps of a 401-digit int is refused)
)


def _saved_tune(tmp_path) -> dict:
    (tmp_path / "t.py").write_text(PLAIN)
    done = run_nsprof(
        "tune", "t.py:space", *QUICK, "--no-store", "--json", cwd=tmp_path, standins=True, in_process=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_results_of_a_saved_tune_holding_an_integer_past_float_range_is_one_line(tmp_path):
    saved = _saved_tune(tmp_path)
    saved["truths"][0]["first_pass_wall_s"] = BIG  # render/saved_shape.py NUMBER: math.isfinite raises
    (tmp_path / "big.json").write_text(json.dumps(saved).replace(json.dumps(BIG), "1" + "0" * 400))
    done = run_nsprof("results", "big.json", cwd=tmp_path, in_process=True)
    _one_line(done)


VALIDATE_TARGET = """
import nsprof.space
NS = [3000.0, 1000.0, 2000.0]

class Launch:
    def __init__(self, config):
        self.timer_ns = {"cupti": NS[config["i"]] + 100}
    def __call__(self):
        return None

space = nsprof.space.Space(configs=[{"i": i, "ns": NS[i]} for i in range(3)], build=Launch, device="cpu")
"""
VALIDATE = [
    "validate",
    "t.py:space",
    "--timers",
    "cupti",
    "--no-external",
    "--truth",
    "nsys",
    "--mode",
    "direct",
]
VALIDATE += ["--reps", "3", "--timer-reps", "3"]
TIMERS = {"NSPROF_STANDIN_TIMERS": "1"}  # the stand-in fast timers


def test_results_of_a_saved_validate_holding_an_integer_past_float_range_is_one_line(tmp_path):
    (tmp_path / "t.py").write_text(VALIDATE_TARGET)
    done = run_nsprof(*VALIDATE, "--save", "v.json", cwd=tmp_path, standins=True, env=TIMERS, in_process=True)
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "v.json").read_text())
    saved["agreement"][0]["n"] = BIG  # validate_saved.py table(): pd.to_numeric raises OverflowError
    (tmp_path / "big.json").write_text(json.dumps(saved).replace(json.dumps(BIG), "1" + "0" * 400))
    _one_line(run_nsprof("results", "big.json", cwd=tmp_path, in_process=True))


# ---------------------------------------------------------------- time bounds past what a wait can take


@pytest.mark.parametrize("timeout", ["3000000", "inf"])  # 35 days: past poll()'s C int of milliseconds
def test_a_long_timeout_is_taken_or_refused_never_an_internal_error(tmp_path, timeout):
    # click's FloatRange(min=1) lets both through; the describing child's communicate(timeout=...) overflows
    (tmp_path / "t.py").write_text(PLAIN + f"# {timeout}\n")  # a source no saved view has
    done = run_nsprof(
        "profile", "t.py:space", *QUICK, "--timeout", timeout, cwd=tmp_path, standins=True, in_process=True
    )
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    if done.returncode != 0:
        _one_line(done)


def test_a_long_nsys_export_bound_from_the_environment_is_no_internal_error(tmp_path):
    nsys = tmp_path / "nsys"
    nsys.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2024.5.1"; exit 0; fi\n'
        'out=""\nwhile [ $# -gt 0 ]; do case "$1" in -o) out="$2";; esac; shift; done\n'
        f'cp {FIXTURES / "fixture.sqlite"} "$out"\n'
    )
    nsys.chmod(0o755)
    (tmp_path / "r.nsys-rep").write_bytes(b"NVIDIA Tegra Profiler Report\0stand-in")
    env = {"NSPROF_NSYS": str(nsys), "NSPROF_CONVERT_TIMEOUT_S": "3000000"}  # past MAX_WAIT_S
    done = run_nsprof("analyze", "r.nsys-rep", cwd=tmp_path, env=env, in_process=True)
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    if done.returncode != 0:
        _one_line(done)


# ---------------------------------------------------------------- standard streams closed


@pytest.mark.parametrize(
    "args", [["--version"], ["analyze", str(FIXTURES / "fixture.sqlite")]], ids=["version", "analyze"]
)
def test_a_closed_standard_output_is_no_internal_error(tmp_path, args):
    # fd 1 closed at start: Python's sys.stdout is None, and cli.main's sys.stdout.flush() raises
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "nsprof", *args],
        capture_output=False,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_standard_input_and_output_closed_at_start_is_no_error(tmp_path):
    """`<&- >&-`: each closed descriptor gets /dev/null at its own number (the target's redirect duplicates
    fd 1), and the profile runs."""
    (tmp_path / "t.py").write_text(PLAIN)
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" <&- >&-', "sh", sys.executable, str(STANDINS),
         "profile", "t.py:space", "--backend", "ncu", "--mode", "direct", "--reps", "1"],
        stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Bad file descriptor" not in done.stderr, done.stderr[-2000:]


# ---------------------------------------------------------------- outputs that cannot be written


def _standins(args, cwd, stdout) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(STANDINS), *args], stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=cwd,
        timeout=180,
    )  # fmt: skip


def _closed_pipe():
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("stdout", ["full", "closed pipe"])
@pytest.mark.parametrize(
    "command, output",
    [
        (["profile", "t.py:space", *QUICK, "--csv"], "rows.csv"),
        (["tune", "t.py:space", *QUICK, "--no-store", "--html"], "page.html"),
    ],
    ids=["profile --csv", "tune --html"],
)
def test_a_standard_output_that_fails_still_writes_the_output_files_asked_for(
    tmp_path, stdout, command, output
):
    # the files are written before standard output: with the temporary reports removed (profile) or no
    # store (tune), they hold what was measured
    (tmp_path / "t.py").write_text(PLAIN)
    if stdout == "full":
        with open("/dev/full", "w") as full:
            done = _standins([*command, output], tmp_path, full)
    else:
        fd = _closed_pipe()
        try:
            done = _standins([*command, output], tmp_path, fd)
        finally:
            os.close(fd)
    assert (tmp_path / output).exists(), (done.returncode, done.stderr)


def test_tune_writes_its_html_page_when_its_plot_cannot_be_written(tmp_path):
    """A --plot that cannot be written costs no other output: --html is written (with --no-store it holds
    what was measured), and the exit status says the plot failed."""
    (tmp_path / "t.py").write_text(PLAIN)
    done = run_nsprof(
        "tune", "t.py:space", *QUICK, "--budget-s", "0", "--no-store", "--plot", "/proc/nsprof-review.png", "--html", "page.html",
        cwd=tmp_path, standins=True,
    )  # fmt: skip
    assert done.returncode != 0
    assert (tmp_path / "page.html").exists(), done.stderr[-2000:]


def test_validate_writes_its_page_save_and_json_when_its_plot_cannot_be_written(tmp_path):
    """A --plot that cannot be written (/proc) costs no other output: --html, --save and the --json document
    are all written, and the error names the plot as given."""
    (tmp_path / "t.py").write_text(VALIDATE_TARGET)
    args = [
        *VALIDATE,
        "--plot",
        "/proc/nsprof-review.png",
        "--html",
        "page.html",
        "--save",
        "v.json",
        "--json",
    ]
    done = run_nsprof(*args, cwd=tmp_path, standins=True, env=TIMERS)
    assert done.returncode != 0 and "/proc/nsprof-review.png" in done.stderr, done.stderr
    assert (tmp_path / "page.html").exists(), done.stderr[-2000:]
    assert (tmp_path / "v.json").exists(), done.stderr[-2000:]
    assert done.stdout.strip(), done.stderr[-2000:]


# ---------------------------------------------------------------- empty and folder-like output names


@pytest.mark.parametrize(
    "args",
    [
        ["profile", "t.py:space", *QUICK, "--csv", ""],
        ["tune", "t.py:space", *QUICK, "--no-store", "--html", ""],
        ["tune", "t.py:space", *QUICK, "--budget-s", "0", "--no-store", "--plot", ""],
        ["profile", "t.py:space", *QUICK, "--work-dir", ""],
        ["analyze", str(FIXTURES / "fixture.sqlite"), "--csv", ""],
    ],
    ids=["profile --csv", "tune --html", "tune --plot", "profile --work-dir", "analyze --csv"],
)
def test_an_empty_path_is_refused_not_silently_dropped_or_taken_as_the_current_folder(tmp_path, args):
    (tmp_path / "t.py").write_text(PLAIN)
    before = set(os.listdir(tmp_path))
    done = run_nsprof(*args, cwd=tmp_path, standins=True, in_process=True)
    assert done.returncode != 0, (done.stdout[-1500:], done.stderr[-1500:])  # exit 0, nothing written
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert set(os.listdir(tmp_path)) == before  # --work-dir '': part0.* and phases.json in the cwd


@pytest.mark.parametrize("option", ["--csv", "--plot", "--parquet"])
def test_an_output_name_ending_in_a_slash_is_refused_not_written_as_a_file(tmp_path, option):
    """`--csv out/` (no such folder yet) names a folder: refused, no file called `out` written."""
    done = run_nsprof(
        "analyze", str(FIXTURES / "fixture.sqlite"), option, "out/", cwd=tmp_path, in_process=True
    )
    assert done.returncode == 2 and "names a folder" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_a_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    """The XDG spec: a relative $XDG_CACHE_HOME is invalid and ignored (saved views go under ~/.cache)."""
    from nsprof import space_view

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "rel-cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = space_view._saved_path("x")
    assert not (tmp_path / "rel-cache").exists()
    assert path is not None and path.is_relative_to(tmp_path / "home" / ".cache"), path


def test_an_output_name_ending_in_slash_dot_is_refused_not_written_as_a_file(tmp_path):
    """`out/.` names the folder `out/` does (Path("out/.") is "out"): refused too."""
    done = run_nsprof(
        "analyze", str(FIXTURES / "fixture.sqlite"), "--csv", "out/.", cwd=tmp_path, in_process=True
    )
    assert not (tmp_path / "out").is_file(), done.stderr
    assert done.returncode == 2, done.stderr
