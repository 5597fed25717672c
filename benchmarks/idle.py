"""The idle leader's Redis round trips per second (issue 32: at most 0.2/s
at the default lease, monitoring included), and its two followers'.

    .venv/bin/python -m benchmarks.idle [--seconds 31] [--ttl 15000]

A real ``dramatiq`` process leads 100 yearly schedules (nothing falls due)
on its own redis-server, beside a second process with two followers;
the commands each process sends are counted with MONITOR over the window
(``benchmarks.ours.redis_cost``), the leader's by name too.  Prints one
JSON object; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, cast

from benchmarks import measure, ours
from tests.support.redis_server import RedisServer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=31.0, help="the counted window (default 31)")
    parser.add_argument("--ttl", type=int, default=15_000, help="the lease (default 15000, the default lease)")
    args = parser.parse_args()
    monitors: list[measure.Monitor] = []

    class Counting(measure.Monitor):  # the window's commands, by name too
        def __init__(self, port: int) -> None:
            super().__init__(port)
            monitors.append(self)

    ours.Monitor = Counting  # type: ignore[misc]
    seen: dict[str, Any] = {}  # the window's socket owners and the leader then

    def owners(port: int) -> dict[int, int]:
        seen["owners"] = measure.socket_owners(port)
        return dict(seen["owners"])

    def leader_pid(stage: ours.Stage) -> int | None:
        seen["leader"] = leader_pid_of(stage)
        return cast("int | None", seen["leader"])

    leader_pid_of = ours._leader_pid
    ours.socket_owners = owners
    ours._leader_pid = leader_pid
    with RedisServer() as lease, RedisServer() as broker:
        stage = ours.Stage(lease, broker)
        result = ours.redis_cost(stage, ttl=args.ttl, shape="idle", schedules=100, seconds=args.seconds)
    by_name: dict[str, int] = {}
    leader_by_name: dict[str, int] = {}
    for (client, name), n in monitors[0].counts.items():
        if client != "lua":  # a script's own commands are in its EVALSHA
            by_name[name] = by_name.get(name, 0) + n
            if seen.get("owners", {}).get(int(client.rsplit(":", 1)[-1])) == seen.get("leader"):
                leader_by_name[name] = leader_by_name.get(name, 0) + n
    result["all_processes_by_command_per_s"] = {
        name: round(n / monitors[0].elapsed, 3) for name, n in sorted(by_name.items())
    }
    result["leader_commands_in_window"] = dict(sorted(leader_by_name.items()))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
