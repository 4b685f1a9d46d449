"""Every link in README.md, docs/*.md and docs/zh/*.md leads somewhere.

A markdown link or image, `[text](target)` or `![alt](target)`, whose target
is not a URL (`http:`, `https:`, `mailto:`) must name a file or directory of
the repository, relative to the markdown file it is in; a `#anchor` on it
(or on its own, for the same file) must be the anchor GitHub gives one of
that markdown file's headings:

- the heading's text as it reads (inline code, emphasis and links reduced
  to their text), lower-cased;
- every character that is not a letter, a digit, a space, `-` or `_` is
  dropped, and each space becomes `-`;
- the second heading with the same anchor gets `-1`, the third `-2`, ...

Links inside fenced code blocks and inline code are text, not links. An
explicit `<a id="...">` or `<a name="...">` also counts as an anchor.
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse

import pytest

from conftest import REPO

FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "zh").glob("*.md"))]
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?(?P<target>[^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:id|name)\s*=\s*\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for the lines outside fenced code, inline code blanked out."""
    out, fenced = [], False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)))
    return out


def _plain(heading: str) -> str:
    """A heading's text as it reads: code, emphasis and links reduced to their text."""
    text = re.sub(r"`+([^`]*)`+", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"(\*\*|__|\*|(?<!\w)_(?=\w)|(?<=\w)_(?!\w))", "", text)


def github_anchor(heading: str) -> str:
    kept = []
    for ch in _plain(heading).strip().lower():
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append("-" if ch == " " else ch)
    return "".join(kept)


def anchors(path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    text = path.read_text(encoding="utf-8")
    fenced = False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = github_anchor(m.group(2))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def links(path) -> list[tuple[int, str]]:
    """(line, target) of every link and image of one markdown file."""
    out = []
    previous_blank = True
    for n, line in _prose_lines(path.read_text(encoding="utf-8")):
        for m in LINK.finditer(line):
            out.append((n, m.group("target")))
        d = REF_DEF.match(line)
        if d and previous_blank:
            out.append((n, d.group(1)))
        previous_blank = not line.strip()
    return out


def dead_links(path, root=REPO) -> list[str]:
    root = root.resolve()
    dead = []
    for n, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / urllib.parse.unquote(file_part)).resolve() if file_part else path
        where = f"{path.resolve().relative_to(root)}:{n}: ({target})"
        if not dest.exists():
            dead.append(f"{where} names {file_part}, which does not exist")
            continue
        if root not in (dest, *dest.parents):
            dead.append(f"{where} leads out of the repository")
            continue
        if anchor:
            if dest.suffix != ".md" or not dest.is_file():
                dead.append(f"{where}: #{anchor} on a file that is not markdown")
            elif urllib.parse.unquote(anchor) not in anchors(dest):
                dead.append(f"{where}: {dest.relative_to(root)} has no heading with anchor #{anchor}")
    return dead


def test_github_anchor_rules():
    assert github_anchor("Two commands") == "two-commands"
    assert github_anchor("`tokpos serve`: the interactive page and its JSON API") == (
        "tokpos-serve-the-interactive-page-and-its-json-api")
    assert github_anchor("Lab 002: `pe()` and `embedding_forward` in C") == "lab-002-pe-and-embedding_forward-in-c"
    assert github_anchor("Scale out: a vocab-parallel input stage") == "scale-out-a-vocab-parallel-input-stage"
    assert github_anchor("Dependencies, and why") == "dependencies-and-why"
    assert github_anchor("**Bold** and [a link](x.md)") == "bold-and-a-link"


def test_the_link_parser_finds_links_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n\nSee [a](other.md#x), ![b](img/p.png) and `[c](in-code.md)`.\n\n"
                    "```\n[d](in-a-fence.md)\n```\n\n[e]: ref.md\n## Top\n")
    assert links(page) == [(3, "other.md#x"), (3, "img/p.png"), (9, "ref.md")]
    assert anchors(page) == {"top", "top-1"}
    (tmp_path / "other.md").write_text("# X\n")
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "p.png").write_bytes(b"")
    (tmp_path / "ref.md").write_text("")
    assert dead_links(page, tmp_path) == []
    page.write_text("[a](missing.md) [b](other.md#y) [c](#top) [d](#nope) [e](img/p.png#x) [f](../../x.md)\n# Top\n")
    assert dead_links(page, tmp_path) == [
        "page.md:1: (missing.md) names missing.md, which does not exist",
        "page.md:1: (other.md#y): other.md has no heading with anchor #y",
        "page.md:1: (#nope): page.md has no heading with anchor #nope",
        "page.md:1: (img/p.png#x): #x on a file that is not markdown",
        "page.md:1: (../../x.md) names ../../x.md, which does not exist",
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(path):
    dead = dead_links(path)
    assert not dead, "dead links:\n" + "\n".join(dead)
