"""Every ```python block of README.md and docs/*.md runs, so no example goes stale.

The blocks of one file run in order in one namespace (a later block may use
what an earlier one defined), against a real redis-server started for that
file: ``redis://<host>:6379`` in a block means that server.  Nothing is
handed to a file's blocks: the first one builds what the later ones use (its
``broker`` above all), so every example can be copied into a file as it
stands.  What is there besides is what a reader's machine has: a fresh
global broker without the middleware (so no file sees another's actors) and
an app module ``myapp.tasks`` (for the examples that import an app).

A block that truly cannot run here says so on its first line, visibly::

    # Not run by tests/test_docs.py: needs Flask, which is not a dependency.

Those blocks are counted against ``MARKED`` below, so an example can be left
out only on purpose, never silently (a new file or block is picked up with
no change here).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import dramatiq
import dramatiq.broker
import pytest
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware import CronMiddleware
from tests.support.markdown import python_blocks
from tests.support.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

#: Blocks marked as not run, per file.  Changing a marker means changing
#: this table: a skip is always a decision someone made.
MARKED = {
    "docs/operations.md": 2,  # the Flask mount, the Django URLconf
}

_ANY_PYTHON_FENCE = re.compile(r"^\s*```+\s*(python|py|python3)\b", re.IGNORECASE)
_LOCAL_REDIS = re.compile(r"redis://(?:localhost|127\.0\.0\.1|redis):6379\b")


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
    """Given a fresh redis-server and nothing else in scope, when every
    block of the file runs in order in one namespace, none raises: the
    first block of a file is complete as written (it defines the broker
    the later ones use)."""
    url = f"redis://127.0.0.1:{redis_server.port}"
    namespace: dict[str, object] = {"__name__": f"docs_example_{path.stem}"}
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


# -- the command-line examples ---------------------------------------------
#
# Every ``$ dramatiq-cron ...`` line of a console block is parsed by the real
# argument parser (a documented option that does not exist fails here).  The
# transcripts of README.md and docs/operations.md are then replayed, in
# order, by the real command against a redis-server that requires a
# password (no workers run): a documented error must be said word for word
# with its exit status, and a table's header must be the command's own.
# What needs a leader (status) is only parsed.

_CONSOLE = re.compile(r"^```console\s*$")
_EXIT = re.compile(r"^# exit status (\d+)$")
_OPTIONAL = re.compile(r"(?<!['\"])\[[^\]]*\](?!['\"])")
_DOC_PORT = re.compile(r"127\.0\.0\.1:(6399|35113)\b")
_PASSWORD = "s3cr/t"


@dataclass(frozen=True)
class Command:
    path: Path
    line: int
    text: str  # without the "$ "
    output: list[str]
    status: int | None


def commands(path: Path) -> list[Command]:
    """The ``$ dramatiq-cron`` lines of a file's console blocks, each with
    the lines documented after it and its ``# exit status``, if given."""
    lines = path.read_text().splitlines()
    out: list[Command] = []
    inside = False
    for n, line in enumerate(lines, 1):
        if _CONSOLE.match(line):
            inside = True
            continue
        if inside and line.strip() == "```":
            inside = False
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            out.append(Command(path, n, line[2:], [], None))
        elif out and out[-1].status is None and out[-1].path == path and out[-1].line < n:
            exit_status = _EXIT.match(line)
            if exit_status:
                out[-1] = dataclasses.replace(out[-1], status=int(exit_status[1]))
            else:
                out[-1].output.append(line)
    return [c for c in out if "dramatiq-cron " in c.text.split("#", 1)[0]]


def _words(command: Command) -> tuple[dict[str, str], list[str]]:
    """The environment assignments and the words of a command line, with
    ``[optional]`` placeholders and the trailing comment taken out."""
    words = shlex.split(_OPTIONAL.sub("", command.text), comments=True)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words and words[0] == "dramatiq-cron", f"{_rel(command.path)}:{command.line}: {command.text}"
    return env, words[1:]


_DOCUMENTED = [c for path in FILES for c in commands(path)]


def test_the_docs_show_the_commands_examples() -> None:
    assert len(_DOCUMENTED) >= 40
    assert {c.path.name for c in _DOCUMENTED} >= {"README.md", "operations.md"}


@pytest.mark.parametrize("command", _DOCUMENTED, ids=lambda c: f"{_rel(c.path)}:{c.line}")
def test_every_documented_command_line_is_one_the_command_accepts(command: Command) -> None:
    from dramatiq_cron_middleware.ops.cli import parser

    _, words = _words(command)
    try:
        parser().parse_args(words)
    except SystemExit as exc:
        raise AssertionError(f"{_rel(command.path)}:{command.line}: not accepted: {command.text}") from exc


@pytest.mark.parametrize("name", ["README.md", "docs/operations.md"])
def test_a_transcript_replayed_says_what_the_docs_show(name: str) -> None:
    """Given the app of the transcripts (tests.apps.cronapp) on a Redis that
    requires a password, When the documented commands run in order, Then
    each documented error is said word for word with its exit status, and
    each table starts with the documented header."""
    from tests.support.command import dramatiq_cron

    server = RedisServer().start()
    try:
        server.client().config_set("requirepass", _PASSWORD)
        good = f"redis://:{quote(_PASSWORD, safe='')}@127.0.0.1:{server.port}/0"
        down = free_port()
        base = {
            "DRAMATIQ_CRON_REDIS_URL": good,
            "CRON_APP_BROKER": f"redis://:{quote(_PASSWORD, safe='')}@127.0.0.1:{server.port}/1",
            "CRON_APP_CRON": "*/2 * * * * *",
        }
        replayed = 0
        for command in [c for c in _DOCUMENTED if _rel(c.path) == name and "tests.apps.cronapp" in c.text]:
            env, words = _words(command)
            documents_an_error = bool(command.output) and command.output[0].startswith("dramatiq-cron: error:")
            if words[0] in ("status", "web") and not documents_an_error:
                continue  # needs a leader (status) or serves (web)
            redis_down = command.text.rstrip().endswith("# Redis down")
            port = str(down if redis_down else server.port)
            env = {k: _DOC_PORT.sub(f"127.0.0.1:{port}", v) for k, v in env.items()}
            if redis_down:
                env["DRAMATIQ_CRON_REDIS_URL"] = f"redis://127.0.0.1:{down}/0"
            result = dramatiq_cron({**base, **env}, *words)
            where = f"{_rel(command.path)}:{command.line}: {command.text}"
            if command.status is not None:
                assert result.returncode == command.status, (where, result.stdout, result.stderr)
            expected = [_DOC_PORT.sub(f"127.0.0.1:{port}", line) for line in command.output]
            if expected and expected[0].startswith("dramatiq-cron: error:"):
                assert result.stderr.splitlines() == expected[:1], where
            elif expected and expected[0].split()[:1] in (["ACTOR"], ["WHEN"]):
                assert result.returncode == 0, (where, result.stderr)
                assert result.stdout.splitlines()[0].split() == expected[0].split(), where
            else:
                assert result.returncode == 0, (where, result.stderr)
            replayed += 1
        assert replayed >= 4
    finally:
        server.close()


# -- links -------------------------------------------------------------------

_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    fenced = False
    found = {"top"}
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(_anchor(line.lstrip("#")))
    return found


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_every_relative_link_reaches_a_file_and_its_heading(path: Path) -> None:
    """Given the README and the docs, every link to a file of the repository
    reaches an existing file, and a link with ``#anchor`` into a markdown
    file reaches one of its headings (moving a section cannot leave a link behind)."""
    broken = []
    for match in _LINK.finditer(path.read_text()):
        target = match["target"]
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        goal = (path.parent / file_part).resolve() if file_part else path
        if not goal.exists():
            broken.append(target)
        elif anchor and goal.suffix == ".md" and anchor not in _anchors(goal):
            broken.append(target)
    assert not broken, f"{_rel(path)}: broken links {broken}"
