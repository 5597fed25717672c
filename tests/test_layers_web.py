"""The dashboard depends only on the public API below it (issue 29): the
operator service, the status and its values, the schedule values, the
errors and times.  Nothing in ``web/`` imports the store, the operator
tools (``ops/``), the leader or the wiring, builds a Redis client, or uses
a private name of another module.  Imports made for the type checker only
(under ``if TYPE_CHECKING:``) are annotations, not dependencies."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

WEB = Path(__file__).resolve().parent.parent / "dramatiq_cron_middleware" / "web"
PACKAGE = "dramatiq_cron_middleware"

#: What ``web/`` may import of the package (a module, or a package and all below it).
ALLOWED = (
    "service",  # the operator service: every action and read
    "status",  # the Status value and its reads
    "targets",  # what an operator names, the service's arguments
    "audit",  # the actions' results and their words in the history
    "middleware",  # find_middleware: the app's scheduler, and its service
    "schedules",  # the schedule values
    "monitoring.records",  # the run and health values a Status carries
    "errors",
    "times",
    "web",
)


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import but those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _absolute(node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = [PACKAGE, "web"][: 3 - node.level]  # web/x.py: ``.`` is the web package, ``..`` the package
    return ".".join([*base, *(node.module.split(".") if node.module else [])])


def _ours(module: str) -> str | None:
    """The module inside the package (``store.codes``), None for another distribution's."""
    if module == PACKAGE:
        return ""
    return module[len(PACKAGE) + 1 :] if module.startswith(PACKAGE + ".") else None


def _allowed(inner: str) -> bool:
    return any(inner == a or inner.startswith(a + ".") for a in ALLOWED)


def test_web_imports_only_the_service_the_status_and_the_values_below_it() -> None:
    wrong: list[str] = []
    for path in sorted(WEB.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in _runtime_imports(tree):
            if isinstance(node, ast.ImportFrom):
                module = _absolute(node)
                inner = _ours(module)
                if inner is None:
                    continue
                if inner == "":  # ``from .. import x``: a module of the package, each checked
                    names = [a.name for a in node.names]
                    wrong += [f"{path.name}: {module}.{n}" for n in names if not _allowed(n)]
                    continue
                if not _allowed(inner):
                    wrong.append(f"{path.name}: from {module} import ...")
                if inner.split(".")[0] != "web":
                    wrong += [f"{path.name}: private {module}.{a.name}" for a in node.names if a.name.startswith("_")]
            else:
                for alias in node.names:
                    inner = _ours(alias.name)
                    if inner is not None and not _allowed(inner):
                        wrong.append(f"{path.name}: import {alias.name}")
    assert wrong == []


def test_web_builds_no_redis_client_and_uses_only_redis_errors() -> None:
    """``redis`` is imported for its exceptions only: the service's store
    holds the one client, built by the middleware."""
    used: list[str] = []
    for path in sorted(WEB.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "redis":
                if not node.attr.endswith("Error"):
                    used.append(f"{path.name}: redis.{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "redis":
                used.append(f"{path.name}: from {node.module} import ...")
            if isinstance(node, ast.Name) and node.id in ("scheduler_clients", "Connections", "HealthReads"):
                used.append(f"{path.name}: {node.id}")
    assert used == []


def test_a_redis_that_refuses_the_dashboards_commands_answers_502_on_every_page(redis_server: Any) -> None:
    """Given a dashboard whose Redis user loses its permissions (an ACL
    change), When any page is asked for, Then it answers 502 saying Redis
    refused, never a 500: the service's translated refusal is a page too."""
    pytest.importorskip("jinja2")
    from tests.support.dashboards import dashboard_app

    browser = dashboard_app(redis_server).dashboard()
    assert browser.get("/cron/schedules").status == 200
    admin = redis_server.client()
    admin.execute_command("ACL", "SETUSER", "admin", "on", ">pw", "~*", "&*", "+@all")
    admin.execute_command("ACL", "SETUSER", "default", "-@all", "+auth", "+hello", "+client")
    for path in ("/cron/schedules", "/cron/next", "/cron/schedule?id=every_second"):
        page = browser.get(path)
        assert page.status == 502, (path, page.status, page.text[:300])
        assert "refused the request" in page.text and "Traceback" not in page.text
