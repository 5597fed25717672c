"""A private rabbitmq-server on free loopback ports, started and stopped by tests.

The node gets its own data and log directories, node name, Erlang cookie
(``HOME``) and its own ``epmd`` on a free port (``ERL_EPMD_PORT``), so it
neither touches nor collides with a system RabbitMQ (its epmd on 4369, its
node ``rabbit@host``, /var/lib/rabbitmq).  No plugin is enabled (no
management UI: it would double the start-up time).  Both processes are
children of the test and are stopped by pid.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.components import missing
from tests.support.instances import stop_group
from tests.support.lifecycle import Lifecycle
from tests.support.redis_server import free_port

__all__ = ["RabbitmqServer", "rabbitmq_server_script"]

#: Debian's /usr/sbin/rabbitmq-server is a wrapper that changes to
#: /var/lib/rabbitmq and, as root, switches to the rabbitmq user; the script
#: it runs takes its whole configuration from the environment.
_SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmq-server"
_INSTALL = "apt-get install rabbitmq-server"


def rabbitmq_server_script() -> tuple[str, str]:
    """Paths of the rabbitmq-server start script and of ``epmd``; skips
    the test locally (fails it in CI) when either is missing."""
    script = _SCRIPT if os.access(_SCRIPT, os.X_OK) else shutil.which("rabbitmq-server")
    if script is None:
        missing(f"'rabbitmq-server' is not installed ({_INSTALL})")
        raise AssertionError("unreachable")  # pragma: no cover
    epmd = shutil.which("epmd") or next(iter(sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd"))), None)
    if epmd is None:
        missing(f"Erlang's 'epmd' is not installed ({_INSTALL})")
        raise AssertionError("unreachable")  # pragma: no cover
    return script, str(epmd)


def _accepts_amqp(port: int) -> bool:
    """Whether an AMQP 0-9-1 server answers the protocol header on ``port``
    with ``Connection.Start`` (a method frame), not just accepts TCP."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"AMQP\x00\x00\x09\x01")
            head = s.recv(7)
    except OSError:
        return False
    return len(head) == 7 and head[0] == 1


class RabbitmqServer(Lifecycle):
    """One rabbitmq-server node (and its epmd) owned by a test.

    Parameters:
      heartbeat: The heartbeat timeout, in seconds, the server proposes
        (clients may ask for another in their URL: ``?heartbeat=N``).
    """

    def __init__(self, *, heartbeat: int = 60) -> None:
        self.script, self.epmd_binary = rabbitmq_server_script()
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.heartbeat = heartbeat
        self.dir = tempfile.mkdtemp(prefix="cron-rabbitmq-")
        self.nodename = f"cron-test-{self.port}@localhost"
        self.proc: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.dir, "stdout.log")
        #: Seconds from spawning the node to its first AMQP handshake.
        self.startup_seconds = 0.0

    @property
    def url(self) -> str:
        """``amqp://guest:guest@127.0.0.1:<port>/%2F`` (guest may log in
        over loopback only, which is where the node listens)."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def _env(self) -> dict[str, str]:
        d = Path(self.dir)
        for sub in ("home", "mnesia", "log"):
            (d / sub).mkdir(exist_ok=True)
        (d / "rabbitmq.conf").write_text(
            f"heartbeat = {self.heartbeat}\n"
            "log.console = false\n"
            "log.file.level = info\n"
            # No disk or memory alarm from a busy shared CI machine.
            "disk_free_limit.absolute = 1MB\n"
            "vm_memory_high_watermark.relative = 0.9\n"
        )
        (d / "enabled_plugins").write_text("[].\n")
        (d / "rabbitmq-env.conf").write_text("")
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/lib/rabbitmq/bin",
            "LANG": "C.UTF-8",
            "HOME": str(d / "home"),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(d / "rabbitmq.pid"),
        }

    def start(self, timeout: float = 180.0) -> RabbitmqServer:
        """Start epmd and the node; wait until the node completes an AMQP
        protocol handshake (or fail with the log's tail)."""
        env = self._env()
        started = time.monotonic()
        # Our own epmd, in the foreground, so it is our child and we stop it;
        # Erlang finds it through ERL_EPMD_PORT and starts no other.
        self.epmd = subprocess.Popen(
            [self.epmd_binary, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with open(self.log_path, "ab") as log:
            # Its own session: the script runs erl as its child, and teardown
            # can reach both through the group the script leads.
            self.proc = subprocess.Popen(
                [self.script],
                cwd=self.dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = started + timeout
        while not _accepts_amqp(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rabbitmq-server did not accept AMQP within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        self.startup_seconds = time.monotonic() - started
        return self

    def node_log(self) -> str:
        """The node's own log (connections accepted and closed, and why)."""
        path = Path(self.dir, "log", f"{self.nodename}.log")
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        """The end of the node's stdout and log files, for failure messages."""
        out = []
        for path in [Path(self.log_path), *sorted(Path(self.dir, "log").glob("*.log"))]:
            try:
                out += [f"== {path.name}", *path.read_text(errors="replace").splitlines()[-lines:]]
            except OSError:
                pass
        return "\n".join(out)

    def delete_queues(self, *names: str) -> None:
        """Delete these queues and the messages they hold (none may be missing)."""
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            channel = connection.channel()
            for name in names:
                channel.queue_delete(name)
        finally:
            connection.close()

    def stop(self) -> None:
        """Stop the node (SIGTERM to the script, which stops erl; SIGKILL to
        its process group if that takes too long), then its epmd."""
        if self.proc is not None:
            # The group the script leads holds erl and its helpers
            # (erl_child_setup, inet_gethost).
            stop_group(self.proc, grace=15)
            self.proc = None
        if self.epmd is not None:
            if self.epmd.poll() is None:
                self.epmd.kill()
            self.epmd.wait(10)
            self.epmd = None

    def close(self) -> None:
        """Stop everything and remove the node's directory."""
        self.stop()
        if os.environ.get("CRON_KEEP_LOGS") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)
