"""What this process's code declares, as the leader sees it."""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable, Mapping

from ..schedules.schedule import BoundSchedule

__all__ = ["Declared"]


@dataclasses.dataclass(frozen=True)
class Declared:
    """The declared schedules by id, and the actors this process's code
    declares (a runtime schedule of another actor fires too, with one
    WARNING; None: every actor counts as declared)."""

    schedules: Mapping[str, BoundSchedule]
    actors: Container[str] | None = None

    @classmethod
    def of(cls, schedules: Iterable[BoundSchedule], actors: Container[str] | None = None) -> Declared:
        """The schedules (in declaration order) and the actors."""
        return cls({s.id: s for s in schedules}, actors)

    def knows(self, actor_name: str) -> bool:
        """Whether this process's code declares the actor."""
        return self.actors is None or actor_name in self.actors
