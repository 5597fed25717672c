"""The Redis server the scheduler talks to: who it is, and whether it may
evict the scheduler's keys.

A vanished epoch counter or ledger means data loss, but not always a
failover.  Only a failover can leave an old master that still accepts an
old leader's writes, so only a failover needs the new leader to wait a
lease before its first fire.  The server's ``run_id`` (new after every
restart, different on another server) and its replication history tell
them apart: after an eviction or a FLUSHALL both are unchanged; a promoted
replica carries its former master's replication id as ``master_replid2``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging

import redis

__all__ = ["DataLoss", "EvictionPolicy", "ServerIdentity", "check_eviction_policy", "classify_loss", "identify"]

_NO_REPLID = "0" * 40


@dataclasses.dataclass(frozen=True)
class ServerIdentity:
    """What ``INFO`` says about the server."""

    run_id: str
    role: str
    #: The replication id this server inherited when it was promoted, or
    #: "" when it never was a replica (or Redis would not say).
    inherited_replid: str


class DataLoss(str, enum.Enum):
    """Why the scheduler's keys vanished."""

    #: Same server, same life: evicted or flushed.  No old master exists.
    EVICTED_OR_FLUSHED = "evicted or flushed"
    #: Same address, a fresh server: a restart without persistence.
    RESTARTED = "restarted"
    #: Another server took over the role: a failover.
    FAILOVER = "failover"
    #: The server would not say (INFO refused): assume a failover.
    UNKNOWN = "unknown"


class EvictionPolicy(str, enum.Enum):
    """How ``maxmemory-policy`` treats the scheduler's keys."""

    SAFE = "safe"
    #: ``volatile-*``: the lease, batch records and running marks (keys
    #: with a TTL) may be evicted.
    VOLATILE = "volatile"
    #: ``allkeys-*``: the ledger and the epoch counter may be evicted.
    ALLKEYS = "allkeys"
    UNKNOWN = "unknown"


def identify(client: redis.Redis) -> ServerIdentity | None:
    """Ask the server who it is; None when ``INFO`` is refused."""
    try:
        server = client.info("server")
        replication = client.info("replication")
    except redis.ResponseError:  # NoPermissionError included: ACLs, managed services
        return None
    replid2 = str(replication.get("master_replid2", "") or "")
    return ServerIdentity(
        run_id=str(server.get("run_id", "")),
        role=str(replication.get("role", "")),
        inherited_replid="" if replid2 in ("", _NO_REPLID) else replid2,
    )


def classify_loss(before: ServerIdentity | None, after: ServerIdentity | None) -> DataLoss:
    """Tell eviction, a restart and a failover apart."""
    if before is None or after is None:
        return DataLoss.UNKNOWN
    if after.run_id == before.run_id:
        return DataLoss.EVICTED_OR_FLUSHED if after.role == before.role else DataLoss.FAILOVER
    if after.inherited_replid and after.inherited_replid != before.inherited_replid:
        return DataLoss.FAILOVER
    return DataLoss.RESTARTED


def check_eviction_policy(client: redis.Redis, logger: logging.Logger, *, where: str) -> EvictionPolicy:
    """Read ``maxmemory-policy`` (where ``CONFIG`` is allowed) and warn once
    when it can evict the scheduler's keys."""
    try:
        reply = client.config_get("maxmemory-policy")
    except redis.ResponseError:  # CONFIG refused by ACLs or a managed service
        logger.debug("Cannot read maxmemory-policy on %s (CONFIG refused).", where)
        return EvictionPolicy.UNKNOWN
    policy = str(reply.get("maxmemory-policy", "")) if isinstance(reply, dict) else ""
    if policy.startswith("allkeys-"):
        logger.warning(
            "Redis at %s has maxmemory-policy %s: under memory pressure it can evict the cron ledger and epoch "
            "counter (schedules then restart from now and ticks can be lost). Use maxmemory-policy noeviction "
            "for the scheduler's Redis.",
            where,
            policy,
        )
        return EvictionPolicy.ALLKEYS
    if policy.startswith("volatile-"):
        logger.warning(
            "Redis at %s has maxmemory-policy %s: under memory pressure it can evict the cron lease and batch "
            "records (leadership changes more often and a granted tick can be lost). Use maxmemory-policy "
            "noeviction for the scheduler's Redis.",
            where,
            policy,
        )
        return EvictionPolicy.VOLATILE
    return EvictionPolicy.SAFE if policy else EvictionPolicy.UNKNOWN
