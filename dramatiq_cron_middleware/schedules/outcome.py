"""The outcomes of a tick: what became of it, in the words the history,
the CLI and the dashboard show.  The store records them; the Lua scripts
get the same strings through the generated preamble of ``store/codes.py``."""

from __future__ import annotations

import enum

__all__ = ["Outcome"]


class Outcome(str, enum.Enum):
    """The outcomes recorded in the history stream."""

    FIRED = "fired"
    CAUGHT_UP = "caught_up"
    MISSED = "missed"
    SKIPPED = "skipped"
    PAUSED = "paused"
    TRIGGERED = "triggered"
    #: The ledger vanished (eviction, FLUSHALL, a restart without data):
    #: schedules restart from the server's now.
    LEDGER_LOST = "ledger_lost"
    #: A ledger entry was unusable (unparsable, or in the future after a
    #: clock step) and was replaced by a baseline at the server's now.
    REBASED = "rebased"
    #: A granted tick whose enqueue had failed, dropped before a retry
    #: because its runtime definition was removed or replaced since.
    DROPPED = "dropped"
    #: A past tick enqueued by an operator's backfill (``dramatiq-cron
    #: backfill``); the leader's ledger is left alone.
    BACKFILLED = "backfilled"

    def __str__(self) -> str:
        return self.value


#: Each outcome's value, by outcome or value (a dict lookup: ``.value`` of
#: an enum member is a property, slow on the fire path).
VALUES: dict[str, str] = {o.value: o.value for o in Outcome}
