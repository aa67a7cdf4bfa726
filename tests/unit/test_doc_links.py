"""Every link in the docs leads somewhere, and every pointer from the code into the docs too.

- Each Markdown file under docs/, the README and any other README: every relative link and
  image names a file of the repository, and every `#anchor` a heading of its target, by
  GitHub's rules (the rendered text lower-cased, punctuation dropped except `-` and `_`,
  spaces to `-`; a repeated heading gets `-1`, `-2`, ...). External links are not fetched
  (the suite has no network): they are only held to http(s).
- Each place the code, the tests, the benchmarks or the scripts point at a page
  (`docs/x.md#anchor`, `docs/x.md "Heading"`, `docs/x.md §4`) names a page and a heading
  that exist.
- No doc names a path outside the repository.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    page
    for page in {*ROOT.glob("docs/**/*.md"), *ROOT.glob("*.md"), *ROOT.glob("*/README*.md")}
    if not any(part.startswith(".") for part in page.relative_to(ROOT).parts)
)
# Where code points at the docs: product packages, the kit, tests, benchmarks, scripts.
CODE_DIRS = ("coordinator", "replication", "pipeline", "shared", "ripple", "testkit", "bench")
CODE_FILES = ("compose/check", "compose/cluster.toml", "compose/docker-compose.yml", ".ci/run")

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
_HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
# A page named in code: `docs/x.md`, then an anchor, a quoted heading or a § number.
_CODE_REF = re.compile(r"docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+)|,? \"([^\"]+)\"|,? (§\d+))?")
# A relative path in a page's text (a link, a code span or prose), checked to stay inside.
_CLIMB = re.compile(r"(?:\.\./)+[\w.-]+")


def prose(text: str) -> str:
    """The text a reader sees as prose: fenced blocks and code spans blanked (a link there is
    an example, not a link), line breaks kept so messages can name lines."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731 - local, one use each
    return _CODE_SPAN.sub(blank, _FENCE.sub(blank, text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    out = []
    for ch in text.strip().lower():
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            out.append("-" if ch == " " else ch)
    return "".join(out)


@cache
def anchors(page: Path) -> frozenset[str]:
    text = page.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    out = set(_HTML_ID.findall(text))
    for match in _HEADING.finditer(_FENCE.sub("", text)):
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


@cache
def headings(page: Path) -> tuple[str, ...]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return tuple(m.group(2).replace("`", "") for m in _HEADING.finditer(text))


def links(page: Path) -> Iterator[tuple[int, str]]:
    text = prose(page.read_text(encoding="utf-8"))
    for pattern in (_LINK, _REF_DEF):
        for match in pattern.finditer(text):
            yield text.count("\n", 0, match.start()) + 1, match.group(1)


def broken(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, leads nowhere (None: it leads somewhere)."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
        return None if target.startswith(("https://", "http://", "mailto:")) else "scheme"
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.is_relative_to(ROOT):
        return "outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading #{anchor} in {dest.relative_to(ROOT)}"
    return None


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/README.md", "docs/operations.md"} <= names
    assert any(n.startswith("docs/runbooks/") for n in names)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_leads_somewhere(page: Path) -> None:
    bad = [
        f"{page.relative_to(ROOT)}:{line}: ({target}) {why}"
        for line, target in links(page)
        if (why := broken(page, target)) is not None
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_names_a_path_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    # Text that ties a doc to one machine: the directory this checkout sits in, or a relative
    # path that climbs out of the repository from the page's own folder.
    where = str(ROOT.parent) + "/"
    hits = [m for m in re.finditer(re.escape(where), text)]
    hits += [
        m
        for m in _CLIMB.finditer(text)
        if not (page.parent / m.group(0)).resolve().is_relative_to(ROOT)
    ]
    bad = [
        f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for m in hits
    ]
    assert not bad, "\n".join(bad)


def code_files() -> Iterator[Path]:
    for top in CODE_DIRS:
        yield from sorted((ROOT / top).rglob("*.py"))
    yield from sorted((ROOT / "tests").rglob("*.py"))
    for name in CODE_FILES:
        if (ROOT / name).exists():
            yield ROOT / name
    yield ROOT / "README.md"


def code_ref_broken(ref: re.Match[str]) -> str | None:
    page = ROOT / "docs" / ref.group(1)
    if not page.exists():
        return "no such page"
    anchor, heading, section = ref.group(2), ref.group(3), ref.group(4)
    if anchor and anchor not in anchors(page):
        return f"no heading #{anchor}"
    # A quoted heading may run over a comment's line break.
    wanted = re.sub(r"\s*\n\s*#?\s*", " ", heading) if heading else section
    if wanted and not any(h.lower().startswith(wanted.lower()) for h in headings(page)):
        return f"no heading starting {wanted!r}"
    return None


def test_every_pointer_from_the_code_into_the_docs_resolves() -> None:
    bad = []
    for path in code_files():
        if path == Path(__file__):
            continue  # its own examples
        text = path.read_text(encoding="utf-8")
        for ref in _CODE_REF.finditer(text):
            if (why := code_ref_broken(ref)) is not None:
                line = text.count("\n", 0, ref.start()) + 1
                bad.append(f"{path.relative_to(ROOT)}:{line}: {ref.group(0)}: {why}")
    assert not bad, "\n".join(bad)


def test_the_index_names_every_page() -> None:
    index = ROOT / "docs" / "README.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for _, t in links(index)}
    pages = {p.resolve() for p in PAGES if p.is_relative_to(ROOT / "docs") and p != index}
    missing = sorted(str(p.relative_to(ROOT)) for p in pages - linked)
    assert not missing, f"docs/README.md does not name {missing}"


RUNBOOKS = sorted((ROOT / "docs" / "runbooks").glob("*.md"))


@pytest.mark.parametrize("page", RUNBOOKS, ids=lambda p: p.name)
def test_a_runbook_says_when_what_to_run_and_how_to_check(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# "), "a title first"
    assert "**When:**" in text.split("\n## ", 1)[0], "when to use it, before the steps"
    assert re.search(r"^ *```(sh|yaml|ini)$", text, re.M), "the steps as commands"
    assert "\n## Check it worked\n" in text, "how to check it worked"


def test_the_operators_and_benchmarks_pages_stay_short() -> None:
    # What an operator needs in front of them; procedures and references live on their own
    # pages (runbooks/, reference/), which is what keeps this one readable.
    for page in ("operations.md", "benchmarks.md"):
        lines = (ROOT / "docs" / page).read_text(encoding="utf-8").count("\n")
        assert lines < 400, f"docs/{page} has {lines} lines: move detail to its own page"


def test_the_checker_knows_broken_from_whole(tmp_path: Path) -> None:
    assert slug("`ripple up`") == "ripple-up"
    assert slug("§4 Leader duties") == "4-leader-duties"
    assert slug("Restarting, upgrading and moving workers") == (
        "restarting-upgrading-and-moving-workers"
    )
    assert slug("What the code's settings rest on") == "what-the-codes-settings-rest-on"
    page = ROOT / "docs" / "operations.md"
    assert broken(page, "runbooks/add-a-node.md") is None
    assert broken(page, "#ports") is None
    assert broken(page, "#no-such-heading") == "no heading #no-such-heading in docs/operations.md"
    assert broken(page, "no-such-page.md") == "no such file"
    assert broken(page, "../../outside.md") == "outside the repository"
    assert broken(page, "https://example.org/x") is None
    assert prose("see `[a](b)` and\n```\n[c](d)\n```\n[e](f)").count("](") == 1
    ref = _CODE_REF.search('as docs/operations.md, "Sizing one cluster" says')
    assert ref is not None and code_ref_broken(ref) is None
    ref = _CODE_REF.search('docs/operations.md "No such heading"')
    assert ref is not None and code_ref_broken(ref) == "no heading starting 'No such heading'"
