"""Text nsprof did not write (a report's names, a target's configs, exceptions and tuner name, a saved
run's fields) never reaches the terminal as something it acts on, nor breaks a plot's SVG.

Escapes used are ones click does NOT strip on a pipe (it strips only CSI `ESC [ ... letter`): OSC 8
hyperlinks (ESC ] 8 ;; URL BEL), BEL, the bidi override U+202E, a C1 CSI (U+009B), and line breaks."""

from __future__ import annotations

import json
import shutil
import sqlite3
import xml.dom.minidom

import pytest
from conftest import FIXTURES, run_nsprof

OSC8 = "\x1b]8;;http://evil.example/\x07click me\x1b]8;;\x07"
HOSTILE = OSC8 + "\u202e"
RAW = ("\x1b", "\x07", "\u202e", "\x9b")


def _raw_controls(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def _forged(text: str) -> list[str]:
    return [
        line for line in text.splitlines() if line.startswith(("forged", "best: forged", "nsprof: forged"))
    ]


def _tune(tmp_path, *more: str):
    """`tune t.py:space` of the target in tmp_path, quick, with no store, stand-ins, in-process."""
    quick = ["--backend", "ncu", "--mode", "direct", "--reps", "2", "--no-store"]
    return run_nsprof("tune", "t.py:space", *quick, *more, cwd=tmp_path, standins=True, in_process=True)


# --------------------------------------------------------------------------- terminal


def _saved_tune(tmp_path, *, configs=None):
    """A saved tune (tune --json) of a plain CPU target, through the stand-ins."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        f"space = nsprof.space.Space(configs={configs or [{'ns': 2000.0}, {'ns': 1000.0}]!r},\n"
        "                           build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = _tune(tmp_path, "--no-feed-back", "--no-tuner-pick", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_saved_tunes_errors_and_label_are_printed_escaped(tmp_path):
    """`nsprof results FILE.json`: the saved run's `errors` are echoed as `nsprof: {error}` and its
    ranking's `label` as `ranked by {label}`, both without printable(): an OSC 8 hyperlink, a bidi
    override and a line break of the file reach the terminal, and a line of the user's choosing starts."""
    document = _saved_tune(tmp_path)
    document["errors"] = ["feeding failed " + HOSTILE + "\nnsprof: forged error line"]
    document["truths"][0]["label"] = "ncu " + HOSTILE + "\nforged: ranked line"
    saved = tmp_path / "edited.json"
    saved.write_text(json.dumps(document))
    done = run_nsprof("results", saved, cwd=tmp_path, in_process=True)
    printed = done.stdout + done.stderr
    assert not _raw_controls(printed), repr(printed[:400])
    assert not _forged(printed), _forged(printed)


TUNER_TARGET = """
from nsprof.space import Space
from nsprof.tuner import TunerHook

class Hook(TunerHook):
    name = "mytuner" + {hostile!r} + "\\nnsprof: forged line"
    def feed_back(self, latencies_ms):
        raise RuntimeError("read-only cache")

space = Space(name="p", configs=[{{"ns": 2000.0}}, {{"ns": 1000.0}}], build=lambda c: (lambda: None),
              device="cpu", tuner=Hook())
"""


def test_a_tuners_name_in_tunes_error_line_is_printed_escaped(tmp_path):
    """A real tune: a feed-back that fails is one `nsprof: feeding the ranking back to {tuner.name}
    failed: ...` line, printed as it is (commands/tune.py show): the target's tuner name reaches the
    terminal with its escapes, and its line break starts a forged `nsprof:` line."""
    (tmp_path / "t.py").write_text(TUNER_TARGET.format(hostile=HOSTILE))
    done = _tune(tmp_path, "--no-tuner-pick")
    assert "feeding the ranking back to mytuner" in done.stderr, done.stderr
    assert not _raw_controls(done.stderr), repr(done.stderr)
    assert not _forged(done.stderr), done.stderr


FAILING_BUILD = """
import nsprof.space
def build(config):
    if config["i"] == 1:
        raise RuntimeError("boom " + {hostile!r})
    return lambda: None
space = nsprof.space.Space(configs=[{{"i": 0, "ns": 1000.0}}, {{"i": 1}}, {{"i": 2, "ns": 1500.0}}],
                           build=build, device="cpu")
"""


@pytest.mark.parametrize("command", ["profile", "validate"])
def test_a_builds_exception_in_the_failure_line_is_printed_escaped(tmp_path, command):
    """profile's `nsprof: config N failed: {detail}` and validate's `nsprof: {method} failed on config
    N: {reason}` print the target's exception text without printable() (tune's error column escapes the
    same text: test_outputs_clobber covers tune only)."""
    (tmp_path / "t.py").write_text(FAILING_BUILD.format(hostile=HOSTILE))
    args = ["--backend", "ncu"] if command == "profile" else ["--timers", "graph", "--truth", "ncu"]
    done = run_nsprof(
        command, "t.py:space", *args, "--mode", "direct", "--reps", "2", cwd=tmp_path, standins=True,
        in_process=True, env={"NSPROF_STANDIN_TIMERS": "1"},
    )  # fmt: skip
    assert "boom" in done.stderr, done.stderr
    assert not _raw_controls(done.stderr), repr(done.stderr)


def test_the_all_configs_line_escapes_a_value_every_config_shares(tmp_path):
    """tune's `all configs: k=v` line (render.configs.constant_line) above the ranked table is not a
    table cell and never goes through printable(): a value every config shares reaches stdout raw."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        f"C = {('k' + HOSTILE + chr(10) + 'best: forged config 9')!r}\n"
        "space = nsprof.space.Space(configs=[{'ns': 2000.0, 'c': C}, {'ns': 1000.0, 'c': C}],\n"
        "                           build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = _tune(tmp_path, "--no-feed-back", "--no-tuner-pick")
    assert done.returncode == 0, done.stderr
    assert "all configs: c=k" in done.stdout, done.stdout
    assert not _raw_controls(done.stdout), repr(done.stdout)
    assert not _forged(done.stdout), done.stdout


def test_nvtx_domain_names_in_the_domain_warning_are_printed_escaped(tmp_path):
    """`analyze --domain X` on a report without domain X warns, listing the report's own domain names
    (reports/read.py _domain_warnings), and commands/analyze.py echoes the warning unescaped."""
    report = tmp_path / "h.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", report)
    with sqlite3.connect(report) as db:  # the domain's name, as NVTX registered it (event type 75)
        db.execute("UPDATE NVTX_EVENTS SET text = ? WHERE eventType = 75", ("dom\x07\u202e\x9b2J",))
    done = run_nsprof("analyze", report, "--domain", "nope", in_process=True)
    assert "domains here" in done.stderr, done.stderr
    assert not _raw_controls(done.stderr), repr(done.stderr)


def test_a_reports_recorded_clock_control_is_printed_escaped(tmp_path, ncu_rep_dir):
    """The header line of `analyze` (render.notes.describe_report) names the clock control the report's
    own ncu command line recorded; that text comes from the file (reports/ncu_command.py reads printable
    byte runs >= 0x20, so UTF-8 bidi overrides and C1 controls pass) and is printed without printable()."""
    data = (ncu_rep_dir / "fixture_node.ncu-rep").read_bytes()
    # same length as "base": the protobuf around it stays valid, ncu_report still reads the file
    hostile = data.replace(b"--clock-control base", b"--clock-control \xe2\x80\xaeX", 1)
    assert hostile != data
    report = tmp_path / "h.ncu-rep"
    report.write_bytes(hostile)
    done = run_nsprof("analyze", report, in_process=True)
    assert done.returncode == 0, done.stderr
    assert "clock control" in done.stdout, done.stdout
    assert not _raw_controls(done.stdout), repr(done.stdout.splitlines()[0])


# --------------------------------------------------------------------------- plots


def test_an_svg_plot_stays_well_formed_xml_with_a_control_character_in_a_config(tmp_path):
    """`tune --plot r.svg`: the plot's labels carry a config's text as it is; matplotlib copies the text
    into SVG comments, and a control character (ESC, BEL) there is not allowed in XML 1.0: the SVG does
    not parse, and a browser shows an XML error instead of the plot. Labels should be printable() text."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{'ns': 2000.0, 'k': 1, 'c': 'a\\x1b[31mred'}, {'ns': 1000.0, 'k': 1, 'c': 'b\\x07'}],\n"
        "                           build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = _tune(tmp_path, "--no-feed-back", "--no-tuner-pick", "--plot", "r.svg")
    assert done.returncode == 0, done.stderr
    xml.dom.minidom.parseString((tmp_path / "r.svg").read_bytes())  # raises ExpatError on main


# --------------------------------------------------------------------------- JSON / crash


def test_a_config_value_that_is_not_unicode_is_one_line_before_anything_is_measured(tmp_path):
    """A config value holding a lone surrogate (a str a target can hold, but no text encoding writes)
    once ended the tune after measuring, in an internal error (pandas' strings refuse it): no ranking, no
    --json. It is refused as the target is read, in one line naming the config, before any session."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{'ns': 2000.0, 's': 'b'}, {'ns': 1000.0, 's': 'a\\ud800'}],\n"
        "                           build=lambda c: (lambda: None), device='cpu')\n"
    )
    done = _tune(tmp_path, "--no-feed-back", "--no-tuner-pick", "--work-dir", "w")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "config 1" in lines[0] and "not valid Unicode" in lines[0], lines
    assert not list((tmp_path / "w").glob("*.status")), "a session ran"


def test_a_saved_tunes_per_shape_labels_are_printed_escaped(tmp_path):
    """format_shapes prints one `ranked by` line when every shape's label is the same (now printable()),
    but `  shape N: {label}` lines when they differ, still raw: a saved run's label reaches the terminal
    with its escapes and its line break starts a forged line."""
    (tmp_path / "t.py").write_text(
        "import nsprof.space\n"
        "space = nsprof.space.Space(configs=[{'ns': 2000.0}, {'ns': 1000.0}], shapes=[{'m': 1}, {'m': 2}],\n"
        "                           build=lambda c, s: (lambda: None), device='cpu')\n"
    )
    done = _tune(tmp_path, "--no-feed-back", "--no-tuner-pick", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    shapes = document["shapes"] if "shapes" in document else None
    assert shapes, list(document)
    shapes[0]["truths"][0]["label"] = "ncu \x1b]8;;http://evil.example/\x07x\x1b]8;;\x07\nforged: line"
    (tmp_path / "edited.json").write_text(json.dumps(document))
    shown = run_nsprof("results", "edited.json", cwd=tmp_path, in_process=True)
    printed = shown.stdout + shown.stderr
    assert "ranked per shape by" in printed, printed
    assert "\x1b" not in printed and "\x07" not in printed, repr(printed[:600])
    assert not [line for line in printed.splitlines() if line.startswith("forged")], printed


# --------------------------------------------------------------------------- results: the cut-short note


# --------------------------------------------------------------------------- JSON


def _hostile_kernel_report(tmp_path):
    """The nsys fixture with its GEMM kernel renamed to hold a bidi override, a C1 CSI and a DEL."""
    report = tmp_path / "h.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", report)
    name = "gemm\u202e\x9b2J\x7f\u2028x"
    with sqlite3.connect(report) as db:
        db.execute("UPDATE StringIds SET value = ? WHERE value = 'gemm_kernel'", (name,))
    return report, name


@pytest.mark.parametrize(
    "args", [["--json"], ["--format", "json"], ["--compare"]], ids=["json", "format", "compare"]
)
def test_json_output_escapes_what_a_terminal_acts_on_and_reads_back_the_same_name(tmp_path, args):
    """JSON is read by programs but printed to terminals too: a kernel's name reaches stdout with
    ensure_ascii off, so a bidi override, a C1 control or a line separator went out raw. Inside a JSON
    string each may be written as its \\u escape: a JSON reader gets the very same name back."""
    report, name = _hostile_kernel_report(tmp_path)
    if args == ["--compare"]:
        args = ["--compare", "--format", "json"]
        files = [report, report]
    else:
        files = [report]
    done = run_nsprof("analyze", *files, *args, in_process=True)
    assert done.returncode == 0, done.stderr
    raw = [c for c in ("\u202e", "\x9b", "\x7f", "\u2028") if c in done.stdout]
    assert not raw, raw
    assert name in json.dumps(json.loads(done.stdout), ensure_ascii=False)


@pytest.mark.parametrize("compare", [False, True], ids=["durations", "compare"])
def test_a_plot_of_a_hostile_name_lets_no_control_character_reach_stderr(tmp_path, compare):
    """A kernel's (or a file's) name drawn as it is: matplotlib warned of each glyph it lacks, the raw ESC or
    BEL in its warning. Every text of a figure is drawn with its control characters shown escaped."""
    pytest.importorskip("matplotlib")
    report = tmp_path / "h.sqlite"
    shutil.copy(FIXTURES / "fixture.sqlite", report)
    with sqlite3.connect(report) as db:
        db.execute(
            "UPDATE StringIds SET value = ? WHERE value = 'gemm_kernel'", ("gemm\x1b]0;pwn\x07\x1b[2J",)
        )
    args = [report]
    if compare:
        named = tmp_path / "a\x1b[31m.sqlite"
        shutil.copy(report, named)
        args = ["--compare", named, FIXTURES / "fixture.sqlite"]
    done = run_nsprof("analyze", *args, "--plot", tmp_path / "p.png", in_process=True)
    assert done.returncode == 0, done.stderr
    assert not _raw_controls(done.stderr) and (tmp_path / "p.png").stat().st_size > 0, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "csv"],
        ["--csv", "-"],
        ["--by", "kernel", "--format", "csv"],
        ["--compare", "--format", "csv"],
    ],
    ids=["format-csv", "rows-csv", "by-kernel-csv", "compare-csv"],
)
def test_csv_on_standard_output_shows_control_characters_escaped(tmp_path, args):
    """CSV printed to standard output reaches a terminal as the tables do: a name's control characters shown
    escaped (a CSV file, --csv FILE, holds the name as the report has it)."""
    report, name = _hostile_kernel_report(tmp_path)
    files = [report, FIXTURES / "fixture.sqlite"] if "--compare" in args else [report]
    options = [a for a in args if a != "--compare"]
    done = run_nsprof(
        "analyze", *(["--compare"] if "--compare" in args else []), *files, *options, in_process=True
    )
    assert done.returncode == 0, done.stderr
    assert not _raw_controls(done.stdout) and "\x7f" not in done.stdout, done.stdout[:300]
    assert "gemm\\u202e\\x9b2J\\x7f\\u2028x" in done.stdout, done.stdout[:300]
    if options == ["--csv", "-"]:
        return
    done = run_nsprof("analyze", *files, "--csv", tmp_path / "rows.csv", in_process=True)
    assert name in (tmp_path / "rows.csv").read_text(), "a file holds the name as it is"
