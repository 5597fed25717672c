"""A TCP proxy between the workers and Redis that the tests can degrade.

It listens on a loopback port and forwards every connection to one loopback
upstream.  A test can add latency (each chunk is delivered ``delay_ms``
after it was read, so throughput is kept and only latency grows), blackhole
traffic (nothing is forwarded and new connections hang, as in a network
partition; what was sent meanwhile is delivered late once it lifts, as TCP
retransmission would), hold only replication (the connections a Redis
replica opened to replicate: what the master streams waits in the proxy
while clients are served), hold every reply from the moment a request
carrying a given marker goes through (a command that runs, then a server
that answers nobody), or reset connections (RST on every open connection,
and optionally on every new one).

It is bounded: at most ``max_connections`` at once, four daemon threads
each, and it stops by itself after ``max_lifetime`` seconds so a crashed
test cannot leave it running.
"""

from __future__ import annotations

import collections
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

__all__ = ["Proxy"]

_CHUNK = 65536


@dataclass
class _Pipe:
    """One direction of one proxied connection: chunks read, waiting to be
    written no earlier than their release time."""

    source: socket.socket
    target: socket.socket
    #: Server to client: the direction ``set_reply_delay`` holds back.
    replies: bool = False
    queue: collections.deque[tuple[float, bytes]] = field(default_factory=collections.deque)
    ready: threading.Condition = field(default_factory=threading.Condition)
    done: bool = False
    #: Shared by both directions of a connection: a replica's link
    #: (it sent ``REPLCONF``/``PSYNC``).
    link: dict[str, bool] = field(default_factory=dict)


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<upstream_port>``.

    Parameters:
      upstream_port: The loopback port of the real server.
      max_connections: New connections beyond this are refused (closed).
      max_lifetime: Seconds after which the proxy stops by itself.
    """

    def __init__(self, upstream_port: int, *, max_connections: int = 64, max_lifetime: float = 3600.0) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.max_connections = max_connections
        self.delay_ms = 0
        self.reply_delay_ms = 0
        self.reset_new = False
        self._flowing = threading.Event()
        self._flowing.set()
        self._replicating = threading.Event()
        self._replicating.set()
        #: While partitioned: the pids whose connections still flow.
        self._kept_pids: set[int] | None = None
        #: A request carrying it holds every reply from then on.
        self._reply_trigger: bytes | None = None
        self._replies_held = threading.Event()
        self._links: dict[socket.socket, dict[str, bool]] = {}
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._stopped = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        # A timeout lets the accept loop notice stop() and the lifetime.
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._expires = time.monotonic() + max_lifetime
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<proxy port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Proxy:
        """Start accepting connections."""
        self._acceptor.start()
        return self

    # -- faults -------------------------------------------------------------

    def set_delay(self, delay_ms: int) -> None:
        """Deliver every chunk ``delay_ms`` after it was read (0: none)."""
        self.delay_ms = delay_ms

    def set_reply_delay(self, delay_ms: int) -> None:
        """Deliver replies (server to client) ``delay_ms`` late, requests on
        time: every command runs at once, but a caller with a shorter
        timeout never reads its reply (0: none)."""
        self.reply_delay_ms = delay_ms

    def hold_replies_after(self, marker: bytes) -> None:
        """From the first request that carries ``marker`` on (that request
        included, since the hold begins before it is forwarded), hold every
        reply on every connection, new ones too, until :meth:`heal`: the
        command runs, but its caller, and everyone after, waits for an
        answer that never comes."""
        self._reply_trigger = marker

    def blackhole(self) -> None:
        """Stop forwarding anything, in both directions, on every connection."""
        self._flowing.clear()

    def retarget(self, upstream_port: int) -> None:
        """Forward new connections to another loopback port from now on (a
        virtual address moving to a promoted replica); open ones stay."""
        self.upstream = ("127.0.0.1", upstream_port)

    def hold_replication(self) -> None:
        """Stop forwarding on replicas' links only (replication lag that
        grows until :meth:`heal`); clients keep being served."""
        self._replicating.clear()

    def partition(self, *, keep_pids: set[int]) -> None:
        """A network partition with the processes ``keep_pids`` on the
        upstream's side: every other connection (open or new) is held, as
        :meth:`blackhole` holds them; those of ``keep_pids`` (found through
        /proc, Linux) still flow."""
        self.apply_partition(self.plan_partition(keep_pids=keep_pids))

    def plan_partition(self, *, keep_pids: set[int]) -> tuple[set[int], dict[socket.socket, bool]]:
        """What :meth:`partition` would hold, worked out (the slow part:
        /proc) but not applied yet: several proxies cut at one instant
        by planning each, then applying each."""
        with self._lock:
            clients = [client for client, _ in self._conns]
        return set(keep_pids), {client: _opened_by(client, set(keep_pids)) for client in clients}

    def apply_partition(self, plan: tuple[set[int], dict[socket.socket, bool]]) -> None:
        """Apply a plan of :meth:`plan_partition` (connections opened since
        are judged now)."""
        kept_pids, kept = plan
        with self._lock:
            for client, _ in self._conns:
                link = self._links.get(client)
                if link is not None:
                    link["kept"] = kept[client] if client in kept else _opened_by(client, kept_pids)
            self._kept_pids = kept_pids

    def heal(self) -> None:
        """Undo blackhole, partition, held replication, delay and reset-on-connect."""
        self._kept_pids = None
        self.delay_ms = 0
        self.reply_delay_ms = 0
        self._reply_trigger = None
        self._replies_held.clear()
        self.reset_new = False
        self._flowing.set()
        self._replicating.set()

    def reset_all(self) -> int:
        """Send RST on every open connection, both sides; returns how many."""
        with self._lock:
            conns, self._conns = self._conns, []
        for client, upstream in conns:
            _reset(client)
            _reset(upstream)
        return len(conns)

    @property
    def connections(self) -> int:
        """Open proxied connections."""
        with self._lock:
            return len(self._conns)

    # -- life cycle ---------------------------------------------------------

    def stop(self) -> None:
        """Stop accepting, close every connection, release the threads."""
        self._stopped.set()
        self._flowing.set()
        self._replicating.set()
        self.reset_all()
        try:
            self._listener.close()
        except OSError:
            pass
        if self._acceptor.is_alive() and threading.current_thread() is not self._acceptor:
            self._acceptor.join(2)

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            if time.monotonic() > self._expires:
                self.stop()
                return
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self.reset_new or self.connections >= self.max_connections:
                _reset(client)
                continue
            threading.Thread(target=self._open, args=(client,), name=f"proxy-{self.port}-open", daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        # A blackhole holds new connections too: the client's connect
        # succeeds (the listener accepted) but nothing ever answers.
        self._flowing.wait()
        if self._stopped.is_set():
            _reset(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        link: dict[str, bool] = {}
        with self._lock:
            self._conns.append((client, upstream))
            self._links[client] = link
            if self._kept_pids is not None:
                link["kept"] = _opened_by(client, self._kept_pids)
        for pipe in (_Pipe(client, upstream, link=link), _Pipe(upstream, client, replies=True, link=link)):
            threading.Thread(target=self._read, args=(pipe,), daemon=True).start()
            threading.Thread(target=self._write, args=(pipe,), daemon=True).start()

    def _read(self, pipe: _Pipe) -> None:
        try:
            while True:
                data = pipe.source.recv(_CHUNK)
                if not data:
                    break
                if not pipe.replies and (b"REPLCONF" in data.upper() or b"PSYNC" in data.upper()):
                    pipe.link["replica"] = True
                if not pipe.replies and self._reply_trigger is not None and self._reply_trigger in data:
                    self._replies_held.set()
                with pipe.ready:
                    delay = self.delay_ms + (self.reply_delay_ms if pipe.replies else 0)
                    pipe.queue.append((time.monotonic() + delay / 1000, data))
                    pipe.ready.notify()
        except OSError:
            pass
        with pipe.ready:
            pipe.done = True
            pipe.ready.notify()

    def _write(self, pipe: _Pipe) -> None:
        try:
            while True:
                with pipe.ready:
                    while not pipe.queue and not pipe.done:
                        pipe.ready.wait(1.0)
                    if not pipe.queue:
                        break
                    release, data = pipe.queue.popleft()
                pause = release - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                self._flowing.wait()
                while self._held(pipe) and not self._stopped.wait(0.05):
                    pass
                if self._stopped.is_set():
                    break
                pipe.target.sendall(data)
        except OSError:
            pass
        # The peer closed (or the connection broke): pass the end on.
        for sock in (pipe.source, pipe.target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._forget(pipe)

    def _held(self, pipe: _Pipe) -> bool:
        """Whether a partition or held replication holds this connection."""
        if pipe.link.get("replica") and not self._replicating.is_set():
            return True
        if pipe.replies and self._replies_held.is_set():
            return True
        return self._kept_pids is not None and not pipe.link.get("kept")

    def _forget(self, pipe: _Pipe) -> None:
        with self._lock:
            self._conns = [c for c in self._conns if pipe.source not in c]
            self._links.pop(pipe.source, None)
        for sock in (pipe.source, pipe.target):
            try:
                sock.close()
            except OSError:
                pass


def _opened_by(client: socket.socket, pids: set[int]) -> bool:
    """Whether the peer of an accepted loopback connection is a socket of
    one of ``pids`` (its inode in /proc/net/tcp, among their fds)."""
    try:
        port = client.getpeername()[1]
        ours = client.getsockname()[1]
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        return False
    inodes = {row[9] for row in rows if int(row[1].split(":")[1], 16) == port and int(row[2].split(":")[1], 16) == ours}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return True
    return False


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0, which sends RST instead of FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
