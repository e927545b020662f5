"""The documentation holds together: the site builds from docs/ with MkDocs in strict mode (a
broken link, a missing anchor or a page left out of nav fails it), nav lists every page, and
every relative link of README.md and docs/*.md, #anchors included, reaches a file or heading
that exists, so the README's links work on GitHub as well as on the site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
PAGES = [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where link syntax is not a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs' toc both make it for this project's headings:
    inline markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\s-]", "", text.lower()).strip()
    return re.sub(r"\s+", "-", text)


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page, GitHub's -1, -2 suffixes for repeated headings too."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of a page that reaches no file, or no heading of its page."""
    problems = []
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if _SCHEME.match(target):
            continue  # a web address: not ours to resolve offline
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.parent.name}/{page.name}"
        if not dest.exists():
            problems.append(f"{where}: link {target!r}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: link {target!r}: {dest.name} has no heading #{anchor}")
    return problems


def nav_pages(nav: list[object]) -> list[str]:
    """The page files a MkDocs nav names, sections flattened."""
    pages: list[str] = []
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            pages.extend(nav_pages(value) if isinstance(value, list) else [str(value)])
    return pages


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(REPO_ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    for page in sorted(DOCS.glob("*.md")):
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built into {built}"
    assert (site / "report.png").is_file()


def test_nav_lists_every_page_once() -> None:
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs" and config["strict"] is True
    listed = nav_pages(config["nav"])
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize(
    "contents", [REPO_ROOT / "README.md", DOCS / "index.md"], ids=["README", "index"]
)
def test_the_tables_of_contents_link_every_page(contents: Path) -> None:
    text = prose(contents.read_text(encoding="utf-8"))
    linked = {Path(t.partition("#")[0]).name for t in _LINK.findall(text)}
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "index.md" and p.name not in linked]
    assert missing == [], f"{contents.name} links no page {missing}: add it to its table"


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## The `x` rules (`y/`)\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#the-x-rules-y) [gone](nowhere.md) [bad](a.md#nope) [web](https://x.test/)\n"
        "`[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    problems = broken_links(page)
    assert len(problems) == 2
    assert "nowhere.md" in problems[0] and "#nope" in problems[1]
