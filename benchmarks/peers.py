"""Scenarios running the peers, as published packages from their own venv
(``PEERS_VENV``), against the same Redis servers as ours.

- dramatiq-crontab 1.2.1: ``python manage.py crontab`` (Django), lock =
  redis-py ``Lock`` on key ``dramatiq-scheduler`` (TTL 10 s, extended every
  5 s; a standby blocks up to 15 s polling for it, then exits).
- periodiq 0.14: ``periodiq periodiq_app``; no lock at all.

Both schedule by the minute (5-field crontab), so fire lag is measured at
minute boundaries.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.measure import Monitor, commands_by_pid, percentiles, socket_owners
from benchmarks.ours import Stage
from tests.support.instances import stop_group, wait_for

HERE = Path(__file__).resolve().parent / "peers"
LOCK_KEY = "dramatiq-scheduler"


class Peer:
    """One peer scheduler process in its own process group."""

    def __init__(
        self, venv: str, kind: str, stage: Stage, record: str, *, count: int = 1, interval: bool = False
    ) -> None:
        env = {
            **os.environ,
            "PEER_LOCK_URL": stage.lease.url,
            "PEER_BROKER_URL": stage.broker.url,
            "PEER_RECORD": record,
            "PEER_COUNT": str(count),
            "PEER_INTERVAL": "1" if interval else "0",
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "crontab_settings",
        }
        env.pop("PYTHONPATH", None)
        if kind == "crontab":
            args = [f"{venv}/bin/python", "manage.py", "crontab", "--no-heartbeat"]
        else:
            args = [f"{venv}/bin/periodiq", "periodiq_app"]
        fd, self.log_path = tempfile.mkstemp(prefix=f"peer-{kind}-", suffix=".log")
        self.log = os.fdopen(fd, "w")
        self.proc = subprocess.Popen(
            args, cwd=HERE, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def text(self) -> str:
        """What the peer printed so far."""
        return Path(self.log_path).read_text(errors="replace")

    def close(self) -> None:
        """Stop it by pid (SIGTERM, then SIGKILL of its group)."""
        stop_group(self.proc, grace=5)
        self.log.close()


def _records(record: str) -> list[tuple[str, float, int]]:
    out = []
    for path in glob.glob(os.path.join(record, "lag-*.tsv")):
        pid = int(Path(path).stem.split("-")[1])
        for line in Path(path).read_text().splitlines():
            tick, at = line.split("\t")
            out.append((tick, float(at), pid))
    return out


def _minute_lags(record: str, boundary: float) -> tuple[list[float], int]:
    """Lags of enqueues for the minute tick ``boundary``, and how many
    enqueues each (schedule, tick) got beyond the first."""
    lags = []
    for tick, at, _pid in _records(record):
        if tick != "-":
            stamp = dt.datetime.fromisoformat(tick).timestamp()
            if stamp != boundary:
                continue  # periodiq also fires once "now" at start-up
        elif not boundary <= at < boundary + 30:
            continue
        lags.append((at - boundary) * 1000)
    return lags, 0


def _next_boundary(min_lead: float = 4.0) -> float:
    now = time.time()
    boundary = (int(now) // 60 + 1) * 60
    if boundary - now < min_lead:
        boundary += 60
    return float(boundary)


def minute_lags(stage: Stage, venv: str, *, count: int) -> dict[str, Any]:
    """Both peers (and a second periodiq, to show what no lock means) with
    ``count`` actors each, through one minute boundary."""
    stage.wipe()
    records = {name: tempfile.mkdtemp(prefix=f"peer-{name}-") for name in ("crontab", "periodiq", "periodiq2")}
    boundary = _next_boundary(6.0 if count > 1 else 4.0)
    peers = [
        Peer(venv, "crontab", stage, records["crontab"], count=count),
        Peer(venv, "periodiq", stage, records["periodiq"], count=count),
    ]
    if count == 1:
        peers.append(Peer(venv, "periodiq", stage, records["periodiq2"], count=count))
    try:
        time.sleep(max(0.0, boundary + 3.0 + count / 200 - time.time()))
    finally:
        for peer in peers:
            peer.close()
    out: dict[str, Any] = {"count": count, "boundary": boundary}
    crontab, _ = _minute_lags(records["crontab"], boundary)
    periodiq, _ = _minute_lags(records["periodiq"], boundary)
    out["crontab_lag_ms"] = percentiles(crontab)
    out["periodiq_lag_ms"] = percentiles(periodiq)
    if count == 1:
        second, _ = _minute_lags(records["periodiq2"], boundary)
        out["periodiq_two_instances_enqueues_per_tick"] = len(periodiq) + len(second)
    for path in records.values():
        shutil.rmtree(path, ignore_errors=True)
    return out


def crontab_takeover(stage: Stage, venv: str, *, how: str) -> dict[str, Any]:
    """A standby crontab (blocking on the lock) takes over from a leader
    stopped by SIGTERM or kill -9; time from the signal to the lock holding
    a new token, seen by polling every 2 ms."""
    stage.wipe()
    record = tempfile.mkdtemp(prefix="peer-takeover-")
    client = stage.lease.client()
    leader = Peer(venv, "crontab", stage, record)
    standby = None
    try:
        old = wait_for(lambda: client.get(LOCK_KEY), timeout=20, what="crontab to take its lock")
        standby = Peer(venv, "crontab", stage, record)
        wait_for(lambda: "Acquiring lock" in standby.text(), timeout=20, what="crontab standby")
        time.sleep(0.5)
        sent = time.time()
        if how == "sigterm":
            leader.proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(leader.proc.pid, signal.SIGKILL)
        try:
            wait_for(
                lambda: (v := client.get(LOCK_KEY)) is not None and v != old,
                timeout=16,
                interval=0.002,
                what="crontab takeover",
            )
            took: float | None = (time.time() - sent) * 1000
        except AssertionError:
            took = None  # the standby gave up (its 15 s blocking timeout)
    finally:
        leader.close()
        if standby is not None:
            standby.close()
        client.close()
        shutil.rmtree(record, ignore_errors=True)
    return {"how": how, "takeover_ms": None if took is None else round(took, 1)}


def crontab_lock_deletion(stage: Stage, venv: str, *, seconds: float) -> dict[str, Any]:
    """Leader and standby crontab with a one-second interval actor; the
    lock key is deleted once.  Counts the seconds in which both sent
    (duplicates) and whether the deposed one stopped."""
    stage.wipe()
    record = tempfile.mkdtemp(prefix="peer-dup-")
    client = stage.lease.client()
    leader = Peer(venv, "crontab", stage, record, interval=True)
    standby = None
    try:
        wait_for(lambda: client.get(LOCK_KEY), timeout=20, what="crontab to take its lock")
        standby = Peer(venv, "crontab", stage, record, interval=True)
        wait_for(lambda: "Acquiring lock" in standby.text(), timeout=20, what="crontab standby")
        time.sleep(1.5)
        deleted = time.time()
        client.delete(LOCK_KEY)
        time.sleep(seconds)
        leader_alive = leader.proc.poll() is None
        log = leader.text()
    finally:
        leader.close()
        if standby is not None:
            standby.close()
        client.close()
    rows = _records(record)
    shutil.rmtree(record, ignore_errors=True)
    by_pid: dict[int, list[float]] = {}
    for _tick, at, pid in rows:
        if at >= deleted:
            by_pid.setdefault(pid, []).append(at)
    old_pid = leader.proc.pid
    old_sends = by_pid.get(old_pid, [])
    new_sends = [a for p, ats in by_pid.items() if p != old_pid for a in ats]
    overlap = [a for a in old_sends if new_sends and a >= min(new_sends) - 1]
    return {
        "duplicate_sends": len(overlap),
        "old_leader_sends_after_deletion": len(old_sends),
        "old_leader_still_running": leader_alive,
        "lock_not_owned_errors": log.count("LockNotOwnedError"),
    }


def crontab_redis_cost(stage: Stage, venv: str, *, seconds: float) -> dict[str, Any]:
    """Lock-Redis round trips per second of a crontab leader and of two
    standbys blocking on its lock."""
    stage.wipe()
    record = tempfile.mkdtemp(prefix="peer-cost-")
    client = stage.lease.client()
    leader = Peer(venv, "crontab", stage, record)
    standbys: list[Peer] = []
    try:
        wait_for(lambda: client.get(LOCK_KEY), timeout=20, what="crontab to take its lock")
        standbys = [Peer(venv, "crontab", stage, record) for _ in range(2)]
        for s in standbys:
            wait_for(lambda s=s: "Acquiring lock" in s.text(), timeout=20, what="crontab standby")
        time.sleep(0.5)
        monitor = Monitor(stage.lease.port)
        time.sleep(min(seconds, 12.0))  # a standby gives up after 15 s
        monitor.stop()
        owners = socket_owners(stage.lease.port)
    finally:
        leader.close()
        for s in standbys:
            s.close()
        client.close()
        shutil.rmtree(record, ignore_errors=True)
    per_pid, _unknown, _inside = commands_by_pid(monitor, owners)
    window = monitor.elapsed
    return {
        "window_s": round(window, 1),
        "leader_cmds_per_s": round(per_pid.get(leader.proc.pid, 0) / window, 3),
        "standby_cmds_per_s": [round(per_pid.get(s.proc.pid, 0) / window, 3) for s in standbys],
    }
