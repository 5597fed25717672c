"""Fixtures: a real redis-server per test, and real dramatiq instances."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.support.instances import History, Instance, kill_all
from tests.support.redis_server import RedisServer
from tests.support.redis_topologies import ClusterGroup, RedisProcess, SentinelGroup

# A suite started where SIGINT is ignored (a background job of a
# non-interactive shell, nohup) passes SIG_IGN on to every process it
# starts, and Python keeps it ignored: the tests' Ctrl+C (SIGINT) would
# never reach the command they run.  A handler of our own is reset to the
# default in every child (exec), as for a user at a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# CI replays the same examples every run (a red build must be reproducible);
# locally hypothesis explores new ones, and anything it finds is kept in its
# example database.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
# How many examples each property test tries: all of them in CI and with
# HYPOTHESIS_PROFILE=thorough (make thorough), a quarter otherwise
# (tests/support/examples.py).


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server on a free loopback port, persistence off."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def rabbitmq_node() -> Iterator[Any]:
    """One rabbitmq-server per pytest process: an Erlang start costs 6 CPU-s."""
    from tests.support.rabbitmq import RabbitmqServer

    with RabbitmqServer() as server:
        yield server


@pytest.fixture
def rabbitmq(rabbitmq_node: Any) -> Iterator[Any]:
    """The shared rabbitmq-server (skipped locally, failed in CI, if
    missing), its ``default`` queues deleted after the test: the next test
    finds no message of this one."""
    yield rabbitmq_node
    rabbitmq_node.delete_queues("default", "default.DQ", "default.XQ")


@pytest.fixture
def cluster() -> Iterator[ClusterGroup]:
    """Three cluster masters joined by ``redis-cli --cluster create``."""
    group = ClusterGroup()
    try:
        yield group.start()
    finally:
        group.close()


@pytest.fixture
def record_dir(tmp_path: Any) -> str:
    """Where the test app records enqueues and runs."""
    path = tmp_path / "record"
    path.mkdir()
    return str(path)


@pytest.fixture
def history(record_dir: str) -> History:
    """The recorded history of the test app."""
    return History(record_dir)


@pytest.fixture
def app_env(redis_server: RedisServer, record_dir: str) -> dict[str, str]:
    """Environment for tests/apps/cronapp.py against ``redis_server``."""
    return {
        "DRAMATIQ_CRON_REDIS_URL": redis_server.url,
        "CRON_APP_RECORD": record_dir,
        "CRON_APP_TTL": "2000",
    }


def _sentinel_group(request: pytest.FixtureRequest, **kwargs: Any) -> Iterator[SentinelGroup]:
    group = SentinelGroup(replicas=2, **kwargs)
    request.node.stash[_SERVERS] = group.processes()
    try:
        yield group.start()
    finally:
        group.close()


@pytest.fixture
def sentinel_group(request: pytest.FixtureRequest) -> Iterator[SentinelGroup]:
    """Master, two replicas and three sentinels (redis-server --sentinel):
    the promoted replica still has one, so claims are confirmed after a
    failover (durable by default on Sentinel)."""
    yield from _sentinel_group(request)


@pytest.fixture
def proxied_sentinel_group(request: pytest.FixtureRequest) -> Iterator[SentinelGroup]:
    """A Sentinel group whose master everyone reaches through a proxy that
    can hold replication or partition processes: two replicas, three
    sentinels."""
    yield from _sentinel_group(request, replication_proxy=True)


#: The lines of an instance's log shown under a failure besides its end.
_SAID = re.compile(r"\[(WARNING|ERROR|CRITICAL)\]|Traceback")
#: The instances a test started (the ``instances`` fixture keeps them here).
_STARTED = pytest.StashKey[list[Instance]]()
#: A test's Redis servers and sentinels, by name (its topology fixture
#: keeps them here): what each logged is shown under a failure.
_SERVERS = pytest.StashKey[dict[str, RedisProcess]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that started instances shows, under its failure, their
    WARNING and worse lines and the end of their logs."""
    report = yield
    if report.failed:
        for instance in item.stash.get(_STARTED, []):
            try:
                log = instance.log()
                said = [line for line in log.splitlines() if _SAID.search(line)]
                report.sections.append((f"{instance.log_path}: its WARNING and worse", "\n".join(said[-60:])))
                report.sections.append((f"{instance.log_path}: its end", log[-3000:]))
            except OSError:
                pass
        for name, server in item.stash.get(_SERVERS, {}).items():
            tail = "\n".join(server.log().splitlines()[-80:])
            report.sections.append((f"{name} on port {server.port}: the end of its log", tail))
    return report


@pytest.fixture
def instances(request: pytest.FixtureRequest) -> Iterator[Callable[..., Instance]]:
    """Start dramatiq instances; every one is stopped at teardown."""
    started: list[Instance] = []
    request.node.stash[_STARTED] = started

    def start(env: dict[str, str], **kwargs: Any) -> Instance:
        instance = Instance(env, name=f"i{len(started)}", **kwargs)
        started.append(instance)
        return instance.start()

    yield start
    kill_all(started)
    if os.environ.get("CRON_KEEP_LOGS") != "1":
        for instance in started:
            try:
                os.unlink(instance.log_path)
            except OSError:
                pass


# --- Distribution over xdist workers (scripts/test.sh: --dist loadgroup) ---
#
# Tests run one by one on whichever worker is free, except tests that share
# a fixture wider than a function (a module's cluster, say): those form one
# group, run by one worker, which builds the fixture once for them.  A group
# whose shared fixture is named in SHARDS is split into that many groups
# instead, each on a worker that builds its own copy of the fixture (the
# chaos scenarios need a cluster, not the same cluster).  The longest work
# is sent first (chaos and slow tests, then groups, then tests that run
# dramatiq processes), with runs of in-process tests spread among it.

#: Shared fixture name -> how many groups its tests are split into.
SHARDS = {"shared_cluster": 4}
#: In-process tests of one file sent to a worker together, at most.
CHUNK = 20
#: Fixtures whose tests wait seconds on processes (sent among the first).
WAITING = {"instances", "cluster", "sentinel_group", "proxied_sentinel_group"}
#: Session fixtures whose tests, in any file, form one group.
ACROSS_FILES = {"rabbitmq_node"}


def _wide_fixtures(item: pytest.Item) -> set[str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {
        name
        for name, defs in info.name2fixturedefs.items()
        if defs and (defs[-1].scope in ("package", "module", "class") or name in ACROSS_FILES)
    }


def _groups(items: list[pytest.Item]) -> dict[pytest.Item, str]:
    """Each item that shares a wide fixture -> its group name."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    wide = {
        item: {name if name in ACROSS_FILES else f"{item.path}::{name}" for name in _wide_fixtures(item)}
        for item in items
    }
    for keys in wide.values():
        first, *rest = sorted(keys) or [""]
        for key in rest:
            parent[root(key)] = root(first)
    members: dict[str, list[pytest.Item]] = {}
    for item, keys in wide.items():
        if keys:
            members.setdefault(root(min(keys)), []).append(item)
    out: dict[pytest.Item, str] = {}
    for key, group in members.items():
        shards = max(SHARDS.get(name, 1) for item in group for name in _wide_fixtures(item))
        for index, item in enumerate(group):
            out[item] = f"{key}#{index % shards}" if shards > 1 else key
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: file order, every shared fixture built once
    groups = _groups(items)
    for item, name in groups.items():
        item.add_marker(pytest.mark.xdist_group(name))

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("chaos") is not None or item.get_closest_marker("slow") is not None:
            return 0 if item in groups else 1
        if item in groups:
            return 2
        # Tests that run dramatiq processes or a topology of servers take
        # seconds; the rest fill in.
        return 3 if WAITING & set(item.fixturenames) else 4

    # Work units in rank order: a group, or a test that waits (ranks 0-3:
    # real processes and clusters, or marked slow) of its own, or a run of
    # up to CHUNK in-process tests of one file.  A worker asks for more
    # once it holds two tests or fewer, so an in-process test alone would
    # last milliseconds and leave its worker waiting too: in runs, the
    # in-process tests keep some workers computing while the others wait
    # for their clusters' ticks.  The runs are spread evenly through the
    # waiting units, the first among the first, and one per worker is kept
    # for the end, where short work lets every worker finish together.
    units: dict[str, list[pytest.Item]] = {}
    runs: dict[Path, int] = {}
    for item in sorted(items, key=rank):
        if rank(item) == 4:
            runs[item.path] = runs.get(item.path, -1) + 1
            name = f"{item.path}::in-process#{runs[item.path] // CHUNK}"
            item.add_marker(pytest.mark.xdist_group(name))
            units.setdefault(name, []).append(item)
        else:
            units.setdefault(groups.get(item, item.nodeid), []).append(item)
    waiting = [unit for unit in units.values() if rank(unit[0]) < 4]
    computing = [unit for unit in units.values() if rank(unit[0]) == 4]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    spread_to = max(0, len(computing) - workers)
    spread, last = computing[:spread_to], computing[spread_to:]
    order: list[pytest.Item] = []
    for index, unit in enumerate(waiting):
        for run in spread[index * len(spread) // len(waiting) : (index + 1) * len(spread) // len(waiting)]:
            order.extend(run)
        order.extend(unit)
    for unit in (spread if not waiting else []) + last:
        order.extend(unit)
    assert len(order) == len(items), "a test was lost or sent twice"
    items[:] = order
