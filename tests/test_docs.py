"""Every ```python block of README.md and docs/*.md runs, so no example goes stale.

The blocks of one file run in order in one namespace (a later block may use
what an earlier one defined), against a real redis-server started for that
file: ``redis://<host>:6379`` in a block means that server.  Each file starts
with a fresh ``RedisBroker`` named ``broker`` (your app's broker, which the
examples take for granted) and a module ``myapp.tasks`` holding it (your
app).

A block that truly cannot run here says so on its first line, visibly::

    # Not run by tests/test_docs.py: needs Flask, which is not a dependency.

Those blocks are counted against ``MARKED`` below, so an example can be left
out only on purpose, never silently (a new file or block is picked up with
no change here).
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dramatiq
import dramatiq.broker
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

#: Blocks marked as not run, per file.  Changing a marker means changing
#: this table: a skip is always a decision someone made.
MARKED = {
    "README.md": 2,  # the Flask mount, the Django URLconf
    "docs/operations.md": 2,  # the Flask mount, the Django URLconf
}

_OPEN = re.compile(r"^(?P<indent> *)```python\s*$")
_ANY_PYTHON_FENCE = re.compile(r"^\s*```+\s*(python|py|python3)\b", re.IGNORECASE)
_MARKER = re.compile(r"^# Not run by tests/test_docs\.py: (?P<reason>\S.{10,})$")
_LOCAL_REDIS = re.compile(r"redis://(?:localhost|127\.0\.0\.1|redis):6379\b")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the first code line
    source: str
    skip_reason: str | None


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a markdown file, in order."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{path.name}:{i + 1}: a ```python block is never closed"
        # A block inside a list item is indented with it.
        body = [line[len(opening["indent"]) :] for line in lines[start:end]]
        marker = _MARKER.match(body[0]) if body else None
        blocks.append(Block(path, start + 1, "\n".join(body) + "\n", marker["reason"] if marker else None))
        i = end + 1
    return blocks


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _app_module(url: str) -> types.ModuleType:
    """``myapp.tasks``: an app's tasks module, its broker carrying the
    middleware and one cron actor."""
    tasks = types.ModuleType("myapp.tasks")
    tasks.broker = RedisBroker(url=url)  # type: ignore[attr-defined]
    tasks.broker.add_middleware(CronMiddleware())  # type: ignore[attr-defined]
    tasks.cleanup = dramatiq.actor(lambda: None, actor_name="cleanup", broker=tasks.broker, cron="*/5 * * * *")  # type: ignore[attr-defined]
    return tasks


@pytest.fixture
def fresh_broker(redis_server: RedisServer) -> Iterator[RedisBroker]:
    """A RedisBroker on the test's server, set as dramatiq's global broker,
    and the module ``myapp.tasks`` (see ``_app_module``); the previous global
    broker is put back after."""
    previous = dramatiq.broker.global_broker
    broker = RedisBroker(url=redis_server.url)
    dramatiq.set_broker(broker)
    myapp = types.ModuleType("myapp")
    tasks = _app_module(redis_server.url)
    myapp.tasks = tasks  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("myapp", "myapp.tasks")}
    sys.modules.update({"myapp": myapp, "myapp.tasks": tasks})
    try:
        yield broker
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        broker.close()
        tasks.broker.close()  # type: ignore[attr-defined]
        dramatiq.broker.global_broker = previous


def test_every_python_fence_is_found_and_only_the_agreed_blocks_are_marked() -> None:
    """Given README.md and docs/*.md, every fence that opens Python code is
    one the runner reads (no ```py or indented variant slips past), and the
    blocks marked as not run are exactly those agreed in MARKED."""
    marked: dict[str, int] = {}
    for path in FILES:
        fences = [n for n, line in enumerate(path.read_text().splitlines(), 1) if _ANY_PYTHON_FENCE.match(line)]
        blocks = python_blocks(path)
        assert [b.line - 1 for b in blocks] == fences, f"{_rel(path)}: fences the runner does not read: {fences}"
        for block in blocks:
            assert not block.source.startswith("# Not run") or block.skip_reason, (
                f"{_rel(path)}:{block.line}: a 'Not run' marker must read '# Not run by tests/test_docs.py: <why>'"
            )
        count = sum(b.skip_reason is not None for b in blocks)
        if count:
            marked[_rel(path)] = count
    assert marked == MARKED
    assert sum(len(python_blocks(p)) for p in FILES) - sum(MARKED.values()) >= 15


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_the_python_examples_of_a_file_run_in_order(
    path: Path, redis_server: RedisServer, fresh_broker: RedisBroker
) -> None:
    """Given a fresh broker and redis-server, when every block of the file
    runs in order in one namespace, none raises."""
    url = f"redis://127.0.0.1:{redis_server.port}"
    namespace: dict[str, object] = {"__name__": f"docs_example_{path.stem}", "broker": fresh_broker}
    ran = 0
    for block in python_blocks(path):
        if block.skip_reason is not None:
            continue
        source = "\n" * (block.line - 1) + _LOCAL_REDIS.sub(url, block.source)
        code = compile(source, str(path), "exec")  # a traceback points at the markdown line
        try:
            exec(code, namespace)
        except Exception as exc:
            raise AssertionError(f"{_rel(path)}:{block.line}: the example raised {exc!r}") from exc
        ran += 1
    assert ran == len(python_blocks(path)) - MARKED.get(_rel(path), 0)
