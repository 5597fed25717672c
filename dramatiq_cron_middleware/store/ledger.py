"""The tick ledger: fenced claims, last decided ticks and the outcome history.

The ledger is the resource the lease protects, and it protects itself:
every script here first checks that the lease still holds the caller's
token, inside Redis, atomically with the write.  A leader that was paused,
cut off or deposed is refused by Redis, not by its own belief.  For each
schedule the ledger keeps the last tick decided (fired, caught up, skipped,
missed or paused) and the epoch that decided it; a tick is claimed only if
it is newer than that and not after the server's time, so each tick is
decided once across all leaders and never early.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import redis
from dramatiq import Message
from redis.cluster import RedisCluster

from ..schedules.outcome import VALUES as OUTCOMES
from ..schedules.schedule import BoundSchedule
from .boundary import Payload
from .clock import ServerClock
from .codes import (
    BadRequest,
    ClaimResult,
    Corrupt,
    Reply,
    SyncCode,
    decode,
    load_script,
    whole_actor,
)
from .durability import Ack, Durability
from .keys import Keys
from .read_ahead import read_ahead

__all__ = ["BadRequest", "Claim", "ClaimReply", "Ledger", "NotLeader", "Settled", "SyncEntry", "SyncReply"]

#: How long a batch's results (or its void mark) are kept for a caller
#: whose reply was lost.
BATCH_RECORD_MS = 600_000

#: A ledger entry lying further than this after the server's time cannot
#: have been fired (claims are never granted early): it was written under a
#: stepped clock, and is replaced by a baseline.
FUTURE_TOLERANCE_MS = 1_000

#: Schedules read per sync call: bounds the script's run time.
SYNC_CHUNK = 5_000

#: Sync calls sent at once (a pipeline): Redis runs one while the leader
#: reads the previous reply, and never runs more than this many in a row
#: for one caller.
SYNC_WINDOW = 4


class NotLeader(Exception):
    """Redis refused a fenced operation: the lease holds another token."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """A request to decide one tick of one schedule."""

    schedule_id: str
    tick_ms: int
    outcome: str
    fire: bool
    actor_name: str = ""
    detail: str = ""
    message_id: str = ""
    overlap_ttl_ms: int = 0
    #: The runtime definition's revision the claim was planned from (0 for
    #: declared schedules): a removed or replaced definition never fires.
    revision: int = 0


class SyncEntry(NamedTuple):
    """A schedule as the ledger sees it: its identity and its shape digest.  (A
    tuple: a takeover builds one per schedule, also for a large runtime
    set.)"""

    schedule_id: str
    shape: str = ""

    @classmethod
    def of(cls, schedule: BoundSchedule) -> SyncEntry:
        """The entry of a bound schedule.  A runtime schedule's shape is
        left out: its write keeps its ledger entry and shape consistent (see
        runtime.py), so the leader never rebases it, and need not digest a
        large runtime set."""
        return cls(schedule.id, "" if schedule.source == "runtime" else schedule.shape)


@dataclasses.dataclass(frozen=True)
class ClaimReply:
    """What Redis decided for a batch."""

    results: list[ClaimResult]
    server_ms: int
    corrupt: Corrupt


@dataclasses.dataclass(frozen=True)
class SyncReply:
    """The ledger entries of the schedules asked for."""

    #: Each schedule's last decided tick (epoch ms), as the ledger now holds it.
    ticks: dict[str, int]
    #: The schedules whose entry was not simply read (a baseline, a
    #: rebased or reshaped entry), with what the script found.
    codes: dict[str, SyncCode]
    server_ms: int
    corrupt: Corrupt
    #: The ledger was gone although the caller knew one existed.
    ledger_lost: bool


@dataclasses.dataclass(frozen=True)
class Settled:
    """What became of a claim whose reply was lost."""

    #: Its per-claim results if it ran, None if it never ran (and now never will).
    results: list[ClaimResult] | None
    #: The batch record was unusable: ``results`` were read back from the ledger.
    record_corrupt: bool = False


def _column(items: Sequence[str]) -> str:
    """Strings as one script argument, each followed by a newline ('' when
    all are empty).  Identities never hold a newline (the schedule's
    binding refuses them)."""
    if not any(items):
        return ""
    text = "\n".join(items) + "\n"
    if text.count("\n") != len(items):
        raise BadRequest(f"a schedule identity holds a newline: {[i for i in items if chr(10) in i][:1]!r}")
    return text


def _granted(raw: Any) -> Reply:
    """A fenced script's reply, or the refusal it stands for."""
    reply = decode(raw)
    if not reply.ok:
        raise NotLeader()
    return reply


def _tick_of(value: str) -> int:
    """The tick of a ledger value the sync script wrote or checked."""
    return int(value[: value.index(":")])


class Ledger:
    """Fenced access to the tick ledger.

    Parameters:
      client: The scheduler's command client (short timeouts).
      keys: The key names.
      clock: The leader's :class:`ServerClock`, which every reply's server
        time updates.
      history_length: Approximate cap of the history stream.
      durability: How many replicas must acknowledge a claim or a settle
        before its granted ticks may be enqueued.  Defaults to none.
    """

    def __init__(
        self,
        *,
        client: redis.Redis,
        keys: Keys,
        clock: ServerClock,
        history_length: int = 10_000,
        durability: Durability | None = None,
    ) -> None:
        self.keys = keys
        self.durability = durability or Durability()
        self.clock = clock
        self.history_length = history_length
        self._client = client
        self._sync = load_script(client, "sync")
        self._claim = load_script(client, "claim")
        self._settle = load_script(client, "settle")
        self._register = load_script(client, "register")
        self._publish = load_script(client, "publish")

    @property
    def stages(self) -> bool:
        """Whether a claim stages the messages it grants in the outbox
        instead of pushing them (durable claims): :meth:`publish` pushes
        them once replicas hold the claim."""
        return self.durability.on

    def sync(
        self,
        token: str,
        epoch: int,
        schedules: Sequence[str | SyncEntry],
        *,
        now_ms: int | None = None,
        expect_ledger: bool = False,
        on_chunk: Callable[[Iterable[tuple[str, int]]], None] | None = None,
    ) -> SyncReply:
        """Read (and where missing or unusable, baseline at ``now_ms`` or
        the server's now, whichever is earlier) every schedule's last tick,
        in chunks of :data:`SYNC_CHUNK`; ``on_chunk`` gets each chunk's
        ``(schedule id, tick)`` pairs as they arrive (the leader builds its
        tick queue meanwhile).

        Raises:
          NotLeader: if the lease no longer holds ``token``.
        """
        ticks: dict[str, int] = {}
        codes: dict[str, SyncCode] = {}
        corrupt = Corrupt.NONE
        lost = False
        if now_ms is None:  # no estimate of our own: the server's now
            now_ms = 2**52
        server_ms = now_ms
        entries = [SyncEntry(e) if isinstance(e, str) else e for e in schedules]
        keys = [self.keys.lease, self.keys.ticks, self.keys.history, self.keys.shapes, self.keys.paused]
        chunks = [entries[i : i + SYNC_CHUNK] for i in range(0, max(len(entries), 1), SYNC_CHUNK)]

        def windows() -> Iterator[list[tuple[list[SyncEntry], list[str], Reply]]]:
            for first in range(0, len(chunks), SYNC_WINDOW):
                window = chunks[first : first + SYNC_WINDOW]
                trusted_ms = self.clock.trusted_ms()
                columns = [[e.schedule_id for e in chunk] for chunk in window]
                calls = [
                    [
                        token,
                        epoch,
                        now_ms,
                        1 if expect_ledger and first + n == 0 else 0,
                        self.history_length,
                        FUTURE_TOLERANCE_MS,
                        trusted_ms,
                        _column(ids),
                        _column([e.shape for e in chunk]),
                    ]
                    for n, (chunk, ids) in enumerate(zip(window, columns, strict=True))
                ]
                yield list(zip(window, columns, self._run_many(self._sync, keys, calls), strict=True))

        # More than one window (over 20,000 schedules): the next window's
        # scripts run while this thread reads the current replies.
        replies = read_ahead(windows()) if len(chunks) > SYNC_WINDOW else windows()
        for window_replies in replies:
            for chunk, ids, reply in window_replies:
                server_ms = reply.server_ms
                corrupt |= reply.corrupt
                chunk_lost, chunk_text, chunk_codes = reply.payload
                lost = lost or int(chunk_lost) == 1
                chunk_values = str(chunk_text).split("\n") if chunk else []
                chunk_codes = str(chunk_codes)
                if len(chunk_values) != len(chunk) or len(chunk_codes) != len(chunk):
                    raise BadRequest(f"sync answered {len(chunk_values)} entries for {len(chunk)} schedules")
                try:
                    chunk_ticks = list(map(_tick_of, chunk_values))
                except ValueError:  # the script writes only values of the grammar
                    raise BadRequest("sync returned an unparsable entry") from None
                ticks.update(zip(ids, chunk_ticks, strict=True))
                if chunk_codes.count("0") != len(chunk_codes):  # usually every entry was simply read
                    for index, code in enumerate(chunk_codes):
                        if code != "0":
                            codes[ids[index]] = SyncCode(int(code))
                if on_chunk is not None:
                    on_chunk(zip(ids, chunk_ticks, strict=True))
        return SyncReply(ticks=ticks, codes=codes, server_ms=server_ms, corrupt=corrupt, ledger_lost=lost)

    def register(self, schedules: Sequence[SyncEntry]) -> int:
        """Make a candidate's schedules known to the ledger before it leads
        (unfenced: only missing entries are written, baselined at now).  Returns how many were written."""
        written = 0
        for start in range(0, len(schedules), SYNC_CHUNK):
            chunk = schedules[start : start + SYNC_CHUNK]
            reply = decode(
                self._register(
                    keys=[self.keys.ticks, self.keys.shapes],
                    args=[field for e in chunk for field in (e.schedule_id, e.shape)],
                )
            )
            written += int(reply.payload[0])
        return written

    def claim(
        self,
        token: str,
        epoch: int,
        batch_id: str,
        claims: Sequence[Claim],
        payloads: Sequence[Payload | None] | None = None,
    ) -> ClaimReply:
        """Decide a batch of ticks in one round trip; one result per claim.
        With ``payloads`` (a RedisBroker on this Redis), the script also
        enqueues each granted claim's message, in the same atomic step, or
        when :attr:`stages`, stages it in the outbox for :meth:`publish`.

        Raises:
          NotLeader: if the lease no longer holds ``token`` (nothing was
            written).
          BadRequest: if the script found the batch malformed (nothing was
            written).
          Unconfirmed: the batch ran, but too few replicas hold it: like a
            lost reply, settle it (nothing of it may be enqueued before).
        """
        keys = [
            self.keys.lease,
            self.keys.ticks,
            self.keys.history,
            self.keys.paused,
            self.keys.batch(batch_id),
            self.keys.runtime_revs,
            self.keys.paused_until,
        ]
        key_index: dict[str, int] = {}

        def index(key: str) -> int:
            if key not in key_index:
                keys.append(key)
                key_index[key] = len(keys)  # Lua indexes from 1
            return key_index[key]

        running = self.keys.running
        # One JSON argument instead of ten per entry: packing thousands of
        # arguments cost more client time than the script itself.  Built in
        # one pass, without a call per entry.
        rows: list[list[Any]] = []
        bodies: list[str] = []  # ARGV[9...]: no JSON escaping of a body (nor unescaping in the script)
        for i, c in enumerate(claims):
            payload = payloads[i] if payloads is not None else None
            mark = index(running(c.schedule_id)) if c.fire and c.overlap_ttl_ms > 0 else 0
            row = [
                c.schedule_id,
                c.tick_ms,
                OUTCOMES.get(c.outcome) or str(c.outcome),
                1 if c.fire else 0,
                c.detail,
                c.message_id,
                c.overlap_ttl_ms,
                whole_actor(c.actor_name),
                mark,
                c.revision,
            ]
            if payload is None:
                row += (0, 0, "", 0)
            else:
                bodies.append(payload.body)
                row += (
                    index(payload.queue_key),
                    index(payload.messages_key),
                    payload.redis_message_id,
                    8 + len(bodies),  # Lua indexes from 1
                )
            rows.append(row)
        entries = json.dumps(rows, separators=(",", ":"))
        args: list[Any] = [
            token,
            epoch,
            self.history_length,
            FUTURE_TOLERANCE_MS,
            BATCH_RECORD_MS,
            entries,
            self.clock.trusted_ms(),
            index(self.keys.outbox) if self.stages and payloads is not None and any(payloads) else 0,
            *bodies,
        ]
        reply = self._run(self._claim, keys, args, confirm=True)
        return ClaimReply(
            results=[ClaimResult(int(r)) for r in reply.payload],
            server_ms=reply.server_ms,
            corrupt=reply.corrupt,
        )

    def settle(self, batch_id: str, *, epoch: int = 0, claims: Sequence[Claim] = ()) -> Settled:
        """What became of a claim whose reply was lost: its results, or None
        when that batch never ran; from then on it never will (a copy of it
        still in flight is refused).  An unusable batch record is replaced,
        and the results are read back from the ledger (what ``epoch`` was
        granted of ``claims``).

        Raises:
          Unconfirmed: too few replicas hold the answer (the batch record
            and the ledger entries it stands for): settle again later.
        """
        entries = json.dumps([[c.schedule_id, c.tick_ms, int(c.fire)] for c in claims], separators=(",", ":"))
        raw, acked = self.durability.run(
            self._client, self._settle, [self.keys.batch(batch_id), self.keys.ticks], [BATCH_RECORD_MS, epoch, entries]
        )
        reply = decode(raw)
        self.durability.check(acked)
        corrupt = bool(reply.corrupt & Corrupt.BATCH)
        if not reply.ok:
            return Settled(None, record_corrupt=corrupt)
        return Settled([ClaimResult(int(r)) for r in str(reply.payload[0]).split(",") if r], record_corrupt=corrupt)

    def publish(self, payloads: Sequence[Payload]) -> list[bool]:
        """Push staged messages into their queues (idempotent: a message no
        longer staged is skipped); per payload whether this call pushed it.
        Only for claims replicas hold."""
        if not payloads:
            return []
        keys = [self.keys.outbox]
        for p in payloads:
            keys += [p.queue_key, p.messages_key]
        reply = decode(self._publish(keys=keys, args=[p.redis_message_id for p in payloads]))
        return [int(v) == 1 for v in reply.payload]

    def staged(self, limit: int) -> list[Payload]:
        """Up to ``limit`` messages still staged in the outbox (a claimer
        that died, or whose publish failed, left them), to :meth:`publish`
        once this leader's writes are durable."""
        found: Any = self._client.hscan(self.keys.outbox, 0, count=limit)[1]
        out, unusable = [], []
        for message_id, value in list(found.items())[:limit]:
            queue_key, _, rest = str(value).partition("\n")
            messages_key, _, body = rest.partition("\n")
            try:
                message = Message.decode(body.encode("utf-8"))
            except Exception:  # a stray write: no message to publish
                unusable.append(message_id)
                continue
            out.append(Payload(message, None, queue_key, messages_key, str(message_id), body))
        if unusable:
            self._client.hdel(self.keys.outbox, *unusable)
        return out

    def _run_many(self, script: Any, keys: list[str], calls: list[list[Any]]) -> list[Reply]:
        """Several calls of one script in one pipeline: Redis runs the next
        while this process reads the previous reply.  Only the last reply
        is observed by the clock: its server time was read nearest to the
        instant the pipeline's replies were all in."""
        if len(calls) == 1 or isinstance(self._client, RedisCluster):  # Cluster pipelines refuse scripts
            return [self._run(script, keys, args) for args in calls]
        sent = self.clock.monotonic()
        pipe = self._client.pipeline(transaction=False)
        for args in calls:
            script(keys=keys, args=args, client=pipe)
        results = pipe.execute()
        self.clock.observe(int(results[-1][1]), sent, self.clock.monotonic())
        return [_granted(result) for result in results]

    def _run(self, script: Any, keys: list[str], args: list[Any], *, confirm: bool = False) -> Reply:
        """One fenced script call; with ``confirm``, confirmed on replicas
        (see durability.py) once Redis granted it."""
        sent = self.clock.monotonic()
        if confirm:
            result, acked = self.durability.run(self._client, script, keys, args)
        else:
            result, acked = script(keys=keys, args=args), Ack(0)
        self.clock.observe(int(result[1]), sent, self.clock.monotonic())
        reply = _granted(result)
        if confirm:
            self.durability.check(acked)
        return reply
