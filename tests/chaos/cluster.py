"""A cluster under test: one lease Redis (optionally behind the fault proxy),
one broker Redis that no fault touches, and a few ``dramatiq`` instances of
tests/apps/cronapp.py.  It records every fault it injects and judges the
history of cron enqueues against them.

Times are epoch milliseconds of the real wall clock, the clock the test app
stamps its records with, so faults, ticks and enqueues compare directly.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker

from dramatiq_cron_middleware.store.keys import Keys
from tests.support.faketime import ClockShim, WallClockShim
from tests.support.instances import History, Instance, Outage, Verdict, kill_all, now_ms, wait_for
from tests.support.lifecycle import Lifecycle
from tests.support.proxy import Proxy
from tests.support.redis_server import RedisServer

__all__ = ["Cluster", "Fault", "Mark", "Report", "PROFILE", "assert_sound", "pause"]

#: ``short`` (default; CI) or ``full``.
PROFILE = os.environ.get("CHAOS_PROFILE", "short")

_CRON_WARNING = re.compile(r"\[dramatiq_cron_middleware[^\]]*\] \[WARNING\]")
_CRON_ERROR = re.compile(r"\[dramatiq_cron_middleware[^\]]*\] \[(ERROR|CRITICAL)\]")
_ANY_ERROR = re.compile(r"\] \[(ERROR|CRITICAL)\] ")
_PERIOD_MS = 1000


@dataclass
class Fault:
    """One injected fault.  ``wipes`` marks a fault that destroys the ledger
    on purpose: the ticks it costs are a declared outage, of every schedule
    or only of ``schedules`` when given.  ``figures`` are measurements the
    fault took (release and takeover times, in ms).  ``unexpected`` are
    spans ``(from ms, to ms, schedule)`` in which a schedule's ticks are not
    expected at all (a runtime schedule before its write, after its
    removal): declared outages of their own."""

    kind: str
    start_ms: int
    end_ms: int = 0
    wipes: bool = False
    detail: str = ""
    schedules: tuple[str, ...] = ()
    figures: dict[str, float] = field(default_factory=dict)
    unexpected: list[Outage] = field(default_factory=list)


@dataclass
class Mark:
    """Where a scenario started: faults, log lengths and jobs before it."""

    faults: int
    log_offsets: dict[str, int]
    jobs_sent: int


@dataclass
class Report:
    """The judgement of a run, with the figures the issue asks for."""

    verdict: Verdict
    faults: list[Fault]
    outages: list[Outage]
    gaps_ms: dict[str, list[int]] = field(default_factory=dict)
    warnings: int = 0
    cron_errors: list[str] = field(default_factory=list)
    tracebacks: int = 0
    jobs_sent: int = 0
    jobs_done: int = 0

    @property
    def worst_gap_ms(self) -> int:
        """The longest silence beyond one period, over every fault."""
        return max((g for gaps in self.gaps_ms.values() for g in gaps), default=0)

    def lag_ms(self, quantile: float) -> float:
        """A quantile of fire lag (enqueue time minus tick)."""
        lags = sorted(self.verdict.lags_ms)
        if not lags:
            return 0.0
        return lags[min(len(lags) - 1, int(quantile * len(lags)))]

    def faults_by_kind(self) -> dict[str, int]:
        """How many faults of each kind were injected."""
        out: dict[str, int] = {}
        for fault in self.faults:
            out[fault.kind] = out.get(fault.kind, 0) + 1
        return out

    def as_dict(self) -> dict[str, Any]:
        """The figures, for JSON."""
        return {
            "faults_by_kind": self.faults_by_kind(),
            "ticks_expected": self.verdict.expected,
            "duplicates": len(self.verdict.duplicates),
            "early_fires": len(self.verdict.early),
            "losses_outside_outages": len(self.verdict.losses),
            "declared_outage_ms": sum(hi - lo for lo, hi, _ in self.outages),
            "lost_in_declared_outages": self.verdict.excused,
            "worst_takeover_gap_ms": self.worst_gap_ms,
            "gap_ms_by_kind": {k: max(v) for k, v in self.gaps_ms.items() if v},
            "lag_p50_ms": round(self.lag_ms(0.5)),
            "lag_p99_ms": round(self.lag_ms(0.99)),
            "lag_max_ms": round(self.lag_ms(1.0)),
            "cron_warnings": self.warnings,
            "cron_errors": len(self.cron_errors),
            "tracebacks": self.tracebacks,
            "jobs_sent": self.jobs_sent,
            "jobs_processed": self.jobs_done,
            **self.figures(),
        }

    def figures(self) -> dict[str, dict[str, float]]:
        """Per fault kind, the worst of each figure the faults measured."""
        out: dict[str, dict[str, float]] = {}
        for fault in self.faults:
            for name, value in fault.figures.items():
                kind = out.setdefault(f"{fault.kind}_worst", {})
                kind[name] = max(kind.get(name, value), value)
        return out

    def line(self) -> str:
        """One printable line."""
        d = self.as_dict()
        return " ".join(f"{k}={v}" for k, v in d.items())


class Cluster(Lifecycle):
    """Redis, optional proxy, and ``size`` dramatiq instances.

    Parameters:
      size: Number of instances (each one process, one thread).
      ttl_ms: The lease length given to the app.
      proxy: Route the scheduler's Redis traffic through a :class:`Proxy`.
      persistence: Run the lease Redis with an append-only file.
      actors: Per-second cron actors of the app (one schedule each).
      redis_extra: More ``redis-server`` options for the lease Redis (a
        ``maxmemory-policy``).
      shimmed_clock: Run the lease Redis on a :class:`ClockShim` (its wall
        clock can then be stepped through ``cluster.clock_shim``).
      env: Extra app environment for every instance; ``per_instance`` adds
        environment for instance ``i``.
      replica: Give the lease Redis a replica, replicating through
        :attr:`replication` (a :class:`Proxy` that can hold it back);
        :meth:`fail_over` promotes it.  The instances then wait for it to
        acknowledge their claims (durable claims, the default with a
        replica).
      leader_wall_clock: Run instance 0 on a :class:`WallClockShim` (its
        wall clock can then be stepped through ``cluster.wall_clock``),
        consuming no queue: it only competes for the lease, so the actors'
        runs show what consumers on the machine's clock make of its
        messages.
    """

    def __init__(
        self,
        *,
        size: int = 2,
        ttl_ms: int = 1500,
        proxy: bool = False,
        persistence: bool = False,
        prefix: str = "chaos",
        actors: int = 2,
        redis_extra: list[str] | None = None,
        shimmed_clock: bool = False,
        env: dict[str, str] | None = None,
        per_instance: dict[int, dict[str, str]] | None = None,
        leader_wall_clock: bool = False,
        replica: bool = False,
    ) -> None:
        self.size = size
        self.ttl_ms = ttl_ms
        self.keys = Keys(prefix)
        self.record_dir = tempfile.mkdtemp(prefix="cron-chaos-")
        self.history = History(self.record_dir)
        self.clock_shim = ClockShim() if shimmed_clock else None
        self.wall_clock = WallClockShim() if leader_wall_clock else None
        self.redis = RedisServer(
            persistence=persistence, extra=redis_extra, env=self.clock_shim.env() if self.clock_shim else None
        )
        self.broker_redis = RedisServer()
        self.replication = Proxy(self.redis.port, max_lifetime=4 * 3600) if replica else None
        self.replica = self._replica_of(self.replication) if self.replication is not None else None
        self.proxy: Proxy | None = None
        self._use_proxy = proxy
        self._env = {"CRON_APP_ACTORS": str(actors), **(env or {})}
        self._per_instance = per_instance or {}
        self.instances: list[Instance] = []
        self.retired: list[Instance] = []
        self.faults: list[Fault] = []
        #: Runtime schedules a fault removed for good: no longer expected to fire.
        self.removed_schedules: set[str] = set()
        self.jobs_sent = 0
        self._client: redis.Redis | None = None
        self._sender: RedisBroker | None = None

    # -- life cycle -----------------------------------------------------------

    def start(self) -> Cluster:
        """Start both Redis servers, the proxy, and every instance (in
        parallel, they boot in about a second each)."""
        self.redis.start()
        self.broker_redis.start()
        if self.replication is not None and self.replica is not None:
            self.replication.start()
            self._link(self.replica.start())
        if self._use_proxy:
            self.proxy = Proxy(self.redis.port, max_lifetime=4 * 3600).start()
        self._client = self.redis.client()
        self.instances = [self._new_instance(i) for i in range(self.size)]
        self._boot(self.instances)
        wait_for(self.leader_pid, timeout=30, what="a first leader")
        return self

    def close(self) -> None:
        """Stop every process and thread this cluster started."""
        kill_all(self.instances + self.retired)
        if self.proxy is not None:
            self.proxy.stop()
        if self.clock_shim is not None:
            self.clock_shim.close()
        if self.wall_clock is not None:
            self.wall_clock.close()
        if self._sender is not None:
            self._sender.close()
        if self._client is not None:
            self._client.close()
        self.redis.close()
        self.broker_redis.close()
        if self.replica is not None:
            self.replica.close()
        if self.replication is not None:
            self.replication.stop()
        if os.environ.get("CRON_KEEP_LOGS") != "1":
            for instance in self.instances + self.retired:
                try:
                    os.unlink(instance.log_path)
                except OSError:
                    pass
            shutil.rmtree(self.record_dir, ignore_errors=True)

    def _new_instance(self, index: int) -> Instance:
        env = {
            "DRAMATIQ_CRON_REDIS_URL": self.proxy.url if self.proxy else self.redis.url,
            "CRON_APP_BROKER": self.broker_redis.url,
            "CRON_APP_RECORD": self.record_dir,
            "CRON_APP_TTL": str(self.ttl_ms),
            "CRON_APP_PREFIX": self.keys.prefix,
            **self._env,
            **self._per_instance.get(index, {}),
        }
        if index == 0 and self.wall_clock is not None:
            return Instance({**env, **self.wall_clock.env()}, name="chaos0", extra=["--queues", "cron-leader-only"])
        return Instance(env, name=f"chaos{index}")

    @staticmethod
    def _boot(instances: Iterable[Instance]) -> None:
        errors: list[BaseException] = []

        def boot(instance: Instance) -> None:
            try:
                instance.start()
            except BaseException as exc:  # reported below, on the test thread
                errors.append(exc)

        threads = [threading.Thread(target=boot, args=(i,)) for i in instances]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _replica_of(self, replication: Proxy, *, port: int | None = None) -> RedisServer:
        return RedisServer(
            port=port,
            persistence=self.redis.persistence,
            extra=["--replicaof", "127.0.0.1", str(replication.port)],
        )

    @staticmethod
    def _link(replica: RedisServer) -> None:
        probe = replica.client()
        wait_for(lambda: probe.info("replication").get("master_link_status") == "up", timeout=30, what="a replica")
        probe.close()

    def fail_over(self) -> None:
        """Kill -9 the lease Redis and promote its replica at the same
        address (the scheduler's proxy now forwards there, as a virtual IP
        moves); the old master's port comes back as the new replica, empty,
        replicating through :attr:`replication`.  Whatever the replica had
        not received is lost."""
        assert self.replica is not None and self.replication is not None and self.proxy is not None
        old_port = self.redis.port
        self.redis.stop()
        promoted = self.replica
        promoted.client().replicaof("NO", "ONE")
        # A master from now on, also when a later fault restarts it (as
        # Sentinel rewrites a promoted replica's config).
        at = promoted.extra.index("--replicaof")
        promoted.extra = promoted.extra[:at] + promoted.extra[at + 3 :]  # "--replicaof HOST PORT"
        self.proxy.retarget(promoted.port)
        self.proxy.reset_all()
        self.redis.close()
        self.replication.heal()
        self.replication.retarget(promoted.port)
        self.replication.reset_all()
        self.redis, self.replica = promoted, self._replica_of(self.replication, port=old_port)
        if self._client is not None:
            self._client.close()
        self._client = self.redis.client()
        self._link(self.replica.start())

    def replace(self, instance: Instance) -> Instance:
        """Start a fresh instance in place of a stopped or killed one."""
        index = self.instances.index(instance)
        self.retired.append(instance)
        fresh = self._new_instance(index)
        fresh.name = f"{instance.name}r"
        self.instances[index] = fresh
        self._boot([fresh])
        return fresh

    # -- observation ----------------------------------------------------------

    @property
    def client(self) -> redis.Redis:
        """A direct client to the lease Redis (never through the proxy)."""
        assert self._client is not None
        return self._client

    def lease(self) -> dict[str, str]:
        """The lease hash, or {} when nobody holds it or Redis is down."""
        try:
            return dict(self.client.hgetall(self.keys.lease))  # type: ignore[arg-type]
        except redis.RedisError:
            return {}

    def leader_pid(self) -> int | None:
        """The worker pid Redis says leads, if any."""
        pid = self.lease().get("pid")
        return int(pid) if pid else None

    def leader_instance(self) -> tuple[Instance, int]:
        """The instance whose worker process holds the lease, and that pid."""

        def find() -> tuple[Instance, int] | None:
            pid = self.leader_pid()
            for instance in self.instances:
                if pid is not None and pid in instance.worker_pids():
                    return instance, pid
            return None

        found: tuple[Instance, int] = wait_for(find, timeout=30, what="a leader among the live instances")
        return found

    def last_enqueue_at(self) -> float:
        """Wall time of the latest recorded enqueue (0 when none)."""
        enqueues = self.history.enqueues()
        return enqueues[-1].at if enqueues else 0.0

    def wait_fired_after(self, tick_ms: int, timeout: float = 60, *, schedule: str | None = None) -> None:
        """Wait until a tick later than ``tick_ms`` has been enqueued (of
        ``schedule``, or of any): the cluster fires again."""
        wait_for(
            lambda: any(e.tick_ms > tick_ms and schedule in (None, e.schedule) for e in self.history.enqueues()),
            timeout=timeout,
            interval=0.1,
            what=f"a tick after {tick_ms} to be enqueued" + (f" for {schedule}" if schedule else ""),
        )

    def schedule_ids(self) -> list[str]:
        """The schedules the cluster fires, as the history names them (less
        the runtime schedules a fault removed for good)."""
        found: list[str] = wait_for(
            lambda: sorted({e.schedule for e in self.history.enqueues()} - self.removed_schedules),
            timeout=30,
            what="a first enqueue",
        )
        return found

    def warnings(self, since: Mark | None = None) -> list[str]:
        """The cron WARNING lines of every instance, from ``since`` on."""
        return [line for text in self.logs(since) for line in text.splitlines() if _CRON_WARNING.search(line)]

    # -- work flowing through the broker -------------------------------------

    def send_job(self) -> int:
        """Enqueue a plain job on the broker Redis; returns its number."""
        if self._sender is None:
            self._sender = RedisBroker(url=self.broker_redis.url)
            self._sender.declare_queue("default")
        self.jobs_sent += 1
        self._sender.enqueue(
            Message(queue_name="default", actor_name="plain_job", args=(self.jobs_sent,), kwargs={}, options={})
        )
        return self.jobs_sent

    def jobs_done(self) -> set[int]:
        """Numbers of the plain jobs the workers ran."""
        done: set[int] = set()
        for name in os.listdir(self.record_dir):
            if name.startswith("jobs-"):
                with open(os.path.join(self.record_dir, name)) as f:
                    for line in f:
                        if line.strip().endswith("}"):
                            done.add(int(line.split('"n": ')[1].split(",")[0]))
        return done

    def wait_job_processed(self, timeout: float = 30) -> None:
        """Send a job and wait until a worker ran it (workers keep working
        whatever happens to the scheduler's Redis)."""
        n = self.send_job()
        wait_for(lambda: n in self.jobs_done(), timeout=timeout, interval=0.05, what=f"plain job {n} to run")

    # -- judgement ------------------------------------------------------------

    def record(self, fault: Fault) -> Fault:
        """Note a fault as finished now."""
        fault.end_ms = now_ms()
        self.faults.append(fault)
        return fault

    def outages(self) -> list[Outage]:
        """Declared outages: from a period before each ledger wipe to the
        first tick fired after it (the new baseline), but never more than
        two leases and three seconds past the wipe; a slower recovery shows
        up as a loss.  A fault that destroyed only some schedules' entries
        declares an outage for those schedules alone ("" means all)."""
        enqueues = self.history.enqueues()
        out: list[Outage] = []
        for fault in self.faults:
            if not fault.wipes:
                continue
            cap = fault.end_ms + 2 * self.ttl_ms + 3000
            for schedule in fault.schedules or ("",):
                after = [
                    e.tick_ms
                    for e in enqueues
                    if e.at * 1000 > fault.end_ms and e.tick_ms > fault.start_ms and schedule in ("", e.schedule)
                ]
                out.append((fault.start_ms - _PERIOD_MS, min(min(after, default=cap) - 1, cap), schedule))
        return out

    def gaps(self, faults: list[Fault]) -> dict[str, list[int]]:
        """Per fault kind, the longest silence in the enqueue stream beyond
        one period, among silences that ended after the fault began and
        before the next fault began (or five seconds after its end): a
        silence spanning two faults is the later one's takeover."""
        ats = sorted(e.at * 1000 for e in self.history.enqueues())
        starts = sorted(f.start_ms for f in self.faults)
        out: dict[str, list[int]] = {}
        for fault in faults:
            later = [t for t in starts if t > fault.start_ms]
            until = min([fault.end_ms + 5000, *later[:1]])
            silence = 0.0
            for a, b in itertools.pairwise(ats):
                if fault.start_ms <= b <= until:
                    silence = max(silence, b - a)
            out.setdefault(fault.kind, []).append(max(int(silence) - _PERIOD_MS, 0))
        return out

    def mark(self) -> Mark:
        """Where a scenario starts on a cluster that earlier ones used too."""
        offsets = {i.log_path: len(i.log()) for i in self.instances + self.retired}
        return Mark(faults=len(self.faults), log_offsets=offsets, jobs_sent=self.jobs_sent)

    def logs(self, since: Mark | None = None) -> list[str]:
        """Every instance's log (retired ones included), from ``since`` on."""
        offsets = since.log_offsets if since else {}
        return [i.log()[offsets.get(i.log_path, 0) :] for i in self.instances + self.retired]

    def judge(self, *, start_ms: int, since: Mark | None = None, settle_ms: int = 2000, runs: bool = False) -> Report:
        """Wait until the cluster fires a tick ``settle_ms`` past the last
        fault, then judge every tick between ``start_ms`` and it (faults and
        log lines from ``since`` on; duplicates over the whole history).
        With ``runs``, the actors' runs are judged (a message a consumer
        dropped is lost), once every schedule ran a tick past the window."""
        end_ms = max([f.end_ms for f in self.faults] + [now_ms()]) + settle_ms
        self.wait_fired_after(end_ms, timeout=60)
        outages = self.outages()
        schedules = sorted({e.schedule for e in self.history.enqueues()})
        if runs:
            wait_for(
                lambda: {r.schedule for r in self.history.runs() if r.tick_ms > end_ms} >= set(schedules),
                timeout=30,
                what=f"every schedule to run a tick after {end_ms}",
            )
        # (Ticks not expected at all are judged like outages, but not
        # reported as ones: nothing was lost there.)
        unexpected = [span for fault in self.faults for span in fault.unexpected]
        verdict = self.history.judge(
            schedules=schedules, start_ms=start_ms, end_ms=end_ms, outages=[*outages, *unexpected], runs=runs
        )
        logs = self.logs(since)
        faults = self.faults[since.faults if since else 0 :]
        gaps = self.gaps(faults)
        report = Report(verdict=verdict, faults=faults, outages=outages, gaps_ms=gaps)
        report.warnings = sum(len(_CRON_WARNING.findall(text)) for text in logs)
        report.cron_errors = [line for text in logs for line in text.splitlines() if _ANY_ERROR.search(line)]
        report.tracebacks = sum(text.count("Traceback") for text in logs)
        done = self.jobs_done()
        first_job = since.jobs_sent if since else 0
        report.jobs_sent = self.jobs_sent - first_job
        report.jobs_done = len([n for n in done if n > first_job])
        return report

    def first_tick(self) -> int:
        """The first tick enqueued (the judgement starts after it)."""
        return self.history.first_tick(timeout=30)


def assert_sound(report: Report, *, warnings_per_fault: int = 8) -> None:
    """The guarantees: never a duplicate, never an early fire, no loss
    outside a declared outage, no traceback or ERROR line, warnings bounded by the state changes."""
    v = report.verdict
    assert v.expected > 0, "nothing was expected: the run judged no ticks"
    assert not v.duplicates, f"duplicate enqueues: {v.summary()}"
    assert not v.early, f"ticks enqueued before their instant: {v.summary()}"
    assert not v.losses, f"lost ticks outside declared outages {report.outages}: {v.summary()}"
    assert report.tracebacks == 0, "a traceback in an instance log"
    assert not report.cron_errors, f"ERROR lines in instance logs: {report.cron_errors[:3]}"
    bound = warnings_per_fault * max(len(report.faults), 1) + 4
    assert report.warnings <= bound, f"{report.warnings} cron WARNING lines for {len(report.faults)} faults"
    assert report.jobs_done == report.jobs_sent, f"{report.jobs_sent - report.jobs_done} plain jobs never ran"


def pause(seconds: float) -> None:
    """Hold a fault for its stated duration (the fault *is* the duration;
    nothing is asserted on the far side of it without waiting for a
    condition)."""
    time.sleep(seconds)
