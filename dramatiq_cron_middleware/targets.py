"""What an operator names: one schedule (by its id), an actor with a single
schedule, or every schedule of an actor; resolved the same way for the
Python API, the ``dramatiq-cron`` command and the dashboard."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from .errors import CronScheduleError, shown
from .schedules.ids import parse_id
from .schedules.schedule import BoundSchedule
from .store.codes import whole_actor
from .store.operator import entry_actor as actor_of

__all__ = [
    "AmbiguousTarget",
    "RuntimeCatalogue",
    "Target",
    "UnknownTarget",
    "actor_of",
    "find_runtime",
    "paused_by",
    "resolve_target",
]


class RuntimeCatalogue(Protocol):
    """What operator tools need of the runtime schedules: the part of
    :class:`~dramatiq_cron_middleware.store.runtime.RuntimeSchedules` they call."""

    def list(
        self, *, actor: object | None = None, search: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> Any:
        """A page of runtime schedules (``items``, ``cursor``, ``total``)."""

    def get(self, actor: object, name: str) -> Any:
        """One runtime schedule (with ``.schedule``), or None."""


def find_runtime(runtime: RuntimeCatalogue, schedule_id: str) -> BoundSchedule | None:
    """The runtime schedule with this id (``actor:name``), if any."""
    parsed = parse_id(schedule_id)
    actor, name = parsed.actor, parsed.name
    if not parsed.runtime or name is None:
        return None
    try:
        record = runtime.get(actor, name)
    except CronScheduleError:  # not a valid runtime name: not one of them
        return None
    return None if record is None else record.schedule


@dataclasses.dataclass(frozen=True)
class Target:
    """What an operator acts on: one schedule, or every schedule of an actor
    (declared and runtime) when ``schedule_id`` is None."""

    actor_name: str
    schedule_id: str | None
    #: The schedule, when this process knows it (None for a whole actor, and
    #: for a paused schedule the app no longer declares).
    schedule: BoundSchedule | None = None

    @classmethod
    def of(cls, schedule: BoundSchedule) -> Target:
        """That schedule alone."""
        return cls(schedule.actor_name, schedule.id, schedule)

    @property
    def member(self) -> str:
        """Its member of the paused set: the schedule's id, or
        ``<actor>:*`` for the whole actor (an actor's unnamed schedule has
        the actor's name as its id, so the actor needs a member of its own)."""
        return self.schedule_id if self.schedule_id is not None else whole_actor(self.actor_name)

    def __str__(self) -> str:
        return self.schedule_id if self.schedule_id is not None else f"every schedule of actor {self.actor_name}"


class UnknownTarget(CronScheduleError):
    """No schedule or actor by that name; the message says which."""


class AmbiguousTarget(CronScheduleError):
    """An actor name that stands for several schedules.

    ``actor`` is the name, ``total`` how many schedules it has, and
    ``choices`` the ids of the first few, to choose from.
    """

    def __init__(self, actor: str, total: int, choices: list[str]) -> None:
        self.actor = actor
        self.total = total
        self.choices = choices
        listed = ", ".join(choices) + (", ..." if total > len(choices) else "")
        super().__init__(f"actor {shown(actor)} has {total} schedules ({listed})")


#: How many schedule ids an :class:`AmbiguousTarget` lists.
_CHOICES = 5


def resolve_target(
    *,
    declared: Sequence[BoundSchedule],
    runtime: RuntimeCatalogue | None,
    name: str | None = None,
    schedule_id: str | None = None,
    actor: str | None = None,
    paused: Collection[str] = (),
) -> Target:
    """The one thing an operator named, for the command and the dashboard
    alike.  Give exactly one of:

    - ``schedule_id``: exactly that schedule (``actor``, ``actor/name`` or a
      runtime ``actor:name``);
    - ``name``: a schedule id (every id ``list`` prints: an actor's unnamed
      schedule is known by its actor's name, and that name is then its id),
      else an actor with a single schedule (an actor name that is no id
      and has several schedules, declared or runtime, is refused: acting
      on the wrong one, or on all, is worse than asking);
    - ``actor``: every schedule of that actor, said explicitly.

    A target that is in ``paused`` is found even when the app no longer
    knows it, so whatever is paused can be resumed.

    Raises:
      UnknownTarget: nothing by that name.
      AmbiguousTarget: ``name`` is an actor with several schedules.
    """
    if [name, schedule_id, actor].count(None) != 2:
        raise ValueError("resolve_target() takes exactly one of name=, schedule_id= or actor=")
    if actor is not None:
        if any(s.actor_name == actor for s in declared) or _runtime_of(runtime, actor, 1)[1]:
            return Target(actor, None)
        if whole_actor(actor) in paused:
            return Target(actor, None)
        raise UnknownTarget(f"unknown cron actor {shown(actor)}")
    text = name if name is not None else schedule_id
    assert text is not None
    found = next((s for s in declared if s.id == text), None)  # declared, else runtime
    if found is None and runtime is not None:
        found = find_runtime(runtime, text)
    if found is not None:
        # An id is exactly that schedule, also where it is its actor's name
        # too (an actor's unnamed schedule): the ids ``list`` prints work.
        return Target.of(found)
    if name is not None:
        own = [s for s in declared if s.actor_name == name]
        listed, total = _runtime_of(runtime, name, _CHOICES)
        total += len(own)
        if total == 1:
            return Target.of((own or listed)[0])
        if total > 1:
            raise AmbiguousTarget(name, total, [s.id for s in [*own, *listed][:_CHOICES]])
    if text in paused:
        return Target(actor_of(text), text)
    raise UnknownTarget(f"unknown cron {'actor or schedule' if name is not None else 'schedule'} {shown(text)}")


def _runtime_of(runtime: RuntimeCatalogue | None, actor: str, limit: int) -> tuple[list[BoundSchedule], int]:
    """The first ``limit`` runtime schedules of an actor, and how many it has."""
    if runtime is None:
        return [], 0
    try:
        page = runtime.list(actor=actor, limit=limit)
    except CronScheduleError:  # not a valid actor name for runtime schedules
        return [], 0
    return [r.schedule for r in page.items], int(page.total or len(page.items))


def paused_by(schedule: BoundSchedule, paused: Collection[str]) -> Target | None:
    """What is paused that stops this schedule (itself, or its whole actor),
    as a resume would name it; None when it runs."""
    if schedule.id in paused:
        return Target.of(schedule)
    return Target(schedule.actor_name, None) if whole_actor(schedule.actor_name) in paused else None
