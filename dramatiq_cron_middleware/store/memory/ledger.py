"""The tick ledger on a :class:`~.server.MemoryServer` (sync.lua, register.lua, claim.lua, settle.lua)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from ..boundary import Payload
from ..clock import ServerClock
from ..codes import ClaimResult, Corrupt, Outcome, SyncCode, whole_actor
from ..durability import Ack, Durability
from ..ledger import (
    BATCH_RECORD_MS,
    FUTURE_TOLERANCE_MS,
    BadRequest,
    Claim,
    ClaimReply,
    NotLeader,
    Settled,
    SyncEntry,
    SyncReply,
)
from .server import MemoryServer, parse_entry

__all__ = ["MemoryLedger"]


_RECORD = re.compile(r"^[-\d,]*$")


class MemoryLedger:
    """:class:`~..abc.LedgerStore` on a :class:`MemoryServer` (sync.lua,
    register.lua, claim.lua, settle.lua)."""

    def __init__(
        self, server: MemoryServer, *, clock: ServerClock, history_length: int, durability: Durability
    ) -> None:
        self.server = server
        self.clock = clock
        self.history_length = history_length
        self.durability = durability

    def _fenced(self, operation: str, token: str, run: Callable[[int], object]) -> object:
        sent = self.clock.monotonic()

        def observed() -> object:
            now = self.server.now_ms()
            self.clock.observe(now, sent, self.clock.monotonic())
            lease = self.server.lease_fields()
            if lease is None or lease["token"] != token:
                raise NotLeader()
            return run(now)

        return self.server.call(operation, observed)

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
        entries = [SyncEntry(e) if isinstance(e, str) else e for e in schedules]
        trusted_ms = self.clock.trusted_ms()

        def run(now: int) -> SyncReply:
            s = self.server
            base = min(now if now_ms is None else now_ms, now)
            future = max(now, trusted_ms) + FUTURE_TOLERANCE_MS
            existed = bool(s.ticks)
            ticks: dict[str, int] = {}
            codes: dict[str, SyncCode] = {}
            lost = expect_ledger and not existed and bool(entries)
            if lost:
                detail = "the ledger was gone; schedules restart from now"
                s.add_history(self.history_length, "*", base, Outcome.LEDGER_LOST.value, now, epoch, detail, "")
            events: list[tuple[str, str]] = []
            for sid, shape in entries:
                value = s.ticks.get(sid)
                code = SyncCode.OK
                parsed = parse_entry(value)
                if value is None:
                    code = SyncCode.BASELINE
                elif parsed is None:
                    code = SyncCode.CORRUPT
                elif parsed[0] > future:
                    code = SyncCode.FUTURE
                if shape:
                    known = s.shapes.get(sid)
                    if known != shape:
                        s.shapes[sid] = shape
                        if known is not None and code == SyncCode.OK:
                            code = SyncCode.RESHAPED
                if code != SyncCode.OK:
                    value = f"{base}:{epoch}:baseline"
                    s.ticks[sid] = value
                    codes[sid] = code
                    if code in (SyncCode.CORRUPT, SyncCode.FUTURE):
                        events.append((sid, "unusable ledger entry replaced by a baseline"))
                    elif code == SyncCode.RESHAPED:
                        why = "the schedule changed (expression, zone, interval or bounds): it starts from now"
                        events.append((sid, why))
                assert value is not None
                ticks[sid] = int(value[: value.index(":")])
            # The script appends the rebased entries before the reshaped ones.
            for rebased in (True, False):
                for sid, detail in events:
                    if (codes[sid] != SyncCode.RESHAPED) == rebased:
                        s.add_history(self.history_length, sid, base, Outcome.REBASED.value, now, epoch, detail, "")
            return SyncReply(ticks=ticks, codes=codes, server_ms=now, corrupt=Corrupt.NONE, ledger_lost=lost)

        reply = self._fenced("sync", token, run)
        assert isinstance(reply, SyncReply)
        if on_chunk is not None:
            on_chunk(reply.ticks.items())
        return reply

    def register(self, schedules: Sequence[SyncEntry]) -> int:
        def run() -> int:
            s = self.server
            now = s.now_ms()
            created = 0
            for sid, shape in schedules:
                if sid not in s.ticks:
                    s.ticks[sid] = f"{now}:0:baseline"
                    created += 1
                if shape:
                    s.shapes.setdefault(sid, shape)
            return created

        return int(str(self.server.call("register", run)))

    def claim(
        self,
        token: str,
        epoch: int,
        batch_id: str,
        claims: Sequence[Claim],
        payloads: Sequence[Payload | None] | None = None,
    ) -> ClaimReply:
        if payloads is not None and any(p is not None for p in payloads):
            raise BadRequest("the memory store enqueues no messages: claim without payloads")
        trusted_ms = self.clock.trusted_ms()
        sent = self.clock.monotonic()

        def run() -> ClaimReply:
            s = self.server
            now = s.now_ms()
            self.clock.observe(now, sent, self.clock.monotonic())
            flags = Corrupt.NONE
            prior = s.batch(batch_id)
            if prior == "void":
                return ClaimReply([ClaimResult.REFUSED] * len(claims), now, flags)
            if prior is not None and _RECORD.match(prior):
                results = [ClaimResult(int(r)) for r in prior.split(",") if r]
                if len(results) == len(claims):
                    return ClaimReply(results, now, flags)
            if prior is not None:
                flags |= Corrupt.BATCH
            lease = s.lease_fields()
            if lease is None or lease["token"] != token:
                raise NotLeader()
            future = max(now, trusted_ms) + FUTURE_TOLERANCE_MS
            any_paused = bool(s.paused)
            expired: set[str] = set()

            def pauses(member: str, tick: int) -> bool:
                if member not in s.paused:
                    return False
                expiry = s.paused_until.get(member)
                if expiry is None:
                    return True
                if expiry <= now:
                    expired.add(member)
                return tick < expiry

            last: dict[str, tuple[int, str, int | None] | None] = {}
            marks: dict[str, tuple[str, int]] = {}
            writes: dict[str, str] = {}
            events: list[tuple[str, int, str, str, str]] = []
            results = []
            for c in claims:
                sid = c.schedule_id
                if sid not in last:
                    parsed = parse_entry(s.ticks.get(sid))
                    last[sid] = None if parsed is None or parsed[0] > future else parsed
                entry = last[sid]
                outcome = str(c.outcome)
                if entry is None:
                    result = ClaimResult.LOST
                elif c.revision > 0 and s.runtime_revs.get(sid) != c.revision:
                    result = ClaimResult.GONE
                elif c.tick_ms > now:
                    result = ClaimResult.NOT_YET
                elif c.tick_ms < entry[0] or (c.tick_ms == entry[0] and entry[1] != str(epoch)):
                    result = ClaimResult.REFUSED
                elif c.tick_ms == entry[0]:
                    result = ClaimResult(entry[2]) if entry[2] is not None else ClaimResult.REFUSED
                else:
                    result = ClaimResult.RECORDED
                    if c.fire:
                        overlap = c.overlap_ttl_ms > 0
                        if any_paused and (pauses(sid, c.tick_ms) or pauses(whole_actor(c.actor_name), c.tick_ms)):
                            result, outcome = ClaimResult.PAUSED, Outcome.PAUSED.value
                        elif overlap and (sid in marks or s.is_running(sid)):
                            result, outcome = ClaimResult.SKIPPED, Outcome.SKIPPED.value
                        else:
                            result = ClaimResult.FIRE
                            if overlap:
                                marks[sid] = (c.message_id, c.overlap_ttl_ms)
                    last[sid] = (c.tick_ms, str(epoch), int(result))
                    writes[sid] = f"{c.tick_ms}:{epoch}:{int(result)}"
                    events.append((sid, c.tick_ms, outcome, c.detail, c.message_id))
                results.append(result)
            s.ticks.update(writes)
            for member in expired:
                s.paused.discard(member)
                s.paused_until.pop(member, None)
            for sid, (message_id, ttl) in marks.items():
                s.set_running(sid, message_id, ttl)
            for sid, tick, outcome, detail, message_id in events:
                s.add_history(self.history_length, sid, tick, outcome, now, epoch, detail, message_id)
            s.batches[batch_id] = (",".join(str(int(r)) for r in results), now + BATCH_RECORD_MS)
            return ClaimReply(results, now, flags)

        reply = self.server.call("claim", run)
        assert isinstance(reply, ClaimReply)
        self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        return reply

    @property
    def stages(self) -> bool:
        return False  # the memory store enqueues no messages (see claim)

    def publish(self, payloads: Sequence[Payload]) -> list[bool]:
        return [False] * len(payloads)

    def staged(self, limit: int) -> list[Payload]:
        return []

    def settle(self, batch_id: str, *, epoch: int, claims: Sequence[Claim]) -> Settled:
        def run() -> Settled:
            s = self.server
            now = s.now_ms()
            prior = s.batch(batch_id)
            if prior is not None and prior != "void" and _RECORD.match(prior):
                return Settled([ClaimResult(int(r)) for r in prior.split(",") if r])
            if prior is None or prior == "void":
                s.batches[batch_id] = ("void", now + BATCH_RECORD_MS)
                return Settled(None)
            # Unusable: read back from the ledger what this epoch was granted
            # (as settle.lua does: a newest tick of this batch decided by
            # this epoch proves its earlier ticks of that schedule decided).
            in_batch = {(c.schedule_id, c.tick_ms) for c in claims}
            results = []
            for c in claims:
                parsed = parse_entry(s.ticks.get(c.schedule_id))
                result = ClaimResult.REFUSED
                if parsed is not None and parsed[1] == str(epoch) and parsed[2] is not None:
                    stored = ClaimResult(parsed[2])
                    if parsed[0] == c.tick_ms:
                        result = stored
                    elif parsed[0] > c.tick_ms and (c.schedule_id, parsed[0]) in in_batch:
                        if not c.fire:
                            result = ClaimResult.RECORDED
                        elif stored in (ClaimResult.FIRE, ClaimResult.PAUSED, ClaimResult.SKIPPED):
                            result = stored
                results.append(result)
            s.batches[batch_id] = ("void", now + BATCH_RECORD_MS)
            return Settled(results, record_corrupt=True)

        settled = self.server.call("settle", run)
        assert isinstance(settled, Settled)
        self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        return settled
