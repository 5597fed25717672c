"""The lease on a :class:`~.server.MemoryServer` (acquire.lua, renew.lua, release.lua, depose.lua)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from ..clock import ServerClock
from ..durability import Ack, Durability, Unconfirmed
from ..lease import Acquired, Candidate, Held, Renewed, parse_schedule_set
from ..timing import Timing
from .server import LeaseRecord, MemoryServer, parse_entry

__all__ = ["MemoryLease"]


class MemoryLease:
    """:class:`~..abc.LeaseStore` on a :class:`MemoryServer` (acquire.lua,
    renew.lua, release.lua, depose.lua), for ``candidate`` (host, pid,
    what it publishes); ``presence`` registers a presence connection."""

    def __init__(
        self,
        server: MemoryServer,
        *,
        ttl_ms: int,
        clock: ServerClock,
        candidate: Candidate,
        presence: bool,
        durability: Durability,
    ) -> None:
        self.server = server
        self.durability = durability
        self.ttl_ms = ttl_ms
        self._timing = Timing.for_lease(ttl_ms)
        self.clock = clock
        self.host = candidate.host
        self.pid = candidate.pid
        self.fingerprint = candidate.fingerprint
        self.version = candidate.version
        self.candidate_id = uuid.uuid4().hex[:12]
        self.member = f"{self.host}|{self.pid}|{self.candidate_id}"
        self.token: str | None = None
        self._attempt: str | None = None
        self.presence: str | None = server.connect() if presence else None

    def presence_id(self) -> str:
        """This candidate's presence connection id ("" without, or closed)."""
        return self.presence if self.presence in self.server.connections else ""

    def _observe(self, operation: str, run: Callable[[], tuple[int, object]]) -> object:
        sent = self.clock.monotonic()

        def observed() -> object:
            server_ms, value = run()
            self.clock.observe(server_ms, sent, self.clock.monotonic())
            return value

        return self.server.call(operation, observed)

    def _seen(self, now: int) -> None:
        s = self.server
        s.candidates[self.member] = now
        for member in [m for m, at in s.candidates.items() if at <= now - self._timing.candidate_forgotten_ms]:
            del s.candidates[member]
            s.candidate_info.pop(member, None)
        s.candidate_info[self.member] = f"{self.fingerprint}|{self.version}"

    def acquire(self) -> Acquired | Held:
        token = self.token or self._attempt or f"{self.candidate_id}-{uuid.uuid4().hex[:8]}"
        self._attempt = token

        def run() -> tuple[int, Acquired | Held]:
            s = self.server
            now = s.now_ms()
            lease = s.lease_fields()
            self._seen(now)
            if lease is not None and lease["token"] == token:
                assert s.lease_record is not None
                s.lease_record.expires_ms = now + self.ttl_ms
                lease.update(renewed=str(now), conn=self.presence_id(), seq=str(int(lease["seq"]) + 1))
                return now, Acquired(int(lease["epoch"]), now, lease["fresh"] == "1")
            if lease is not None:
                assert s.lease_record is not None
                return now, Held(s.lease_record.expires_ms - now, lease["token"], lease["seq"])
            fresh = s.epoch is None
            if s.epoch is None:
                # The counter vanished: restart it above every epoch the ledger names.
                parsed = (parse_entry(v) for v in s.ticks.values())
                s.epoch = max((int(p[1]) for p in parsed if p is not None), default=0)
            s.epoch += 1
            fields = dict(token=token, epoch=str(s.epoch), host=self.host, pid=str(self.pid), since=str(now))
            fields.update(renewed=str(now), ttl=str(self.ttl_ms), candidate=self.member, fresh=str(int(fresh)))
            fields.update(conn=self.presence_id(), seq="1")
            s.lease_record = LeaseRecord(fields, now + self.ttl_ms)
            return now, Acquired(s.epoch, now, fresh)

        result = self._observe("acquire", run)
        assert isinstance(result, Acquired | Held)
        # A won lease: a retry finds it ours.
        self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        self._attempt = None
        self.token = token if isinstance(result, Acquired) else None
        return result

    def renew(self) -> Renewed | None:
        token = self.token
        if token is None:
            return None

        def run() -> tuple[int, Renewed | None]:
            s = self.server
            now = s.now_ms()
            lease = s.lease_fields()
            s.candidates[self.member] = now
            if lease is None or lease["token"] != token:
                return now, None
            assert s.lease_record is not None
            s.lease_record.expires_ms = now + self.ttl_ms
            lease.update(renewed=str(now), conn=self.presence_id(), seq=str(int(lease["seq"]) + 1))
            live = []
            for _, member in sorted(
                (at, m) for m, at in s.candidates.items() if at >= now - self._timing.candidate_live_ms
            ):
                fingerprint, _, version = s.candidate_info.get(member, "").partition("|")
                live.append((fingerprint, version))
            return now, Renewed(live=live, runtime_version=s.runtime_version)

        renewed = self._observe("renew", run)
        assert renewed is None or isinstance(renewed, Renewed)
        if renewed is None:
            self.token = None
        else:
            self.durability.check(Ack(self.server.replicas_acking, self.server.address))
        return renewed

    def release(self) -> bool:
        token, self.token, self._attempt = self.release_token, None, None

        def run() -> bool:
            s = self.server
            now = s.now_ms()
            s.candidates.pop(self.member, None)
            s.candidate_info.pop(self.member, None)
            lease = s.lease_fields()
            if lease is None or lease["token"] != (token or "-"):
                return False
            s.lease_record = None
            seen = sum(1 for at in s.candidates.values() if at >= now - self._timing.candidate_live_ms)
            count, expires = s.wakes.get("", (0, 0))
            if expires < now:
                count = 0
            s.wakes[""] = (count + min(max(seen, 1), 64), now + self.ttl_ms)
            return True

        return bool(self.server.call("release", run))

    def forget(self) -> None:
        self.token = None

    @property
    def release_token(self) -> str | None:
        return self.token or self._attempt

    def depose(self, token: str, field: str, seen: str) -> bool:
        def run() -> bool:
            lease = self.server.lease_fields()
            if lease is None or lease["token"] != token or lease.get(field, "") != seen:
                return False
            self.server.delete_lease()
            return True

        return bool(self.server.call("depose", run))

    def report_replicas(self, unconfirmed: Unconfirmed | None) -> None:
        def run() -> None:
            s = self.server
            if unconfirmed is None:
                s.replicas_report = None
                return
            since = s.replicas_report["since"] if s.replicas_report else s.now_ms()
            s.replicas_report = dict(
                member=self.member,
                acked=unconfirmed.acked,
                required=unconfirmed.required,
                sentinels=unconfirmed.sentinels,
                since=since,
            )

        self.server.call("report_replicas", run)

    def depose_if_gone(self) -> bool:
        lease = self.server.call("depose_if_gone", self.server.lease_fields)
        assert lease is None or isinstance(lease, dict)
        if lease is None or not lease["token"] or not lease["conn"] or lease["conn"] in self.server.connections:
            return False
        return self.depose(lease["token"], "conn", lease["conn"])

    def wait_for_release(self, timeout_ms: int) -> bool:
        def pop() -> bool:
            now = self.server.now_ms()
            for key in ("", self.candidate_id):
                count, expires = self.server.wakes.get(key, (0, 0))
                if count > 0 and expires >= now:
                    self.server.wakes[key] = (count - 1, expires)
                    return True
            return False

        def run() -> bool:
            if pop():
                return True
            if self.server.wait is not None:
                self.server.wait(max(timeout_ms, 1) / 1000)
                return pop()
            return False

        return bool(self.server.call("wait_for_release", run))

    def wait_for_push(self, key: str, timeout_ms: int, *, bound_ms: int) -> str | None:
        def pop() -> str | None:
            now = self.server.now_ms()
            if self.server.runtime_notified:
                self.server.runtime_notified = False
                return key
            count, expires = self.server.wakes.get(self.candidate_id, (0, 0))
            if count > 0 and expires >= now:
                self.server.wakes[self.candidate_id] = (count - 1, expires)
                return self.candidate_id
            return None

        def run() -> str | None:
            popped = pop()
            if popped is None and self.server.wait is not None:
                self.server.wait(max(min(timeout_ms, bound_ms), 1) / 1000)
                popped = pop()
            return popped

        popped = self.server.call("wait_for_push", run)
        assert popped is None or isinstance(popped, str)
        return popped

    def wake_self(self) -> None:
        def run() -> None:
            now = self.server.now_ms()
            count, expires = self.server.wakes.get(self.candidate_id, (0, 0))
            self.server.wakes[self.candidate_id] = ((count if expires >= now else 0) + 1, now + self.ttl_ms)

        self.server.call("wake_self", run)

    def hand_over_commands(self) -> list[tuple[Any, ...]]:
        """None: a hand-over at shutdown needs a Redis connection."""
        return []

    def publish_schedule_set(self, shapes: dict[str, str]) -> None:
        if self.fingerprint:
            sets, text = self.server.candidate_sets, json.dumps(shapes, sort_keys=True)
            self.server.call("publish_schedule_set", lambda: sets.setdefault(self.fingerprint, text))

    def schedule_sets(self, fingerprints: list[str]) -> dict[str, dict[str, str] | None]:
        values = self.server.call("schedule_sets", lambda: [self.server.candidate_sets.get(f) for f in fingerprints])
        assert isinstance(values, list)
        return {fingerprint: parse_schedule_set(value) for fingerprint, value in zip(fingerprints, values, strict=True)}

    def prune_schedule_sets(self, keep: set[str]) -> None:
        def run() -> None:
            for fingerprint in [f for f in self.server.candidate_sets if f not in keep]:
                del self.server.candidate_sets[fingerprint]

        self.server.call("prune_schedule_sets", run)
