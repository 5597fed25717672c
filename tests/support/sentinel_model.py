"""A model of a Sentinel deployment under a two-way network partition,
with the real leader code on it.

Nodes: a master ``M``, replicas ``R1`` and ``R2`` (each a
:class:`MemoryServer`), sentinels ``S1``-``S3`` (quorum 2) and two
candidates ``A`` and ``B``: each the real :class:`LeaderThread`, turned by
hand on a fake clock, on an :class:`InMemoryStore` whose server is a
:class:`_Route`, the candidate's connection as redis-py's Sentinel client
makes it (the master some reachable sentinel names up; ``MasterChanged``
on a move; a timeout across the partition; ``READONLY`` on a replica).
Its durable writes are judged by the product's own rule
(:class:`~dramatiq_cron_middleware.store.durability.Durability` with a
:class:`SentinelQuorum` over the model's sentinels).

What the model keeps of Redis and Sentinel (the parts a partition's
outcome depends on):

- a replica that reaches the master it follows holds exactly the
  master's data (replication is instant within a side; a resync after a
  move replaces the replica's data, as a full resync does); ``WAIT``'s
  answer is how many replicas reach and follow the master;
- a sentinel marks its master subjectively down after ``down_after_ms``
  without reaching it; the sentinels of one side fail over when at least
  two of them (the quorum, and a majority of three for the election) see it
  down, ``failover_ms`` later, promoting the replica of their side that
  replicated last (the greatest offset), reconfiguring their side's other
  replicas to it;
- sentinels that reach each other share the newest configuration; a data
  node whose role disagrees with the newest configuration a sentinel that
  reaches it holds is converted (to a replica of the named master)
  ``convert_ms`` after that sentinel first saw it so (Sentinel waits four
  publish periods, 8 s, plus an INFO period).

Time moves in ``step_ms`` steps; every candidate turns once per step.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
from collections import Counter
from datetime import datetime
from typing import Any

import dramatiq
import redis
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import Schedule
from dramatiq_cron_middleware.leader.thread import LeaderThread
from dramatiq_cron_middleware.schedules.schedule import bind_schedule
from dramatiq_cron_middleware.store.boundary import Boundary, BrokerBoundary
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.connection import MasterChanged
from dramatiq_cron_middleware.store.durability import Durability, SentinelQuorum
from dramatiq_cron_middleware.store.in_memory import InMemoryStore, MemoryServer
from dramatiq_cron_middleware.store.lease import Candidate
from dramatiq_cron_middleware.store.timing import Timing

__all__ = ["ALL_REPLICAS", "DEFAULT", "NODES", "REPLICA_ALONE", "Outcome", "Rule", "World", "partitions", "table"]

#: Every node of the layout, in the order layouts are written.
NODES = ("A", "B", "M", "R1", "R2", "S1", "S2", "S3")
DATA = ("M", "R1", "R2")
SENTINELS = ("S1", "S2", "S3")
CLIENTS = ("A", "B")
SERVICE = "cronmaster"
START_MS = 1_800_000_000_000
ACTOR = "model_tick"

# What a MemoryServer holds as data (replicated), as opposed to its wiring.
_WIRING = {"now_ms", "wait", "connections", "replicas_acking", "address", "_connections"}


def _copy(value: Any) -> Any:
    """A copy of a server's value sharing only what is immutable (strings,
    numbers, tuples, frozen records): a replica's own data."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return list(value)  # the history, the run events, the alerts: of immutable records
    if isinstance(value, set):
        return set(value)
    if isinstance(value, (str, int, float, tuple, type(None))) or _frozen(value):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _copy(getattr(value, f.name)) for f in dataclasses.fields(value)})
    return copy.deepcopy(value)


def _frozen(value: Any) -> bool:
    params = getattr(value, "__dataclass_params__", None)
    return bool(params is not None and params.frozen)


@dataclasses.dataclass(frozen=True)
class Rule:
    """What makes a write durable: ``replicas`` acknowledging (``WAIT``),
    and with ``sentinels`` a majority of the sentinels naming its master."""

    name: str
    replicas: int
    sentinels: bool


#: The product's default on Sentinel (durability.py).
DEFAULT = Rule("WAIT 1 + sentinel majority", replicas=1, sentinels=True)
#: The rule before issue 28.
REPLICA_ALONE = Rule("WAIT 1", replicas=1, sentinels=False)
#: ``replicas=2``: every replica of this layout.
ALL_REPLICAS = Rule("WAIT 2", replicas=2, sentinels=False)


@dataclasses.dataclass
class Outcome:
    """What one partition led to."""

    side_with_m: frozenset[str]
    #: Sides whose candidates enqueued a tick of the cut during the cut
    #: ("M": the master's side, "other").
    fired_during_cut: tuple[str, ...]
    #: (schedule, tick) pairs enqueued more than once.
    doubled: int
    #: Ticks up to the heal never enqueued by the end.
    lost: int
    #: Seconds from the heal until every tick up to the heal was enqueued
    #: (0: none was missing at the heal); None: not within the run.
    caught_up_s: float | None

    def row(self) -> str:
        """One line: layout, who fired during the cut, doubles, losses, catch-up."""
        caught = "never" if self.caught_up_s is None else f"{self.caught_up_s:.1f} s"
        fired = ", ".join(self.fired_during_cut) or "none"
        return f"{self.layout():40} fired: {fired:8} doubled: {self.doubled:3} lost: {self.lost:3} caught up: {caught}"

    def layout(self) -> str:
        """``{A, M, R2, S1} | {B, R1, S2, S3}``."""
        one = [n for n in NODES if n in self.side_with_m]
        other = [n for n in NODES if n not in self.side_with_m]
        return "{" + ", ".join(one) + "} | {" + ", ".join(other) + "}"


def partitions() -> list[frozenset[str]]:
    """The 128 two-way partitions of the eight nodes, each as the side that
    holds ``M`` (the whole set: no partition)."""
    rest = [n for n in NODES if n != "M"]
    out = []
    for bits in itertools.product((0, 1), repeat=len(rest)):
        out.append(frozenset({"M", *(n for n, b in zip(rest, bits, strict=True) if b)}))
    return out


class _Node:
    def __init__(self, name: str, port: int, now_ms: Any) -> None:
        self.name = name
        self.server = MemoryServer(now_ms=now_ms)
        self.server.address = ("127.0.0.1", port)
        self.role = "master" if name == "M" else "replica"
        self.follows: str | None = None if name == "M" else "M"
        self.synced_at = 0
        #: Calls served (any may write), and the (master, its calls, ours)
        #: of the last copy: a copy of what has not changed is skipped.
        self.calls = 0
        self.copied: tuple[str, int, int] | None = None


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name
        self.named = "M"
        self.epoch = 0
        self.down_since: int | None = None
        self.failover_since: int | None = None
        #: Data node -> when this sentinel first saw its role disagree.
        self.mismatch: dict[str, int] = {}


class _SentinelHandle:
    """A candidate's client of one sentinel (``sentinel_master``)."""

    def __init__(self, world: World, client: str, sentinel: _Sentinel) -> None:
        self.world = world
        self.client = client
        self.sentinel = sentinel

    def sentinel_master(self, service_name: str) -> dict[str, Any]:
        if not self.world.reach(self.client, self.sentinel.name):
            raise redis.TimeoutError("Timeout reading from socket (model: partitioned)")
        return self.world.sentinel_state(self.sentinel)


class _Route:
    """A candidate's connection to "the master", as a MemoryServer: every
    attribute is the current target's; each call first checks the path."""

    def __init__(self, world: World, client: str) -> None:
        object.__setattr__(self, "_world", world)
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_target", None)
        object.__setattr__(self, "_reconnect", True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target_server(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target_server(), name, value)

    def _target_server(self) -> MemoryServer:
        target = self._target
        assert target is not None, "a store attribute read outside a call"
        return target.server

    def call(self, operation: str, run: Any) -> object:
        world: World = self._world
        if self._reconnect or self._target is None:
            found = world.discover(self._client)
            previous = self._target
            object.__setattr__(self, "_target", found)
            object.__setattr__(self, "_reconnect", False)
            if previous is not None and previous is not found:
                raise MasterChanged(f"the Redis master moved from {previous.name} to {found.name} (model)")
        target = self._target
        if not world.reach(self._client, target.name):
            object.__setattr__(self, "_reconnect", True)
            raise redis.TimeoutError("Timeout reading from socket (model: partitioned)")
        if target.role != "master":
            object.__setattr__(self, "_reconnect", True)
            raise redis.ReadOnlyError("You can't write against a read only replica. (model)")
        target.calls += 1
        # Replication is instant within a side: what WAIT counts (counted
        # in World.step, as only Sentinel and the cut change it) holds the
        # write.  The data itself is copied at the end of the step: no
        # replica is read or promoted within one.
        return target.server.call(operation, run)


class _Broker(StubBroker):
    """Records (schedule, tick, when, candidate) of every enqueue."""

    def __init__(self, now_ms: Any) -> None:
        super().__init__()
        self.now_ms = now_ms
        self.record: list[tuple[str, int, int, str]] = []
        self.current = ""

    def enqueue(self, message: Any, *, delay: Any = None) -> Any:
        tick = int(datetime.fromisoformat(message.options["cron_tick"]).timestamp() * 1000)
        self.record.append((message.options["cron_schedule"], tick, self.now_ms(), self.current))
        return super().enqueue(message, delay=delay)


class World:
    """One run: the layout before, during and after a partition.

    Parameters:
      rule: What makes a write durable.
      lease_ms: The candidates' ``lock_ttl``.
      down_after_ms, failover_ms, convert_ms: Sentinel's timing (above).
      step_ms: How far time moves per step.
    """

    def __init__(
        self,
        rule: Rule,
        *,
        lease_ms: int = 2000,
        down_after_ms: int = 1000,
        failover_ms: int = 1000,
        convert_ms: int = 9000,
        step_ms: int = 100,
    ) -> None:
        self.ms = START_MS
        self.rule = rule
        self.lease_ms = lease_ms
        self.down_after_ms = down_after_ms
        self.failover_ms = failover_ms
        self.convert_ms = convert_ms
        self.step_ms = step_ms
        #: Node -> side while partitioned; None when whole.
        self.sides: dict[str, int] | None = None
        now = lambda: self.ms  # noqa: E731
        self.nodes = {name: _Node(name, 7000 + i, now) for i, name in enumerate(DATA)}
        self.sentinels = {name: _Sentinel(name) for name in SENTINELS}
        self.broker = _Broker(now)
        dramatiq.actor(lambda: None, actor_name=ACTOR, broker=self.broker)
        self.schedule = bind_schedule(
            ACTOR, "default", Schedule("* * * * * *"), timezone="UTC", catch_up="each", catch_up_window=3_600_000
        )
        self.logger = logging.Logger("sentinel-model")  # outside the hierarchy
        self.logger.addHandler(logging.NullHandler())  # quiet: the outcome is judged, not the log
        self.leaders = {name: self._candidate(name) for name in CLIENTS}

    def _candidate(self, name: str) -> LeaderThread[Any]:
        clock = ServerClock(monotonic=lambda: self.ms / 1000 - 1_000_000, wall=lambda: self.ms / 1000)
        quorum = (
            SentinelQuorum([_SentinelHandle(self, name, s) for s in self.sentinels.values()], service=SERVICE)
            if self.rule.sentinels
            else None
        )
        store = InMemoryStore(
            _Route(self, name),  # type: ignore[arg-type]
            clock=clock,
            ttl_ms=self.lease_ms,
            candidate=Candidate(host=name, pid=0),
            durability=Durability(replicas=self.rule.replicas, sentinels=quorum),
        )
        return LeaderThread(
            store=store,
            boundary=BrokerBoundary(self.broker, Boundary.PLAIN, keys=store.keys, mark_ms=self.lease_ms),
            declared=[self.schedule],
            timing=Timing.for_lease(self.lease_ms),
            logger=self.logger,
            pace=False,
        )

    # -- the network ----------------------------------------------------------

    def reach(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` can talk now."""
        return self.sides is None or self.sides[a] == self.sides[b]

    def discover(self, client: str) -> _Node:
        """redis-py's ``discover_master``: the first reachable sentinel
        that names a master it sees up."""
        for sentinel in self.sentinels.values():
            if not self.reach(client, sentinel.name):
                continue
            state = self.sentinel_state(sentinel)
            if state["is_master"] and not state["is_sdown"] and not state["is_odown"]:
                return self.nodes[sentinel.named]
        raise redis.ConnectionError(f"No master found for {SERVICE!r} (model)")

    def sentinel_state(self, sentinel: _Sentinel) -> dict[str, Any]:
        """What ``SENTINEL MASTER`` answers."""
        node = self.nodes[sentinel.named]
        assert node.server.address is not None
        host, port = node.server.address
        sdown = self._sdown(sentinel)
        peers = [s for s in self.sentinels.values() if self.reach(s.name, sentinel.name)]
        odown = sdown and sum(1 for s in peers if s.named == sentinel.named and self._sdown(s)) >= 2
        return {"ip": host, "port": port, "is_master": True, "is_sdown": sdown, "is_odown": odown,
                "num-other-sentinels": len(self.sentinels) - 1}  # fmt: skip

    def _sdown(self, sentinel: _Sentinel) -> bool:
        return sentinel.down_since is not None and self.ms - sentinel.down_since >= self.down_after_ms

    # -- one step ---------------------------------------------------------------

    def step(self) -> None:
        """Time moves; Sentinel and replication act; every candidate turns;
        the replicas copy what their masters hold after the turns."""
        self.ms += self.step_ms
        self._sentinels()
        self.replicate()
        for name, leader in self.leaders.items():
            self.broker.current = name
            leader.step()
        self.replicate()

    def _sentinels(self) -> None:
        # Configurations spread between sentinels that reach each other.
        for s, t in itertools.permutations(self.sentinels.values(), 2):
            if self.reach(s.name, t.name) and t.epoch > s.epoch:
                s.named, s.epoch, s.down_since, s.failover_since = t.named, t.epoch, None, None
        for s in self.sentinels.values():
            if self.reach(s.name, s.named) and self.nodes[s.named].role == "master":
                s.down_since = None
            elif s.down_since is None:
                s.down_since = self.ms
        for s in self.sentinels.values():
            self._failover(s)
        for s in self.sentinels.values():
            self._convert(s)

    def _failover(self, leader: _Sentinel) -> None:
        group = [s for s in self.sentinels.values() if self.reach(s.name, leader.name)]
        down = [s for s in group if s.named == leader.named and self._sdown(s)]
        if len(group) < 2 or len(down) < 2 or not self._sdown(leader):
            leader.failover_since = None
            return
        if leader.failover_since is None:
            leader.failover_since = self.ms
        if self.ms - leader.failover_since < self.failover_ms:
            return
        candidates = [
            n
            for n in self.nodes.values()
            if n.role == "replica" and n.name != leader.named and self.reach(leader.name, n.name)
        ]
        if not candidates:
            return  # -failover-abort-no-good-slave: tried again later
        chosen = max(candidates, key=lambda n: (n.synced_at, n.name == "R1"))
        chosen.role, chosen.follows = "master", None
        epoch = max(s.epoch for s in self.sentinels.values()) + 1
        for s in group:
            s.named, s.epoch, s.down_since, s.failover_since = chosen.name, epoch, None, None
        for n in candidates:
            if n is not chosen:
                n.follows = chosen.name

    def _convert(self, sentinel: _Sentinel) -> None:
        named = sentinel.named
        for node in self.nodes.values():
            wrong = node.name != named and (node.role == "master" or node.follows != named)
            if not wrong or not self.reach(sentinel.name, node.name) or sentinel.epoch == 0:
                sentinel.mismatch.pop(node.name, None)
                continue
            since = sentinel.mismatch.setdefault(node.name, self.ms)
            if self.ms - since >= self.convert_ms:
                node.role, node.follows = "replica", named
                sentinel.mismatch.pop(node.name, None)

    def replicate(self) -> None:
        """Every replica that reaches the master it follows holds its data."""
        for node, master in self.count_acks():
            node.synced_at = self.ms
            if node.copied == (master.name, master.calls, node.calls):
                continue  # holds it already
            held = vars(node.server)
            for key, value in vars(master.server).items():
                # Equal data (compared in C) is already held: copy what changed.
                if key not in _WIRING and held.get(key) != value:
                    setattr(node.server, key, _copy(value))
            node.copied = (master.name, master.calls, node.calls)

    def count_acks(self) -> list[tuple[_Node, _Node]]:
        """Count, on each master, the replicas that reach it (what ``WAIT``
        answers); returns those (replica, master) pairs."""
        for node in self.nodes.values():
            node.server.replicas_acking = 0
        linked = []
        for node in self.nodes.values():
            master = self.nodes.get(node.follows or "")
            if node.role != "replica" or master is None or master.role != "master":
                continue
            if not self.reach(node.name, master.name):
                continue
            master.server.replicas_acking += 1
            linked.append((node, master))
        return linked

    # -- a run ------------------------------------------------------------------

    def run(
        self, side_with_m: frozenset[str], *, before_s: float = 6, cut_s: float = 15, after_s: float = 60
    ) -> Outcome:
        """Run whole, partitioned (``side_with_m`` against the rest), then
        whole again; the outcome judged per (schedule, tick)."""
        # A leads first: it starts one step ahead.
        self.count_acks()
        self.leaders["A"].step()
        self.replicate()
        self._steps(before_s)
        assert self.leaders["A"].leading, "A should lead before the cut"
        cut = self.ms
        self.sides = {n: 0 if n in side_with_m else 1 for n in NODES}
        self._steps(cut_s)
        healed = self.ms
        self.sides = None
        self._steps(after_s)
        return self._judge(side_with_m, cut, healed)

    def _steps(self, seconds: float) -> None:
        for _ in range(int(seconds * 1000 / self.step_ms)):
            self.step()

    def _judge(self, side_with_m: frozenset[str], cut: int, healed: int) -> Outcome:
        record = self.broker.record
        counts = Counter((schedule, tick) for schedule, tick, _, _ in record)
        first = min(tick for _, tick, _, _ in record)
        due = range(first, (healed // 1000) * 1000 + 1, 1000)
        fired = {tick: at for _, tick, at, _ in sorted(record, key=lambda r: r[2], reverse=True)}
        lost = [t for t in due if t not in fired]
        during = {
            ("M" if who in side_with_m else "other") for _, tick, at, who in record if cut < at <= healed and tick > cut
        }
        missing_at_heal = [t for t in due if fired.get(t, healed + 1) > healed]
        caught_up = None
        if not lost:
            caught_up = 0.0 if not missing_at_heal else (max(fired[t] for t in missing_at_heal) - healed) / 1000
        return Outcome(
            side_with_m=side_with_m,
            fired_during_cut=tuple(sorted(during)),
            doubled=sum(1 for n in counts.values() if n > 1),
            lost=len(lost),
            caught_up_s=caught_up,
        )


def table(rule: Rule) -> str:
    """The enumeration under ``rule``, condensed by equivalence class: how
    many sentinels and replicas are on the master's side, and where A (the
    leader at the cut) and B are (the replicas and the sentinels are
    interchangeable among themselves)."""
    classes: dict[tuple[int, int, str], list[Outcome]] = {}
    for layout in partitions():
        outcome = World(rule).run(layout)
        clients = "".join(c for c in CLIENTS if c in layout) or "-"
        key = (len(set(SENTINELS) & layout), len(set(DATA) & layout) - 1, clients)
        classes.setdefault(key, []).append(outcome)
    lines = [
        f"rule: {rule.name}",
        "| sentinels with M | replicas with M | candidates with M | layouts | fires during the cut | doubled ticks "
        "| caught up after the heal |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (sentinels, replicas, clients), outcomes in sorted(
        classes.items(), key=lambda kv: (-kv[0][0], -kv[0][1], kv[0][2])
    ):
        fired = sorted({", ".join(o.fired_during_cut) or "none" for o in outcomes})
        caught = [o.caught_up_s for o in outcomes]
        span = "never" if None in caught else _span([c for c in caught if c is not None])
        lines.append(
            f"| {sentinels} | {replicas} | {clients} | {len(outcomes)} | {' / '.join(fired)} "
            f"| {sum(o.doubled for o in outcomes)} | {span} |"
        )
    return "\n".join(lines)


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    if high == 0:
        return "nothing missing"
    return f"{low:.0f}-{high:.0f} s" if round(low) != round(high) else f"{high:.0f} s"


if __name__ == "__main__":  # python -m tests.support.sentinel_model [replica-alone|all-replicas]
    import sys

    chosen = {"replica-alone": REPLICA_ALONE, "all-replicas": ALL_REPLICAS}.get(
        sys.argv[1] if sys.argv[1:] else "", DEFAULT
    )
    print(table(chosen))
