"""The code blocks of the project's markdown files, as the docs tests read them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_OPEN = re.compile(r"^(?P<indent> *)```(?P<lang>python|console)\s*$")
_MARKER = re.compile(r"^# Not run by tests/test_docs\.py: (?P<reason>\S.{10,})$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the first code line
    lang: str  # "python" or "console"
    source: str
    skip_reason: str | None  # a python block marked as not run, and why


def blocks(path: Path, lang: str, *, section: str | None = None) -> list[Block]:
    """The fenced blocks of ``lang`` in a markdown file, in order; only
    those under the heading ``section`` (up to the next heading of the
    same or a higher level) when given."""
    lines = path.read_text().splitlines()
    first, last = 0, len(lines)
    if section is not None:
        first, last = _section(lines, section, path)
    found: list[Block] = []
    i = first
    while i < last:
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{path.name}:{i + 1}: a ```{opening['lang']} block is never closed"
        if opening["lang"] == lang:
            # A block inside a list item is indented with it.
            body = [line[len(opening["indent"]) :] for line in lines[start:end]]
            marker = _MARKER.match(body[0]) if body and lang == "python" else None
            found.append(Block(path, start + 1, lang, "\n".join(body) + "\n", marker["reason"] if marker else None))
        i = end + 1
    return found


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a markdown file, in order."""
    return blocks(path, "python")


def _section(lines: list[str], heading: str, path: Path) -> tuple[int, int]:
    """The line range under a heading (``#`` lines inside fences are code, not headings)."""
    fenced = False
    start: int | None = None
    level = 0
    for n, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or not line.startswith("#"):
            continue
        depth = len(line) - len(line.lstrip("#"))
        if start is not None and depth <= level:
            return start, n
        if start is None and line[depth:].strip() == heading:
            start, level = n + 1, depth
    assert start is not None, f"{path.name}: no heading {heading!r}"
    return start, len(lines)
