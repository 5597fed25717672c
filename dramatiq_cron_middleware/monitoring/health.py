"""How a schedule's health is decided: pure functions of the stored facts
and the events the leader reads, with no clock and no Redis, so the leader,
``dramatiq-cron check`` and ``testing.CronSimulator`` decide alike.

The facts kept per schedule (:class:`Facts`) are few: how many finished
runs failed in a row, which ticks are overdue to start (late) or to finish
(running long), whether the last decided tick was missed, and whether any
run happened.  The health is a function of them (:func:`health_of`); an
alert goes out when it changes into a problem or back to ``ok``, once the
change has lasted ``alert_for`` (:func:`announce`, Alertmanager's ``for:``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from .records import PROBLEMS

__all__ = ["Facts", "Policy", "announce", "health_of"]

# Overdue ticks remembered per schedule: enough to tell one stuck run from
# the next; older ones are superseded anyway.
_REMEMBERED = 20


@dataclasses.dataclass(frozen=True)
class Policy:
    """A schedule's thresholds, resolved (see ``Schedule(grace=...)``)."""

    grace_ms: int
    max_runtime_ms: int
    failure_threshold: int
    #: The schedule's jitter: a message may be held back that long before
    #: its ``grace`` starts counting.
    jitter_ms: int = 0
    #: How long a change of health must last before it alerts (see
    #: :func:`announce`); 0 alerts every change at once.
    alert_for_ms: int = 0


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the leader remembers of a schedule (stored as JSON in
    ``{prefix}:health``), and the health it last decided from them."""

    health: str = "pending"
    since_ms: int | None = None
    #: Finished runs that failed in a row (a success resets it).
    fails: int = 0
    #: Ticks fired and not started within ``grace``.
    late: tuple[int, ...] = ()
    #: Ticks started and not finished within ``max_runtime``.
    long: tuple[int, ...] = ()
    #: The last decided tick was recorded as missed (no run will come).
    missed: bool = False
    #: Some run started or finished.
    ran: bool = False
    #: The newest tick whose run started: an older tick's deadline passing
    #: later is no news (its message was overtaken, the workers consume).
    last_start: int | None = None
    #: The tick and error of the event that last changed the health.
    tick_ms: int | None = None
    error: str | None = None
    #: The health the last alert announced (``pending`` or ``ok`` before any).
    announced: str = "pending"
    #: Since when the schedule has been in trouble (a problem health, with
    #: returns to ``ok`` shorter than ``alert_for`` not ending it).
    trouble_since: int | None = None
    #: Since when its health has been no problem (None: it is one now).
    ok_since: int | None = None

    # -- events ------------------------------------------------------------

    def fired(self, tick_ms: int) -> Facts:
        """A tick was enqueued: nothing is missed any more."""
        return dataclasses.replace(self, missed=False) if self.missed else self

    def was_missed(self, tick_ms: int | None) -> Facts:
        """The ledger recorded a tick as missed."""
        return dataclasses.replace(self, missed=True, tick_ms=tick_ms)

    def started(self, tick_ms: int) -> Facts:
        """A run of ``tick_ms`` started: it and every older tick are no
        longer late, and older runs still open are superseded."""
        return dataclasses.replace(
            self,
            late=tuple(t for t in self.late if t > tick_ms),
            long=tuple(t for t in self.long if t > tick_ms),
            missed=False,
            ran=True,
            tick_ms=tick_ms,
            last_start=tick_ms if self.last_start is None else max(self.last_start, tick_ms),
        )

    def finished(self, tick_ms: int, outcome: str, error: str | None) -> Facts:
        """A run of ``tick_ms`` finished with ``outcome``.  A ``dropped``
        message never ran: it is no start (its tick may still turn late)."""
        if outcome == "dropped":
            return dataclasses.replace(self, long=tuple(t for t in self.long if t != tick_ms))
        facts = self.started(tick_ms)
        if outcome == "succeeded":
            return dataclasses.replace(facts, fails=0, error=None)
        if outcome == "failed":
            return dataclasses.replace(facts, fails=facts.fails + 1, error=error)
        return facts  # retrying (the final attempt decides), dropped

    def overdue(self, tick_ms: int, *, running: bool) -> Facts:
        """A deadline passed: the run of ``tick_ms`` did not start within
        ``grace`` (``running`` False) or finish within ``max_runtime``."""
        if running:
            return dataclasses.replace(self, long=_remember(self.long, tick_ms), tick_ms=tick_ms)
        if self.last_start is not None and tick_ms <= self.last_start:
            return self
        return dataclasses.replace(self, late=_remember(self.late, tick_ms), tick_ms=tick_ms)

    # -- the stored form ---------------------------------------------------

    def dumps(self) -> str:
        return json.dumps({_STORED_AS.get(f.name, f.name): getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def loads(cls, text: str | bytes | None) -> Facts:
        """The stored form; a missing or unusable value is a fresh start."""
        if text is None:
            return cls()
        try:
            data: Any = json.loads(text)
            raw = {f.name: data.get(_STORED_AS.get(f.name, f.name), f.default) for f in dataclasses.fields(cls)}
            # Stored before alerts were damped: what it decided was announced.
            raw.update(health=data["health"], announced=data.get("announced") or data["health"])
            return cls(**{name: _READ.get(name, _ms)(value) for name, value in raw.items()})
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()


# The stored JSON's keys that are not the field's name, and how each field
# is read back (an instant or None unless said here).
_STORED_AS = {"since_ms": "since", "tick_ms": "tick"}
_READ: dict[str, Callable[[Any], Any]] = {
    "health": str,
    "announced": str,
    "fails": int,
    "late": lambda ticks: tuple(int(t) for t in ticks),
    "long": lambda ticks: tuple(int(t) for t in ticks),
    "missed": bool,
    "ran": bool,
    "error": lambda error: error if isinstance(error, str) else None,
}


def health_of(facts: Facts, policy: Policy) -> str:
    """The health the facts say, the worst first: ``failing``, ``missed``,
    ``running_long``, ``late``, then ``ok`` once anything ran, else
    ``pending``.  (``paused`` is not decided here: it is the paused set's.)"""
    if facts.fails >= policy.failure_threshold:
        return "failing"
    if facts.missed:
        return "missed"
    if facts.long:
        return "running_long"
    if facts.late:
        return "late"
    return "ok" if facts.ran else "pending"


def announce(facts: Facts, now_ms: int, hold_ms: int) -> tuple[Facts, str | None, int | None]:
    """Damp alerts (facts.health is the health just decided): a change
    alerts only once it has lasted ``hold_ms``.

    - A problem alerts once the schedule has been in trouble for
      ``hold_ms``: in problem healths, where a return to ``ok`` shorter than
      ``hold_ms`` does not end the trouble (a chronically slow job flapping
      ``ok`` -> ``running_long`` -> ``ok`` is one episode, one alert).  A
      change to another problem during an announced trouble alerts at once.
    - The recovery alerts once the health has been ``ok`` for ``hold_ms``.
    - ``pending`` -> ``ok`` never alerts; ``hold_ms`` 0 alerts every change
      into a problem or back to ``ok`` at once.

    Returns the facts with the announcement's state, the health the
    previous announcement said when this decision alerts (else None), and
    when a pending change is due to be looked at again (else None)."""
    health = facts.health
    problem = health in PROBLEMS
    trouble, ok = facts.trouble_since, facts.ok_since
    if problem:
        ok = None
        trouble = now_ms if trouble is None else trouble
    else:
        ok = now_ms if ok is None else ok
        if trouble is not None and now_ms - ok >= hold_ms:
            trouble = None
    announced, previous, wake = facts.announced, None, None
    if problem and health != announced:
        assert trouble is not None
        if now_ms - trouble >= hold_ms:
            previous, announced = announced, health
        else:
            wake = trouble + hold_ms
    elif not problem and announced in PROBLEMS:
        assert ok is not None
        if health != "ok":
            pass  # (no problem, not ok: pending; it cannot follow a run)
        elif now_ms - ok >= hold_ms:
            previous, announced = announced, health
        else:
            wake = ok + hold_ms
    elif not problem:
        announced = health
    out = dataclasses.replace(facts, announced=announced, trouble_since=trouble, ok_since=ok)
    return out, previous, wake


def _ms(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _remember(ticks: tuple[int, ...], tick_ms: int) -> tuple[int, ...]:
    if tick_ms in ticks:
        return ticks
    return tuple(sorted((*ticks, tick_ms)))[-_REMEMBERED:]
