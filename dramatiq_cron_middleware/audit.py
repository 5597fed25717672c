"""The audit trail: every operator action (add, update, remove, pause,
resume, trigger), whoever did it (the Python API, the ``dramatiq-cron``
command or a dashboard user), is recorded in the history stream beside the
tick outcomes and logged at INFO by the process that did it.

Actions are written as verbs (``add``, ``pause``...), tick outcomes as
participles (``fired``, ``paused``...), so the two never read alike; a
manual trigger is both an action and a tick, recorded once as
``triggered``.  The record is written after the action succeeded, in a
second command: if Redis goes away between the two, the action stands
unrecorded (the INFO line is still logged).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import logging
import re
from collections.abc import Sequence

import redis
from dramatiq import Broker
from dramatiq.logging import get_logger

from .errors import CronScheduleError
from .schedules.outcome import Outcome
from .schedules.planner import message_for
from .schedules.schedule import BoundSchedule
from .store.abc import OperatorStore
from .store.connection import redact

__all__ = ["Action", "AuditLog", "Changed", "TriggerRefused", "Triggered", "check_who", "log_actions"]

_UTC = dt.timezone.utc


class Action(str, enum.Enum):
    """An operator action, as the history stream's ``outcome`` records it."""

    ADD = "add"
    UPDATE = "update"
    REMOVE = "remove"
    PAUSE = "pause"
    RESUME = "resume"
    #: A manual trigger: an action and a tick at once.
    TRIGGER = Outcome.TRIGGERED.value

    def __str__(self) -> str:
        return self.value


#: Every action's outcome string, for readers of the history.
ACTIONS = frozenset(a.value for a in Action)

_WHO = re.compile(r"^[^\x00-\x1f\x7f]{1,200}\Z")


def check_who(who: object) -> str:
    """``who`` as recorded: 1 to 200 printable characters.

    Raises:
      CronScheduleError: naming the value.
    """
    if not isinstance(who, str) or not _WHO.match(who) or not who.strip():
        raise CronScheduleError(
            f"who must name who acts (1 to 200 printable characters, e.g. 'api', 'cli' or a user), got {who!r}"
        )
    return who


@dataclasses.dataclass(frozen=True)
class Changed:
    """A pause or resume as done: ``target`` is the schedule id, or
    ``<actor>:*`` for a whole actor; ``changed`` is False when it already
    was so (nothing recorded then); ``at_ms`` the server time of the call."""

    target: str
    paused: bool
    changed: bool
    at_ms: int
    #: When a pause ends (epoch ms; None: until resumed, or a resume).
    until_ms: int | None = None

    @property
    def at(self) -> dt.datetime:
        """``at_ms`` as an aware UTC datetime."""
        return dt.datetime.fromtimestamp(self.at_ms / 1000, tz=_UTC)


class TriggerRefused(CronScheduleError):
    """A manual trigger that cannot work; the message says why."""


@dataclasses.dataclass(frozen=True)
class Triggered:
    """A manual trigger that was enqueued and recorded."""

    message_id: str
    tick: str
    queue_name: str
    recorded_ms: int

    @property
    def recorded_at(self) -> dt.datetime:
        """``recorded_ms`` as an aware UTC datetime."""
        return dt.datetime.fromtimestamp(self.recorded_ms / 1000, tz=_UTC)


def log_actions(logger: logging.Logger, action: Action, who: str, entries: Sequence[tuple[str, str]]) -> None:
    """Log ``action`` at INFO: one line per ``(schedule id, detail)``, or
    one summary line for more than ten."""
    if len(entries) <= 10:
        for schedule_id, detail in entries:
            logger.info("Cron %s: %s by %s%s.", schedule_id, action, who, f": {detail}" if detail else "")
    elif entries:
        logger.info(
            "Cron %d schedules (%s ... %s): %s by %s.", len(entries), entries[0][0], entries[-1][0], action, who
        )


class AuditLog:
    """Operator actions on one scheduler's store, each recorded and logged.

    Parameters:
      store(OperatorStore): The store's operator half (Redis or memory).
    """

    def __init__(self, *, store: OperatorStore) -> None:
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call]
        self.store = store

    def record(
        self,
        action: Action,
        *,
        who: str,
        entries: Sequence[tuple[str, str]],
        tick_ms: int | None = None,
        message_id: str = "",
    ) -> int:
        """Record ``action`` by ``who`` on each ``(schedule id, what
        changed)`` of ``entries`` in the history, and log it at INFO (one
        line per entry, or one summary line for more than ten); returns the
        store's time of the record.

        Raises:
          CronScheduleError: a bad ``who``.
        """
        check_who(who)
        log_actions(self.logger, action, who, entries)
        return self.store.record(action.value, who=who, entries=entries, tick_ms=tick_ms, message_id=message_id)

    def pause(self, member: str, *, who: str, until_ms: int | None = None) -> Changed:
        """Add ``member`` (a schedule id or ``<actor>:*``) to the paused set;
        the leader records its ticks as ``paused``.  With ``until_ms``
        (epoch ms) only ticks before that instant are paused and the
        leader's claim ends the pause then; without, it lasts until resumed
        (a pause given again takes the new end, or none)."""
        check_who(who)
        changed = self.store.set_pause(member, until_ms)
        detail = "" if until_ms is None else f"until {_iso(until_ms)}"
        at = self.record(Action.PAUSE, who=who, entries=[(member, detail)]) if changed else self.store.server_ms()
        return Changed(target=member, paused=True, changed=changed, at_ms=at, until_ms=until_ms)

    def resume(self, member: str, *, who: str) -> Changed:
        """Undo :meth:`pause` of the same member."""
        check_who(who)
        changed = self.store.clear_pause(member)
        at = self.record(Action.RESUME, who=who, entries=[(member, "")]) if changed else self.store.server_ms()
        return Changed(target=member, paused=False, changed=changed, at_ms=at)

    def trigger(self, broker: Broker, schedule: BoundSchedule, *, prefix: str, who: str) -> Triggered:
        """Enqueue a schedule's message now, marked manual with a fresh id,
        and record it as ``triggered``; the ledger is left alone, so the
        schedule fires as before.

        Raises:
          TriggerRefused: the enqueue failed for a reason other than the
            store (whose errors propagate).
        """
        check_who(who)
        tick = self.store.server_ms()
        message = message_for(schedule, tick, prefix=prefix, manual=True, timestamp_ms=tick)
        try:
            broker.enqueue(message)
        except (redis.RedisError, OSError):
            raise
        except Exception as exc:
            detail = redact(f"{type(exc).__name__}: {exc}")
            raise TriggerRefused(f"enqueueing {schedule.actor_name} failed: {detail}") from None
        at = self.record(
            Action.TRIGGER, who=who, entries=[(schedule.id, "manual")], tick_ms=tick, message_id=message.message_id
        )
        return Triggered(
            message_id=message.message_id,
            tick=message.options["cron_tick"],
            queue_name=schedule.queue_name,
            recorded_ms=at,
        )


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
