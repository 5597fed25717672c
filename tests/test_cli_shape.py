"""The CLI parses arguments and renders results (issue 29): its modules stay
small, and it reaches Redis only through the middleware's ``Connections``
and the operator service, never by building clients or sending commands."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / "dramatiq_cron_middleware" / "ops" / "cli"
sys.path.insert(0, str(ROOT / "scripts"))

from code_size import code_lines  # noqa: E402

#: What the CLI may use of redis-py: exception types, to translate them.
REDIS_EXCEPTIONS = {"RedisError", "ConnectionError", "TimeoutError"}


def _modules() -> list[Path]:
    assert CLI.is_dir(), "the CLI is the package ops/cli/"
    return sorted(CLI.glob("*.py"))


def test_every_cli_module_is_under_600_code_lines() -> None:
    # Given the CLI's modules, then each holds fewer than 600 code lines
    # (scripts/code_size.py's count), the package's module limit.
    sizes = {path.name: len(code_lines(path.read_text())) for path in _modules()}
    assert {name: n for name, n in sizes.items() if n >= 600} == {}


def test_the_cli_builds_no_redis_client_and_uses_redis_only_for_its_errors() -> None:
    # Given the CLI's source, then it imports no client builder of the store
    # (scheduler_clients, redis.Redis...) and names nothing of redis-py but
    # the exception types it translates for people.
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "redis":
                found.append(f"{path.name}: from {node.module} import ...")
            if isinstance(node, ast.ImportFrom) and any(a.name == "scheduler_clients" for a in node.names):
                found.append(f"{path.name}: imports scheduler_clients")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "redis":
                if node.attr not in REDIS_EXCEPTIONS:
                    found.append(f"{path.name}: redis.{node.attr}")
    assert found == []
