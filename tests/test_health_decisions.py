"""Health decided by the leader (monitoring/monitor.py), in-process on the
memory store and a fake clock: which changes alert, and that a failover or
a deposed leader never sends one twice."""

from __future__ import annotations

from dramatiq_cron_middleware.monitoring.health import Policy
from dramatiq_cron_middleware.monitoring.monitor import HealthMonitor
from dramatiq_cron_middleware.monitoring.records import Alert
from dramatiq_cron_middleware.store.clock import ServerClock
from dramatiq_cron_middleware.store.in_memory import InMemoryStore, MemoryRuns, MemoryServer
from dramatiq_cron_middleware.store.lease import Acquired
from tests.support.stores import FakeTime

SID = "report"
POLICY = Policy(grace_ms=1000, max_runtime_ms=5000, failure_threshold=2)


class World:
    """A memory store, a leader's token and a monitor on a fake clock."""

    def __init__(self) -> None:
        self.time = FakeTime()
        self.server = MemoryServer(now_ms=self.time.now_ms)
        self.runs = MemoryRuns(self.server)
        self.token = self.lead()
        self.monitor = self.new_monitor()
        self.seq = 0

    def lead(self) -> str:
        store = InMemoryStore(
            self.server, clock=ServerClock(monotonic=self.time.monotonic, wall=self.time.wall), ttl_ms=60_000
        )
        assert isinstance(store.lease.acquire(), Acquired)
        assert store.lease.token is not None
        return store.lease.token

    def new_monitor(self) -> HealthMonitor:
        return HealthMonitor(store=self.runs, schedule=lambda sid: ("report_actor", sid, POLICY))

    def run(self, tick: int, outcome: str, *, took: int = 100) -> None:
        self.seq += 1
        token = f"d{self.seq}"
        self.runs.record_run("start", SID, tick, attempt=1, token=token, host="h", pid=1)
        self.time.ms += took
        error = "RuntimeError: boom" if outcome == "failed" else ""
        self.runs.record_run("finish", SID, tick, attempt=1, token=token, host="h", pid=1, outcome=outcome, error=error)

    def turn(self) -> list[tuple[str, str]]:
        return [(a.previous, a.state) for a in self.monitor.turn(self.token).alerts]

    def health(self) -> str:
        return self.server.health[SID].split('"health": "')[1].split('"')[0]


def test_failing_alerts_once_after_the_threshold_and_ok_once_after_a_success() -> None:
    world = World()
    world.run(world.time.ms, "failed")
    assert world.turn() == []  # pending -> ok (it ran): no alert; one failure is below the threshold
    world.run(world.time.ms, "failed")
    assert world.turn() == [("ok", "failing")]
    world.run(world.time.ms, "failed")
    assert world.turn() == []
    world.run(world.time.ms, "succeeded")
    assert world.turn() == [("failing", "ok")]
    world.run(world.time.ms, "succeeded")
    assert world.turn() == []
    [failing, ok] = [Alert.loads(a) for a in world.runs.alerts(10)]
    assert (failing.schedule_id, failing.actor, failing.error) == (SID, "report_actor", "RuntimeError: boom")
    assert ok.error is None


def test_a_fired_tick_not_started_within_grace_is_late_until_a_run_starts() -> None:
    world = World()
    tick = world.time.ms
    world.monitor.fired(SID, tick)
    assert world.turn() == []
    world.time.ms += 999
    assert world.turn() == []
    world.time.ms += 2
    assert world.turn() == [("pending", "late")]
    world.monitor.fired(SID, tick + 1000)
    world.time.ms += 2000
    assert world.turn() == []  # still late: no second alert
    world.run(tick + 1000, "succeeded")
    assert world.turn() == [("late", "ok")]


def test_a_run_past_max_runtime_is_running_long_and_recorded_lost() -> None:
    world = World()
    tick = world.time.ms
    world.monitor.fired(SID, tick)
    world.runs.record_run("start", SID, tick, attempt=1, token="d", host="h", pid=1)
    assert world.turn() == []
    world.time.ms += 5001
    assert world.turn() == [("ok", "running_long")]
    assert world.server.runs[SID][tick]["outcome"] == "lost"
    world.run(tick + 60_000, "succeeded")  # the next run supersedes the lost one
    assert world.turn() == [("running_long", "ok")]


def test_a_new_leader_carries_on_from_the_stored_health_and_sends_nothing_again() -> None:
    world = World()
    world.run(world.time.ms, "failed")
    world.run(world.time.ms, "failed")
    assert world.turn() == [("pending", "failing")]
    world.server.delete_lease()  # the leader died; another takes over
    world.token = world.lead()
    world.monitor = world.new_monitor()
    assert world.turn() == []
    world.run(world.time.ms, "failed")
    assert world.turn() == []
    assert len(world.runs.alerts(10)) == 1


def test_a_deposed_leader_decides_nothing() -> None:
    world = World()
    stale = world.token
    world.server.delete_lease()
    world.token = world.lead()
    world.run(world.time.ms, "failed")
    world.run(world.time.ms, "failed")
    assert world.monitor.turn(stale).alerts == []
    assert SID not in world.server.health and world.runs.alerts(10) == []
    assert world.turn() == [("pending", "failing")]  # the events wait for the real leader


def test_a_missed_tick_alerts_missed_and_the_next_fire_clears_it() -> None:
    world = World()
    world.run(world.time.ms, "succeeded")
    assert world.turn() == []
    world.monitor.missed(SID)
    assert world.turn() == [("ok", "missed")]
    world.monitor.fired(SID, world.time.ms)
    assert world.turn() == [("missed", "ok")]
