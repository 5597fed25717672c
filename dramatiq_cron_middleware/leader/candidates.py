"""The candidates' schedule sets: what each process declares, and the one
WARNING when they differ.

Every candidate registers its schedules in the ledger before it ever leads
(so a schedule the code that leads now does not know still catches up from
the moment its first process started) and publishes its set under a
fingerprint.  The leader compares the live candidates' fingerprints with
each renewal (whose reply lists them): different sets mean a rolling deploy (the app versions
differ) or two apps sharing a prefix (they do not), and it says which,
naming the schedules that differ, once per state change.

The set carries the cron semantics too (the rules and croniter's major
version, ``schedules.expression.SEMANTICS``), under the id ``""`` that no
schedule has: two processes that could read one expression differently
have different fingerprints, and the report says so.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence

from ..schedules import expression
from ..schedules.schedule import BoundSchedule
from ..store.abc import LeaseStore, LedgerStore
from ..store.keys import Keys
from ..store.ledger import SyncEntry
from .reports import Episode, names_of

__all__ = ["SEMANTICS_ID", "ScheduleSets", "fingerprint", "published_set"]

#: The id under which a published set carries its cron semantics.
SEMANTICS_ID = ""


def published_set(schedules: Iterable[BoundSchedule]) -> dict[str, str]:
    """``{schedule id: shape}``, with the cron semantics under
    :data:`SEMANTICS_ID` when any schedule has a cron expression (interval
    schedules do not depend on croniter)."""
    shapes: dict[str, str] = {}
    cron = False
    for s in schedules:
        shapes[s.id] = s.shape
        cron = cron or s.every is None
    if cron:
        shapes[SEMANTICS_ID] = expression.SEMANTICS
    return shapes


def fingerprint(schedules: Sequence[BoundSchedule]) -> str:
    """A short digest of a schedule set (identities, shapes, and the cron
    semantics): candidates with the same code and the same reading of cron
    expressions have the same fingerprint."""
    text = "\n".join(sorted(f"{sid}={shape}" for sid, shape in published_set(schedules).items()))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:12]


class ScheduleSets:
    """This process's declared schedule set, and the mixed-set report.

    Parameters:
      declared: This process's declared schedules by id.
      lease, ledger: Where the set is published and registered.
      keys: The key names (the report names the prefix).
      logger: Where the report goes.
    """

    def __init__(
        self,
        declared: Mapping[str, BoundSchedule],
        *,
        lease: LeaseStore,
        ledger: LedgerStore,
        keys: Keys,
        logger: logging.Logger,
    ) -> None:
        self.declared = declared
        self.lease = lease
        self.ledger = ledger
        self.keys = keys
        self.logger = logger
        self.registered = False
        self._mixed: Episode[frozenset[str]] = Episode()
        #: The fingerprints the published sets were last pruned to.
        self._pruned: frozenset[str] | None = None
        #: What this process publishes (read at construction: the
        #: fingerprint the lease carries was computed then too).
        self._own = published_set(declared.values())

    def register(self) -> None:
        """Make this process's schedules known to the ledger and publish the
        set under its fingerprint (once, at the first contact with Redis)."""
        self.ledger.register([SyncEntry.of(s) for s in self.declared.values()])
        self.lease.publish_schedule_set(self._own)
        self.registered = True

    def check(self, live: Sequence[tuple[str, str]]) -> None:
        """Compare the fingerprints of the live candidates (``(fingerprint,
        version)`` each, from a renewal): one WARNING when they start to
        differ, naming the schedules, and one when they agree again."""
        fingerprints = frozenset(fp for fp, _ in live if fp)
        if len(fingerprints) <= 1:
            if self._mixed.recovered() is not None:
                self.logger.warning("Cron candidates declare the same schedule set again.")
            if self._pruned != fingerprints:  # once per change, not per renewal
                self.lease.prune_schedule_sets(set(fingerprints))
                self._pruned = fingerprints
            return
        if not self._mixed.failing(fingerprints):
            return
        own = self._own
        sets = self.lease.schedule_sets(sorted(fingerprints - {self.lease.fingerprint}))
        versions = {version for fp, version in live if fp}
        parts = [_difference(fp, theirs, own, live) for fp, theirs in sorted(sets.items())]
        semantics = {theirs.get(SEMANTICS_ID) for theirs in sets.values() if theirs is not None}
        if semantics - {own.get(SEMANTICS_ID)} and all(_same_schedules(own, t) for t in sets.values() if t):
            likely = (
                "the processes read cron expressions under different rules (a croniter of another major version, "
                "or another version of dramatiq-cron-middleware): install the same versions everywhere"
            )
        elif len(versions) > 1:
            likely = (
                "the app versions differ: a rolling deploy looks under way; this clears when every process runs "
                "the same code"
            )
        else:
            likely = (
                "the versions do not tell them apart: two apps may share the prefix "
                f"{self.keys.prefix!r}; give each app its own CronMiddleware(prefix=...)"
            )
        self.logger.warning(
            "Cron candidates declare different schedule sets (this process: set %s, version %s): %s. It looks like %s.",
            self.lease.fingerprint,
            self.lease.version or "none",
            "; ".join(parts),
            likely,
        )


def _same_schedules(own: dict[str, str], theirs: dict[str, str]) -> bool:
    return {k: v for k, v in own.items() if k != SEMANTICS_ID} == {k: v for k, v in theirs.items() if k != SEMANTICS_ID}


def _difference(
    fingerprint: str, theirs: dict[str, str] | None, own: dict[str, str], live: Sequence[tuple[str, str]]
) -> str:
    count = sum(1 for fp, _ in live if fp == fingerprint)
    versions = ", ".join(sorted({v or "no version" for fp, v in live if fp == fingerprint}))
    if theirs is None:
        return f"{count} process(es) ({versions}) with set {fingerprint} (unpublished)"
    here, there = own.get(SEMANTICS_ID), theirs.get(SEMANTICS_ID)
    semantics = ""
    if here != there:
        semantics = f", cron semantics here {here or 'none'}, there {there or 'unknown (an earlier version)'}"
    own = {k: v for k, v in own.items() if k != SEMANTICS_ID}
    theirs = {k: v for k, v in theirs.items() if k != SEMANTICS_ID}
    only_here = sorted(set(own) - set(theirs))
    only_there = sorted(set(theirs) - set(own))
    changed = sorted(sid for sid in set(own) & set(theirs) if own[sid] != theirs[sid])
    return (
        f"{count} process(es) ({versions}) with set {fingerprint}: only here {names_of(only_here) or '-'}, "
        f"only there {names_of(only_there) or '-'}, changed {names_of(changed) or '-'}{semantics}"
    )
