"""The documentation site is configured as `make docs` builds it.

`make docs` (mkdocs build --strict, in CI) is the real check: a broken link or anchor, a
page outside the navigation, a docstring mkdocstrings cannot read. These are the cheap
ones it rests on: the navigation and docs/ agree, the API reference covers the whole public
surface, and the README stays a short entry whose links reach the pages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import onceonly
import onceonly.testing
from tests.readme import section, sh_commands, shown_commands, typeable

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: the README keeps what a newcomer needs first; the rest is on the site
README_MAX_LINES = 400


def nav_pages(nav: list[Any]) -> Iterator[str]:
    """Every page a mkdocs nav names, nested sections included (external links left out)."""
    for entry in nav:
        items = entry.values() if isinstance(entry, dict) else [entry]
        for item in items:
            if isinstance(item, list):
                yield from nav_pages(item)
            elif not re.match(r"^[a-z]+://", str(item)):
                yield str(item)


def _config() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))


def nav_problems(nav: list[Any], pages: set[str]) -> list[str]:
    """Pages left out of the nav, nav entries with no page, and pages named twice."""
    named = list(nav_pages(nav))
    problems = [f"{page}: not in mkdocs.yml's nav" for page in sorted(pages - set(named))]
    problems += [f"{page}: in the nav, not in docs/" for page in named if page not in pages]
    problems += [
        f"{page}: twice in the nav" for page in sorted(set(named)) if named.count(page) > 1
    ]
    return problems


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = _config()
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert config["docs_dir"] == "docs" and config["strict"] is True
    assert "index.md" in pages
    assert nav_problems(config["nav"], pages) == []


def test_the_nav_check_finds_a_missing_page_an_orphan_and_a_double() -> None:
    nav = [{"Home": "index.md"}, {"Run": [{"A": "a.md"}, {"Gone": "gone.md"}]}, "a.md"]
    assert nav_problems(nav, {"index.md", "a.md", "orphan.md"}) == [
        "orphan.md: not in mkdocs.yml's nav",
        "gone.md: in the nav, not in docs/",
        "a.md: twice in the nav",
    ]


def test_the_api_reference_documents_every_public_name() -> None:
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    rendered = set(re.findall(r"^::: ([\w.]+)", reference, re.MULTILINE))
    public = {f"onceonly.{name}" for name in onceonly.__all__ if name != "__version__"}
    assert public - rendered == set()
    testing = re.search(r"^::: onceonly\.testing\n((?:    .*\n)*)", reference, re.MULTILINE)
    assert testing is not None
    listed = set(re.findall(r"^\s+- (\w+)$", testing.group(1), re.MULTILINE))
    assert listed == set(onceonly.testing.__all__)


def test_the_api_reference_runs_mkdocstrings_on_the_checkout() -> None:
    plugins = {next(iter(p)) if isinstance(p, dict) else p: p for p in _config()["plugins"]}
    assert "mkdocstrings" in plugins
    handler = plugins["mkdocstrings"]["mkdocstrings"]["handlers"]["python"]
    assert handler["paths"] == ["."]


def test_the_readme_is_short_and_its_links_reach_the_pages() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < README_MAX_LINES
    targets = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert targets, "the README maps the documentation's pages"
    assert [t for t in targets if not (ROOT / t).is_file()] == []
    pages = {f"docs/{p}" for p in nav_pages(_config()["nav"])}
    assert pages - set(targets) == set(), "every page of the site is in the README's map"


def test_the_readme_keeps_the_newcomers_sections() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", readme, re.MULTILINE)
    assert headings[:3] == ["The two commands", "The first five minutes", "The writer contract"]
    assert "from onceonly import Burst, Decline, Draft" in readme
    assert "from onceonly.testing import" in readme


def _newcomers_pages() -> dict[str, str]:
    """The README, and the site's landing page up to its list of every command."""
    index = (DOCS / "index.md").read_text(encoding="utf-8").split("\n## Commands\n")[0]
    return {"README.md": (ROOT / "README.md").read_text(encoding="utf-8"), "index.md": index}


@pytest.mark.parametrize("page", ["README.md", "index.md"])
def test_every_command_a_newcomer_is_shown_runs_as_typed_in_a_fresh_shell(page: str) -> None:
    shown = shown_commands(_newcomers_pages()[page])

    assert shown, "the check reads the page's commands"
    assert [c for c in shown if not typeable(c)] == []


@pytest.mark.parametrize("page", ["README.md", "index.md"])
def test_the_first_five_minutes_are_two_terminals_of_make_targets(page: str) -> None:
    block = section(_newcomers_pages()[page], "The first five minutes")

    assert sh_commands(block) == ["make run", "make send"]


def test_a_command_is_typeable_as_a_make_target_or_the_virtualenv_s_program() -> None:
    assert typeable("make send")
    assert typeable("ONCEONLY_AGENTMAIL_WEBHOOK_SECRET=whsec_x make run")
    assert typeable(".venv/bin/onceonly --help")
    assert not typeable("python -m devstack send")
    assert not typeable("onceonly trace ID")
    assert not typeable("ONCEONLY_X=1 onceonly worker")
    assert not typeable("makefile")


def test_inline_commands_are_spans_that_run_a_program_with_arguments() -> None:
    page = "Run `onceonly trace ID`; the package `onceonly`; `make`.\n```sh\nmake run  # go\n```\n"

    assert shown_commands(page) == ["make run", "onceonly trace ID"]


def test_every_source_path_the_docs_name_exists() -> None:
    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    missing = [
        f"{page.name}: {path}"
        for page in pages
        for path in sorted(set(re.findall(r"\bonceonly/[\w/]+\.py\b", page.read_text())))
        if not (root / path).exists()
    ]

    assert not missing
