"""The tick planner: which ticks of a schedule are due, and what to do with
each, per its catch-up policy.  Pure functions of (schedule, last decided
tick, now): the leader and ``testing.CronSimulator`` decide alike because
they call the same code.

Also here: the message a tick sends and its deterministic id and jitter,
since those too are pure functions of the schedule and the tick.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import uuid
from datetime import datetime
from typing import Any

from dramatiq import Message

from .outcome import Outcome
from .schedule import BoundSchedule

__all__ = ["ON_TIME_MS", "Decision", "jitter_ms", "message_for", "message_id_for", "plan"]

#: A tick enqueued within this long after it fell due counts as on time;
#: later ones are catch-up, subject to the schedule's catch-up policy.
ON_TIME_MS = 1000

_MESSAGE_IDS = uuid.UUID("4c1f6a52-6a8e-4d0e-9a57-2f0c2a1e7c11")
_NAMESPACE = _MESSAGE_IDS.bytes


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to ask the ledger for one tick (or, for ``missed``, for every
    tick up to and including ``tick_ms``)."""

    tick_ms: int
    outcome: Outcome
    fire: bool
    detail: str = ""


def plan(schedule: BoundSchedule, last: int, now: int, *, head: int | None = None, limit: int = 0) -> list[Decision]:
    """The decisions for a schedule's ticks after ``last`` (its last decided
    tick) that are due at ``now``, oldest first.

    Ticks older than the catch-up window become one ``missed`` decision, not
    an enumeration.  With ``limit`` > 0, at most that many firing decisions
    are returned (the rest are planned by a later call, after the ledger
    moved): this bounds the work of one claim batch.  ``head`` is the first
    tick after ``last`` when the caller already knows it.
    """
    cadence = schedule.cadence
    first = cadence.next_after(last) if head is None else head
    if first > now:
        return []
    if now - first < ON_TIME_MS:
        # The common case, on the fire-lag path: the first tick after the
        # last decided one is on time and, ticks being at least a second
        # apart, the only one due.  No cron arithmetic needed.
        return [Decision(first, Outcome.FIRED, True, str(now - first))]
    out: list[Decision] = []
    # A tick reached within ON_TIME_MS is on time, not catch-up: no window,
    # however small, turns it into a missed one.
    window_start = now - max(schedule.catch_up_window, ON_TIME_MS)
    start = last
    if first <= window_start:
        last_missed = schedule.last_before(window_start + 1)  # its error names the schedule
        out.append(Decision(last_missed, Outcome.MISSED, False, f"outside the catch-up window, from {first}"))
        start = last_missed
    if schedule.catch_up == "each":
        ticks = cadence.ticks_between(start, now)
        out.extend(_firing(tick, now) for tick in (itertools.islice(ticks, limit) if limit else ticks))
        return out
    due = list(cadence.ticks_between(start, now))
    if not due:
        return out
    if schedule.catch_up == "latest":
        fire, skip = due[-1:], due[:-1]
    else:  # "none"
        fire = [t for t in due if now - t <= ON_TIME_MS]
        skip = [t for t in due if now - t > ON_TIME_MS]
    if skip:
        detail = f"{len(skip)} ticks from {skip[0]} (catch_up={schedule.catch_up})"
        out.append(Decision(skip[-1], Outcome.MISSED, False, detail))
    out.extend(_firing(tick, now) for tick in fire)
    return out


def _firing(tick: int, now: int) -> Decision:
    outcome = Outcome.CAUGHT_UP if now - tick > ON_TIME_MS else Outcome.FIRED
    return Decision(tick, outcome, True, str(now - tick))


def message_id_for(schedule_id: str, tick_ms: int, *, prefix: str) -> str:
    """The deterministic message id of a tick: the same in every process,
    so consumers can deduplicate."""
    # uuid.uuid5, without its UUID object (this runs once per tick).
    digest = bytearray(hashlib.sha1(_NAMESPACE + f"{prefix}|{schedule_id}|{tick_ms}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def message_for(
    schedule: BoundSchedule, tick_ms: int, *, prefix: str, manual: bool = False, timestamp_ms: int | None = None
) -> Message[Any]:
    """The message a schedule sends for a tick; its id is derived from
    (prefix, schedule, tick) so consumers can deduplicate.  Its timestamp
    (from which dramatiq's ``AgeLimit`` counts) is ``timestamp_ms``, by
    default now; a message built ahead of its tick is stamped with the
    tick."""
    tick = datetime.fromtimestamp(tick_ms / 1000, tz=schedule.zone).isoformat()
    options: dict[str, Any] = dict(schedule.options)
    options["cron_tick"] = tick
    options["cron_schedule"] = schedule.id
    if schedule.max_age is not None:
        options["max_age"] = schedule.max_age
    if schedule.overlap == "skip":
        # Tells the worker that finishes the message to clear the
        # schedule's running mark (see overlap.py).
        options["cron_overlap"] = "skip"
    if manual:
        options["cron_manual"] = True
        message_id = str(uuid.uuid4())
    else:
        message_id = message_id_for(schedule.id, tick_ms, prefix=prefix)
    stamp = {} if timestamp_ms is None else {"message_timestamp": timestamp_ms}
    return Message(
        queue_name=schedule.queue_name,
        actor_name=schedule.actor_name,
        args=tuple(schedule.args),
        kwargs=dict(schedule.kwargs),
        options=options,
        message_id=message_id,
        **stamp,
    )


def jitter_ms(schedule: BoundSchedule, message_id: str) -> int:
    """A delay in ``[0, jitter]``, the same for every attempt at a tick."""
    if schedule.jitter <= 0:
        return 0
    digest = hashlib.sha256(message_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % (schedule.jitter + 1)
