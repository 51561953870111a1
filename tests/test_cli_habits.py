"""Habits of the command line: -V/--version everywhere, shell completion as docs/options.md
says, and help text and the docs naming the same options.

The rule for "the same options", command by command:
- the options its `--help` names are the long option names (`--x`, and `--no-x` of an on/off
  pair) in the option column of `nsprof COMMAND --help`, less `--help` and `--version` (every
  command has both: checked separately, and docs/options.md says so once for all);
- docs/options.md (generated from --help by scripts/gen_options.py) names for it the `--x` tokens
  of its bullet (``- `nsprof COMMAND ...`: ...``) under "## Commands and options";
- the two sets are equal; and every `--x` that follows `nsprof COMMAND` on a line of a code
  example (an indented line or a backtick span) of the README or of a docs/ page is one of the
  command's options, so that no example shows an option the command does not take.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_nsprof

from nsprof import __version__
from nsprof.cli import cli

ROOT = Path(__file__).resolve().parents[1]
OPTIONS_PAGE = ROOT / "docs" / "options.md"
# Where examples are: the README and every docs/ page but the generated help (whose lines such as
# "nsprof tune [OPTIONS] TARGET" are usage, not examples).
EXAMPLE_PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != OPTIONS_PAGE)]
COMMANDS = sorted(cli.commands)
LONG = re.compile(r"--[a-z][a-z0-9-]*")
ALWAYS = {"--help", "--version"}


def help_options(help_text: str) -> set[str]:
    """The long options in the option column of click's help (not those named in descriptions)."""
    found = set()
    in_options = False
    for line in help_text.splitlines():
        if line.strip() == "Options:":
            in_options = True
            continue
        if in_options and line.startswith("  -"):
            column = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            found |= set(LONG.findall(column))
    return found


def options_section(title: str) -> str:
    text = OPTIONS_PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def options_bullets() -> dict[str, str]:
    """Command -> its bullet's text under "## Commands and options" of docs/options.md."""
    section = options_section("Commands and options")
    bullets = re.findall(r"^- `nsprof (\w+)[^`]*`:(.*?)(?=^- |^\s*$|^#)", section, re.M | re.S)
    out: dict[str, str] = {}
    for name, body in bullets:
        assert name not in out, f"two bullets for {name}"
        out[name] = body
    return out


def doc_examples() -> list[tuple[str, str]]:
    """(command, rest of line) for every `nsprof COMMAND ...` in the code of the README and the
    docs/ pages: indented lines and backtick spans."""
    text = "\n".join(page.read_text() for page in EXAMPLE_PAGES)
    code = [line for line in text.splitlines() if line.startswith("    ")]
    code += re.findall(r"`([^`\n]*)`", text)
    found = []
    for line in code:
        for match in re.finditer(r"\bnsprof ([a-z]+)\b(.*)", line):
            found.append((match.group(1), match.group(2)))
    return found


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    return {name: run_nsprof(name, "--help", in_process=True).stdout for name in COMMANDS}


def test_the_rule_reads_the_help_option_column_only():
    text = (
        "Usage: x\n\nOptions:\n  --prescreen [graph|cupti]  Only the best --top go on.\n"
        "  --feed-back / --no-feed-back\n                  Hand it back.\n  -V, --version  Show.\n"
    )
    assert help_options(text) == {"--prescreen", "--feed-back", "--no-feed-back", "--version"}


def test_version_on_nsprof_and_every_command():
    for args in [[], *[[name] for name in COMMANDS]]:
        for flag in ("-V", "--version"):
            done = run_nsprof(*args, flag, in_process=True)
            assert done.returncode == 0 and done.stdout == f"nsprof, version {__version__}\n", (
                args,
                flag,
                done,
            )


def test_every_help_names_help_and_version(helps):
    for name, text in helps.items():
        assert "-h, --help" in text and "-V, --version" in text, name


def test_options_page_lists_exactly_the_options_each_help_names(helps):
    bullets = options_bullets()
    assert set(bullets) == set(COMMANDS), "one bullet per command under '## Commands and options'"
    for name in COMMANDS:
        in_help = help_options(helps[name]) - ALWAYS
        in_page = set(LONG.findall(bullets[name]))
        assert in_help, name
        assert in_page == in_help, (
            f"nsprof {name}: only in --help: {sorted(in_help - in_page)}; "
            f"only in docs/options.md: {sorted(in_page - in_help)}"
        )


def test_doc_examples_use_only_real_options(helps):
    examples = doc_examples()
    assert len(examples) > 15
    for name, rest in examples:
        if name not in helps:
            continue  # prose such as "nsprof is for people who..."
        unknown = set(LONG.findall(rest)) - help_options(helps[name])
        assert not unknown, f"example `nsprof {name}{rest}` uses {sorted(unknown)}"
    assert {name for name, _ in examples} >= set(COMMANDS)


def test_options_page_documents_shell_completion():
    section = options_section("Shell completion")
    for shell in ("bash", "zsh", "fish"):
        assert f"_NSPROF_COMPLETE={shell}_source nsprof" in section


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_the_docs_name(shell):
    done = run_nsprof(env={"_NSPROF_COMPLETE": f"{shell}_source"}, in_process=True)
    assert done.returncode == 0
    assert "_NSPROF_COMPLETE" in done.stdout and f"{shell}_complete" in done.stdout


def test_completion_completes_commands_options_and_choices():
    def complete(words: str) -> list[str]:
        parts = words.split(" ")
        done = run_nsprof(
            env={"_NSPROF_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)},
            in_process=True,
        )
        assert done.returncode == 0, done.stderr
        return [line.split(",", 1)[1] for line in done.stdout.splitlines()]

    assert complete("nsprof tu") == ["tune"]
    assert set(complete("nsprof ")) >= set(COMMANDS)
    assert complete("nsprof tune x.py:space --ht") == ["--html"]
    assert complete("nsprof tune x.py:space --stat ") == ["median", "min"]
