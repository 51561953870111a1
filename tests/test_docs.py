"""The docs in the shape of the model projects: a short README that keeps the two set-up
commands .ci/run and CI depend on and links to docs/ pages, every link of which resolves, and an
option reference that is generated from --help and so cannot drift."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SETUP = (
    "    pip install -e . && nsprof analyze tests/fixtures/fixture.sqlite\n",
    "    pip install -e '.[dev]' && python3 -m pytest -q\n",
)
GUIDES = ("analyze", "profile", "tune", "validate", "results", "serve", "doctor")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def gen_options():
    spec = importlib.util.spec_from_file_location("gen_options", ROOT / "scripts" / "gen_options.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_options_page_is_the_generators_output():
    page = (DOCS / "options.md").read_text(encoding="utf-8")
    assert page == gen_options().render(), (
        "docs/options.md is out of date: run scripts/gen_options.py --write"
    )


def test_options_page_holds_every_commands_help():
    from click.testing import CliRunner

    from nsprof.cli import cli

    page = (DOCS / "options.md").read_text(encoding="utf-8")
    for name in cli.commands:
        done = CliRunner().invoke(cli, [name, "--help"], prog_name="nsprof", terminal_width=100)
        first, *rest = done.output.splitlines()
        assert f"### nsprof {name}\n\n    {first}\n" in page
        # every option line of the help, indented as a code block
        for line in rest:
            if line.strip().startswith("--"):
                assert f"    {line}".rstrip() in page, (name, line)


def test_readme_is_short_and_keeps_the_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    for command in SETUP:
        assert command in text, command
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[dev]'" in ci and "python3 -m pytest -q" in ci
    assert "cache" in text and "TileLang" in text and "Triton" in text  # the feed-back, said up front


def test_readme_links_a_guide_per_command_and_the_reference_pages():
    links = set(LINK.findall(README.read_text(encoding="utf-8")))
    for page in (*GUIDES, "concepts", "options", "layout"):
        assert f"docs/{page}.md" in links, page


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and not line.startswith("#!"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    checked = 0
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            assert path.exists(), f"{page.relative_to(ROOT)}: {target}"
            if anchor:
                assert anchor in _anchors(path), f"{page.relative_to(ROOT)}: {target}"
            checked += 1
    assert checked > 30


def test_the_anchor_rule():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "p.md"
        page.write_text("# `nsprof tune`: rank\n## Several GPUs, several hosts (Dask)\n    # not\n")
        assert _anchors(page) == {"nsprof-tune-rank", "several-gpus-several-hosts-dask"}
