"""Every code block of README.md, docs/*.md and docs/zh/*.md runs as shown and prints what the page says.

The convention (README.md and every docs/*.md and docs/zh/*.md page follow it; a block that
breaks it fails here):

- A fenced block tagged ```c, ```cpp, ```sh or ```python is a snippet, and
  it is run:
    c / cpp   a complete program, compiled with the build's own C / C++
              compiler against include/ and the build's libtokpos.so, then run;
    sh        each line (a trailing backslash continues it; blank lines and
              `#` comments are skipped) is one `tokpos ...` or
              `build/bin/tokpos ...` command, run with the tool under test
              ($TOKPOS_CLI) in a fresh temporary directory; each must exit 0;
    python    run by this interpreter (the one the package is installed in)
              in a subprocess, in a temporary directory; it must exit 0.
- `<!-- snippet: output -->` on the line before a fenced block (blank lines
  between are allowed) makes that block the exact stdout of the snippet
  before it (for sh, of all its commands in order); the snippet must print
  exactly that.
- `<!-- snippet: not run (reason) -->` before a snippet leaves it out, with
  the reason given (a block that runs until stopped, or needs what the
  suite does not have); the blocks left out are listed with their reasons.
- A block without a tag is text (a diagram, a listing, an output); a block
  with any other tag must carry the not-run marker.

Every snippet runs in the C.UTF-8 locale: the reports are in English
unless the snippet asks for `--lang zh` (a reader whose locale is zh_*
sees Chinese without the flag).

The build directory is the one $TOKPOS_CLI lives in (build/bin/tokpos ->
build/). The blocks run and left out are listed at the end of the run, by
page and line.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO, cli_path, tokpos_torch

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "zh").glob("*.md"))]
RUNNERS = ("c", "cpp", "sh", "python")
MARKER = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->$")
NOT_RUN = re.compile(r"^not run \((.+)\)$")
TIMEOUT_S = 120


@dataclasses.dataclass
class Block:
    page: str  # the markdown file, relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # the text of a snippet marker just before it
    expected: str | None = None  # the output block that follows, if marked

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}:{self.lang}"


def parse(text: str, page: str = "README.md") -> list[Block]:
    """The fenced blocks of text, each with the marker just before it."""
    lines = text.split("\n")
    blocks: list[Block] = []
    marker: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        m = MARKER.match(line)
        if m:
            marker = m.group(1)
        elif line.startswith("```"):
            lang = line[3:].strip()
            start = i
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise AssertionError(f"{page}:{start + 1}: the block opened here is never closed")
            blocks.append(Block(page, start + 1, lang, "\n".join(body) + "\n", marker))
            marker = None
        elif line:
            marker = None
        i += 1
    return blocks


def snippets() -> list[Block]:
    """The snippets of every page, each with its expected output; checks the convention."""
    out: list[Block] = []
    for page in PAGES:
        out += _page_snippets(parse(page.read_text(encoding="utf-8"), str(page.relative_to(REPO))))
    return out


def _page_snippets(blocks: list[Block]) -> list[Block]:
    out: list[Block] = []
    for k, b in enumerate(blocks):
        if b.marker == "output":
            if not out or b.lang or k == 0 or out[-1] is not blocks[k - 1]:
                raise AssertionError(
                    f"{b.name}: an output block must be untagged and follow the snippet it belongs to"
                )
            out[-1].expected = b.code
        elif b.marker is not None and not NOT_RUN.match(b.marker):
            raise AssertionError(f"{b.name}: unknown snippet marker {b.marker!r}")
        elif b.lang:
            if b.marker is None and b.lang not in RUNNERS:
                raise AssertionError(
                    f"{b.name}: no runner for a ```{b.lang} block; mark it <!-- snippet: not run (why) -->"
                )
            out.append(b)
        elif b.marker is not None:
            raise AssertionError(f"{b.name}: a not-run marker on an untagged block (text is never run)")
    return out


SNIPPETS = snippets()
_ran: list[str] = []
_not_run: list[str] = []


class _Summary:
    """Lists, in the terminal summary, the pages' blocks that ran and those left out."""

    def pytest_terminal_summary(self, terminalreporter):
        if _ran or _not_run:
            terminalreporter.write_line("doc snippets run (page:line, tag): " + (", ".join(_ran) or "none"))
            terminalreporter.write_line("doc snippets not run: " + (", ".join(_not_run) or "none"))


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    manager = request.config.pluginmanager
    if manager.get_plugin("readme_snippets_summary") is None:
        manager.register(_Summary(), "readme_snippets_summary")
    yield


@pytest.fixture(scope="module")
def build_dir() -> pathlib.Path:
    cli = cli_path()
    if cli is None:
        pytest.skip("the C++ tool is not built: set TOKPOS_CLI or run `make build` (build/bin/tokpos)")
    build = cli.resolve().parent.parent
    if not (build / "CMakeCache.txt").is_file():
        pytest.skip(f"{build} (from TOKPOS_CLI) is not a CMake build directory")
    return build


def _cache(build: pathlib.Path, key: str) -> str:
    for line in (build / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    raise AssertionError(f"{build}/CMakeCache.txt has no {key}")


def _run(args, cwd, what: str) -> str:
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S,
                       env={**os.environ, "TOKPOS_PROGRESS": "0", "LC_ALL": "C.UTF-8"})
    assert r.returncode == 0, f"{what} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def _program(block: Block, build: pathlib.Path, tmp: pathlib.Path) -> str:
    source = _cache(build, "CMAKE_HOME_DIRECTORY")
    lib = build / "lib"
    if block.lang == "c":
        compiler, ext, std = _cache(build, "CMAKE_C_COMPILER"), "c", "-std=c11"
    else:
        compiler, ext, std = _cache(build, "CMAKE_CXX_COMPILER"), "cpp", "-std=c++20"
    src = tmp / f"snippet.{ext}"
    src.write_text(block.code)
    exe = tmp / "snippet"
    _run([compiler, std, "-Wall", "-Wextra", "-Werror", str(src), f"-I{source}/include", f"-L{lib}", "-ltokpos",
          f"-Wl,-rpath,{lib}", "-o", str(exe)], tmp, f"{block.name}: compiling")
    return _run([str(exe)], tmp, f"{block.name}: the program")


def _commands(code: str) -> list[str]:
    lines, current = [], ""
    for raw in code.split("\n"):
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip() and not current.lstrip().startswith("#"):
            lines.append(current.strip())
        current = ""
    assert not current.strip(), f"a continued line never ends: {current!r}"
    return lines


def _shell(block: Block, build: pathlib.Path, tmp: pathlib.Path) -> str:
    cli = str(cli_path())
    out = ""
    for command in _commands(block.code):
        args = shlex.split(command, comments=True)
        assert args and args[0] in ("tokpos", "build/bin/tokpos"), (
            f"{block.name}: only tokpos commands are run, not {command!r}; "
            "mark the block <!-- snippet: not run (why) -->"
        )
        out += _run([cli, *args[1:]], tmp, f"{block.name}: {command}")
    return out


def _python(block: Block, build: pathlib.Path, tmp: pathlib.Path) -> str:
    if re.search(r"^\s*import\s+torch\b", block.code, re.M):
        try:
            import torch  # noqa: F401
        except ImportError:
            pytest.skip(f"{block.name} imports torch, which is not installed")
    if re.search(r"^\s*(import|from)\s+tokpos\.torch\b", block.code, re.M):
        tokpos_torch()  # or a skip saying why (torch too old)
    src = tmp / "snippet.py"
    src.write_text(block.code)
    return _run([sys.executable, str(src)], tmp, f"{block.name}: python")


def test_the_readme_has_snippets_of_every_kind():
    run = {b.lang for b in SNIPPETS if b.marker is None and b.page == "README.md"}
    assert run >= {"c", "cpp", "sh", "python"}, f"run blocks by language: {sorted(run)}"
    assert all(b.expected is not None for b in SNIPPETS if b.marker is None and b.lang != "sh"), (
        "every program and Python snippet shows what it prints (<!-- snippet: output -->)"
    )


def test_every_block_left_out_says_why():
    for b in SNIPPETS:
        if b.marker is not None:
            reason = NOT_RUN.match(b.marker).group(1).strip()
            assert reason, f"{b.name}: a not-run marker needs its reason"
            _not_run.append(f"{b.page}:{b.line} ({b.lang}: {reason})")


@pytest.mark.parametrize("block", [b for b in SNIPPETS if b.marker is None], ids=lambda b: b.name)
def test_snippet(block: Block, build_dir: pathlib.Path, tmp_path: pathlib.Path):
    run = {"c": _program, "cpp": _program, "sh": _shell, "python": _python}[block.lang]
    printed = run(block, build_dir, tmp_path)
    _ran.append(f"{block.page}:{block.line} ({block.lang})")
    if block.expected is not None:
        assert printed == block.expected, (
            f"{block.name} printed\n{printed}\nbut {block.page} shows\n{block.expected}"
        )
