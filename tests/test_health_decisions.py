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
from dramatiq_cron_middleware.store.runs import ALIVE_MS
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
            self.server, clock=ServerClock(monotonic=self.time.monotonic, wall=self.time.wall), ttl_ms=3_600_000
        )
        assert isinstance(store.lease.acquire(), Acquired)
        assert store.lease.token is not None
        return store.lease.token

    def new_monitor(self, policy: Policy = POLICY) -> HealthMonitor:
        return HealthMonitor(store=self.runs, schedule=lambda sid: ("report_actor", sid, policy), outboxes=["on_alert"])

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
    [failing, ok] = [Alert.loads(a) for a in world.runs.alerts(10, outbox="on_alert")]
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


def test_a_run_past_max_runtime_whose_worker_is_gone_is_running_long_and_recorded_lost() -> None:
    world = World()
    tick = world.time.ms
    world.monitor.fired(SID, tick)
    world.runs.record_run("start", SID, tick, attempt=1, token="d", host="h", pid=1)
    assert world.turn() == []
    world.time.ms += 5001
    assert world.turn() == [("ok", "running_long")]
    assert world.server.runs[SID][tick]["outcome"] == "running"  # its start counts as alive a while
    world.time.ms += ALIVE_MS  # no heartbeat since: the worker is gone
    assert world.turn() == []
    assert world.server.runs[SID][tick]["outcome"] == "lost"
    world.run(tick + 60_000, "succeeded")  # the next run supersedes the lost one
    assert world.turn() == [("running_long", "ok")]


def test_a_run_past_max_runtime_whose_worker_beats_is_running_long_never_lost() -> None:
    """Issue 30 item 7: a run past max_runtime whose worker is alive and
    still running it is ``running_long``, and its record stays ``running``
    (it used to turn ``lost`` at max_runtime), until it finishes."""
    world = World()
    tick = world.time.ms
    world.monitor.fired(SID, tick)
    world.runs.record_run("start", SID, tick, attempt=1, token="d", host="h", pid=1)
    assert world.turn() == []
    world.time.ms += 5001
    assert world.turn() == [("ok", "running_long")]
    for _ in range(2):  # twice ALIVE_MS (within the lease), the worker beating every ALIVE_MS / 4
        for _ in range(4):
            world.time.ms += ALIVE_MS // 4
            world.runs.keep_alive([f"r|{tick}|{SID}"])
        assert world.turn() == []
        assert world.server.runs[SID][tick]["outcome"] == "running"
    world.runs.record_run("finish", SID, tick, attempt=1, token="d", host="h", pid=1, outcome="succeeded")
    assert world.turn() == [("running_long", "ok")]
    assert world.server.runs[SID][tick]["outcome"] == "succeeded"


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
    assert len(world.runs.alerts(10, outbox="on_alert")) == 1


def test_a_deposed_leader_decides_nothing() -> None:
    world = World()
    stale = world.token
    world.server.delete_lease()
    world.token = world.lead()
    world.run(world.time.ms, "failed")
    world.run(world.time.ms, "failed")
    assert world.monitor.turn(stale).alerts == []
    assert SID not in world.server.health and world.runs.alerts(10, outbox="on_alert") == []
    assert world.turn() == [("pending", "failing")]  # the events wait for the real leader


def test_a_missed_tick_alerts_missed_and_the_next_fire_clears_it() -> None:
    world = World()
    world.run(world.time.ms, "succeeded")
    assert world.turn() == []
    world.monitor.missed(SID)
    assert world.turn() == [("ok", "missed")]
    world.monitor.fired(SID, world.time.ms)
    assert world.turn() == [("missed", "ok")]


def test_missed_ticks_followed_by_a_fire_in_the_same_turn_end_ok() -> None:
    """catch_up="latest": the skipped ticks are recorded missed, then the
    latest fires; the order told is the order decided."""
    world = World()
    world.run(world.time.ms, "succeeded")
    assert world.turn() == []
    world.monitor.missed(SID)
    world.monitor.fired(SID, world.time.ms)
    assert world.turn() == []
    assert world.health() == "ok"


def test_a_catch_up_burst_is_decided_in_bounded_turns() -> None:
    """Thousands of fired ticks at once (a catch-up) are written a bounded
    batch per turn (each script short), all of them in the end."""
    world = World()
    for n in range(1200):
        world.monitor.fired(SID, world.time.ms + n * 1000)  # deadlines ahead: none due yet
    turns = [world.monitor.turn(world.token) for _ in range(3)]
    assert [t.more for t in turns] == [True, True, False]
    assert len(world.server.runs_open) == 1200


def test_a_dropped_message_is_no_start_and_its_tick_turns_late() -> None:
    """A message dropped for its max_age never ran: its tick's deadline
    still makes the schedule late (the workers are too far behind)."""
    world = World()
    tick = world.time.ms
    world.monitor.fired(SID, tick)
    world.runs.record_run("finish", SID, tick, attempt=1, token="d", host="h", pid=1, outcome="dropped")
    assert world.turn() == []
    world.time.ms += 1001
    assert world.turn() == [("pending", "late")]


def test_an_older_ticks_deadline_after_a_newer_run_started_is_no_news() -> None:
    """Given a tick whose message was overtaken by the next tick's run,
    When the older tick's deadline passes, Then the schedule is not late."""
    world = World()
    policy_grace = POLICY.grace_ms
    world.monitor.fired(SID, world.time.ms)
    world.monitor.fired(SID, world.time.ms + 500)
    world.runs.record_run("start", SID, world.time.ms + 500, attempt=1, token="d", host="h", pid=1)
    world.time.ms += 600
    assert world.turn() == []
    world.time.ms += policy_grace
    assert world.turn() == []
    assert world.health() == "ok"


def flapping_alerts(policy: Policy) -> list[tuple[str, str]]:
    """A chronically slow job for four minutes: a tick every 20 s whose run
    takes 12 s (max_runtime 5 s: running_long for 7 s, then ok for 8 s), a
    turn every second; then it runs fast for two minutes."""
    world = World()
    world.monitor = world.new_monitor(policy)
    alerts: list[tuple[str, str]] = []
    start = world.time.ms
    for second in range(360):
        now = start + second * 1000
        world.time.ms = now
        token = f"d{second}"
        took = 12 if second < 240 else 1
        if second % 20 == 0:
            world.monitor.fired(SID, now)
            world.runs.record_run("start", SID, now, attempt=1, token=token, host="h", pid=1)
        if second % 20 == took:
            tick = now - took * 1000
            world.runs.record_run(
                "finish", SID, tick, attempt=1, token=f"d{second - took}", host="h", pid=1, outcome="succeeded"
            )
        alerts += world.turn()
    return alerts


def test_without_a_hold_a_flapping_job_alerts_every_change() -> None:
    assert len(flapping_alerts(POLICY)) == 24  # 12 runs: into running_long and back, each


def test_a_chronically_slow_job_flapping_alerts_once_and_recovers_once_with_alert_for() -> None:
    """Issue 30 item 7: ok -> running_long -> ok every 20 s gave an alert a
    change (22 in four minutes).  With alert_for 60 s the trouble lasts
    (dips to ok shorter than 60 s do not end it): one alert once it held a
    minute, one recovery once ok held a minute."""
    held = Policy(grace_ms=1000, max_runtime_ms=5000, failure_threshold=2, alert_for_ms=60_000)
    assert flapping_alerts(held) == [("ok", "running_long"), ("running_long", "ok")]


def test_a_problem_that_clears_within_alert_for_never_alerts() -> None:
    held = Policy(grace_ms=1000, max_runtime_ms=5000, failure_threshold=1, alert_for_ms=60_000)
    world = World()
    world.monitor = world.new_monitor(held)
    world.run(world.time.ms, "failed")
    assert world.turn() == [] and world.health() == "failing"
    world.time.ms += 30_000
    world.run(world.time.ms, "succeeded")
    world.time.ms += 120_000
    assert world.turn() == [] and world.runs.alerts(10, outbox="on_alert") == []


def test_a_held_problem_alerts_once_alert_for_passed_without_any_event() -> None:
    """The hold's end is a deadline of its own: no run event is needed for
    the alert to go out once the problem lasted alert_for."""
    held = Policy(grace_ms=1000, max_runtime_ms=5000, failure_threshold=1, alert_for_ms=60_000)
    world = World()
    world.monitor = world.new_monitor(held)
    world.run(world.time.ms, "failed")
    turn = world.monitor.turn(world.token)
    assert turn.alerts == [] and turn.next_deadline_ms == turn.now_ms + 60_000
    world.time.ms += 59_999
    assert world.turn() == []
    world.time.ms += 1
    assert world.turn() == [("pending", "failing")]
