"""One WARNING per finding or fault episode, however often it is seen again."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from ..store.codes import Corrupt, SyncCode
from ..store.connection import credentials_refused
from ..store.keys import Keys
from ..store.ledger import SyncReply

__all__ = ["Episode", "Flapping", "OnceReports", "Reports", "credentials_problem", "names_of"]

K = TypeVar("K", bound=Hashable)


class Episode(Generic[K]):
    """A fault that comes and goes, reported once when it starts (or
    changes kind) and once when it ends, never per retry.  Safe to share
    between threads: of threads failing at once, one sees the start.

    The caller logs; this only says when: ``if episode.failing(kind):``
    WARN that it fails, ``if episode.recovered() is not None:`` WARN that it
    works again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kind: K | None = None

    def failing(self, kind: K) -> bool:
        """Record the fault ``kind``: True when it is new (report it)."""
        with self._lock:
            new, self._kind = kind != self._kind, kind
            return new

    def recovered(self) -> K | None:
        """Record that it works: the kind of fault this ends (report it), or
        None when nothing was failing."""
        if self._kind is None:  # the common case, without the lock
            return None
        with self._lock:
            ended, self._kind = self._kind, None
            return ended


class OnceReports:
    """Logs each finding (a corrupt key, an unusable entry, an undeclared
    actor...) once, the first time it is seen: the leader sees the same
    ones at every turn."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._seen: set[str] = set()

    def __call__(self, what: str, message: str, *args: object) -> None:
        """WARN ``message % args`` unless ``what`` was reported before."""
        if what in self._seen:
            return
        self._seen.add(what)
        self.logger.warning("Cron scheduler: " + message + ".", *args)


class Flapping:
    """Turns a repeating fault into one WARNING: the first occurrence warns,
    repeats within ``quiet`` seconds are reported at INFO."""

    def __init__(self, quiet: float = 600.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.quiet = quiet
        self.monotonic = monotonic
        self._lost_data = -float("inf")
        self._lost_lead = -float("inf")

    def first(self) -> bool:
        """A data loss: True when it is the first for a while."""
        now = self.monotonic()
        first = now - self._lost_data >= self.quiet
        self._lost_data = now
        return first

    def first_loss_of_lead(self) -> bool:
        """A lost leadership: True when it is the first for a while."""
        now = self.monotonic()
        first = now - self._lost_lead >= self.quiet
        self._lost_lead = now
        return first


_KEY_NAMES = {
    Corrupt.LEASE: "lease",
    Corrupt.EPOCH: "epoch",
    Corrupt.CANDIDATES: "candidates",
    Corrupt.TICKS: "ticks",
    Corrupt.HISTORY: "history",
    Corrupt.PAUSED: "paused",
    Corrupt.BATCH: "batch",
    Corrupt.RUNTIME_REVS: "runtime_revs",
}


@dataclasses.dataclass(frozen=True)
class Reports:
    """What the leader's parts report through, shared by them: the logger,
    one WARNING per finding (``once``), the flapping of losses, and the
    keys a corrupt reply is reported by."""

    logger: logging.Logger
    keys: Keys
    once: OnceReports
    losses: Flapping

    @classmethod
    def to(cls, logger: logging.Logger, keys: Keys, *, losses: Flapping | None = None) -> Reports:
        """Fresh reports into ``logger``."""
        return cls(logger=logger, keys=keys, once=OnceReports(logger), losses=losses or Flapping())

    def synced(self, reply: SyncReply) -> None:
        """What a sync found: keys flagged as corrupt, a lost ledger (one
        WARNING for a while), schedules reshaped under their identity
        (INFO), unparsable or future entries (one WARNING each)."""
        self.corrupt(reply.corrupt)
        if reply.ledger_lost and self.losses.first():
            self.logger.warning(
                "The cron ledger was gone (evicted, flushed or a restart without data): every schedule "
                "restarts from now; recorded in the history."
            )
        reshaped = [sid for sid, code in reply.codes.items() if code == SyncCode.RESHAPED]
        if reshaped:
            self.logger.info(
                "Cron schedules changed under the same identity start from now (no catch-up of the new "
                "shape's ticks): %s.",
                names_of(reshaped),
            )
        for sid, code in reply.codes.items():
            if code == SyncCode.CORRUPT:
                self.once(
                    f"corrupt:{sid}",
                    "the ledger entry of %s in %s is unparsable; replaced by a baseline at now",
                    sid,
                    self.keys.ticks,
                )
            elif code == SyncCode.FUTURE:
                self.once(
                    f"future:{sid}",
                    "the ledger entry of %s in %s lay in the future (a stepped clock); replaced by a baseline at now",
                    sid,
                    self.keys.ticks,
                )

    def corrupt(self, corrupt: Corrupt) -> None:
        """One WARNING per key a reply flagged as holding an unusable value."""
        for flag, name in _KEY_NAMES.items():
            if corrupt & flag:
                key = getattr(self.keys, name) if name != "batch" else f"{self.keys.tag}:batch:*"
                self.once(f"key:{name}", "key %s holds an unusable value; treated as missing", key)


def credentials_problem(exc: BaseException) -> str | None:
    """Redis refusing the scheduler's credentials, in words (no protocol
    terms: redis-py's HELLO error for a missing password included), else None."""
    refused = credentials_refused(exc, "")
    if refused is None:
        return None
    if refused.startswith("Redis requires a password"):
        return (
            "Redis requires a password and the cron scheduler's URL gives none (put it in the URL as "
            "':PASSWORD@', percent-encoded)"
        )
    return "Redis refused the cron scheduler's password (a wrong password, or the user is disabled)"


def names_of(ids: Sequence[str] | dict[str, str]) -> str:
    names = sorted(set(ids))
    shown = ", ".join(names[:5])
    return shown if len(names) <= 5 else f"{shown} and {len(names) - 5} more"
