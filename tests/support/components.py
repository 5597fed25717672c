"""Optional components of the integration tests (gevent, Django, openssl,
rabbitmq-server...): skipped locally with a clear reason when missing,
a failure in CI (``CI=true``), where ``.ci/run`` must have installed them."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

__all__ = ["require_binary", "require_module", "missing"]


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
