"""Schedule ids: the one grammar of the ids that ``list`` prints and every
command, the dashboard and the Python API take.

- ``actor``: an actor's one unnamed declared schedule;
- ``actor/name``: a declared schedule given ``name=``;
- ``actor:name``: a runtime schedule;
- and, not a schedule's, ``actor:*``: every schedule of an actor in the
  paused set (:func:`whole_actor`).

A name matches :data:`NAME_PATTERN` (no ``/``, no ``:``) and a
runtime schedule's actor holds neither character, so :func:`parse_id` of
:func:`format_id` gives back what was formatted.  A declared actor may be
named anything dramatiq accepts; an id is cut at its *last* ``/`` or
``:``, and only where a valid name follows, so ``<b>x</b>/nightly`` is
the schedule ``nightly`` of the actor ``<b>x</b>``.  (An unnamed schedule
of an actor whose own name ends like ``/name`` reads as a named one: the
resolver compares ids with the schedules it knows before it parses.)

:func:`parse_id` is total: it also reads ids stored in Redis (history
entries, run events), which are never refused there.  What an operator or
a caller gives as a runtime schedule's id or parts goes through
:func:`split_runtime_id` and :func:`runtime_id`, which refuse a bad one
naming it; :func:`check_declared_actor` keeps ``:`` out of declared actors'
names.
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import CronScheduleError, shown

__all__ = [
    "NAME_PATTERN",
    "NAME_RULE",
    "ScheduleId",
    "check_declared_actor",
    "check_runtime_actor",
    "format_id",
    "parse_id",
    "runtime_id",
    "split_runtime_id",
    "whole_actor",
]

#: What a schedule's name may be, declared (``name=``) or runtime: a short
#: identifier, so that ids (``actor/name``, ``actor:name``) are never
#: ambiguous.  (``\Z``, not ``$``, which would also accept a trailing newline.)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
#: The rule, as errors state it.
NAME_RULE = "name must be 1 to 64 letters, digits, '_', '.' or '-' (it is part of the schedule's id)"


@dataclasses.dataclass(frozen=True)
class ScheduleId:
    """An id's parts: the actor, the name (None for an unnamed declared
    schedule), and whether it is a runtime schedule's."""

    actor: str
    name: str | None = None
    runtime: bool = False

    def __str__(self) -> str:
        return format_id(self.actor, self.name, runtime=self.runtime)


def format_id(actor: str, name: str | None, *, runtime: bool = False) -> str:
    """The id of the schedule ``name`` of ``actor`` (None: its unnamed one);
    ``runtime`` for a runtime schedule (which always has a name)."""
    if runtime:
        return f"{actor}:{name}"
    return actor if name is None else f"{actor}/{name}"


def parse_id(text: str) -> ScheduleId:
    """The parts of a schedule id (see the module docstring)."""
    actor, sep, name = text.rpartition(":")
    if sep and actor and "/" not in actor and ":" not in actor and NAME_PATTERN.match(name):
        return ScheduleId(actor, name, runtime=True)
    actor, sep, name = text.rpartition("/")
    if sep and actor and NAME_PATTERN.match(name):
        return ScheduleId(actor, name)
    return ScheduleId(text)


def whole_actor(actor_name: str) -> str:
    """The paused set's member that pauses every schedule of an actor,
    declared and runtime: ``<actor>:*``.  A single schedule is paused by its
    id, and an actor's unnamed schedule has the actor's name as its id, so
    the whole actor needs a member no schedule id can be (``*`` is no
    runtime schedule's name, and declared ids have no ``:`` in their actor
    part)."""
    return f"{actor_name}:*"


def runtime_id(actor: str, name: object) -> str:
    """:func:`format_id` of a runtime schedule, its parts checked.

    Raises:
      CronScheduleError: an actor name or a name no runtime schedule can
        have, naming it.
    """
    check_runtime_actor(actor)
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CronScheduleError(f"runtime schedule of {shown(actor)}: {NAME_RULE}, got {shown(name)}")
    return f"{actor}:{name}"


def split_runtime_id(schedule_id: object) -> tuple[str, str]:
    """A runtime schedule's id, ``actor:name``, as its two parts.

    Raises:
      CronScheduleError: not a runtime schedule's id (naming it).
    """
    actor, sep, name = schedule_id.partition(":") if isinstance(schedule_id, str) else ("", "", "")
    if not sep or not actor or not name:
        raise CronScheduleError(
            f"a runtime schedule's id is 'actor:name' (see list), got {shown(schedule_id)}"
            + (" (a declared schedule: change it in code)" if isinstance(schedule_id, str) and schedule_id else "")
        )
    runtime_id(actor, name)
    return actor, name


def check_runtime_actor(name: str) -> None:
    """Refuse an actor name a runtime schedule cannot have: dramatiq itself
    accepts any, but runtime ids are ``actor:name`` and declared ids
    ``actor/...``, so these two characters would make an id ambiguous."""
    if not name or ":" in name or "/" in name:
        raise CronScheduleError(f"runtime schedule: actor name {shown(name)} must be non-empty, without ':' or '/'")


def check_declared_actor(name: str) -> None:
    """Refuse a cron actor's name with a ``:``, which marks runtime ids."""
    if ":" in name:
        raise CronScheduleError(
            f"actor {shown(name)}: a cron actor's name cannot contain ':' (it marks runtime schedules in the ledger)"
        )
