"""What the ``dramatiq-cron`` command says when something is wrong, and the
options of ``add`` and ``list``: the real command (a subprocess, as an
operator runs it) against a real redis-server that requires a password.

Exit statuses: 2 for refused credentials and bad input (Redis answered),
3 only when Redis could not be reached.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker

from dramatiq_cron_middleware import (
    CronConfigurationError,
    CronMiddleware,
    CronScheduleError,
    CronUnavailableError,
    Schedule,
)
from dramatiq_cron_middleware.store.keys import Keys
from dramatiq_cron_middleware.store.runtime import ActorInfo, RuntimeSchedules
from tests.support.command import dramatiq_cron
from tests.support.redis_server import RedisServer, free_port, password_protected

APP = "tests.apps.cronapp"
PASSWORD = "s3cr/t"  # a '/' to be percent-encoded in a URL
ENCODED = "s3cr%2Ft"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """One redis-server with ``requirepass`` for the module (the commands
    only read, or write under distinct names)."""
    with password_protected(PASSWORD) as redis_server:
        yield redis_server


def url(server: RedisServer, userinfo: str = f":{ENCODED}@") -> str:
    return f"redis://{userinfo}127.0.0.1:{server.port}/0"


def run(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return dramatiq_cron({"DRAMATIQ_CRON_REDIS_URL": redis_url, "CRON_APP_BROKER": "stub"}, *args)


def error(result: subprocess.CompletedProcess[str], status: int) -> str:
    """The one line on stderr of a command that failed with ``status``."""
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("dramatiq-cron: error: "), result.stderr
    assert "Traceback" not in result.stderr and PASSWORD not in result.stderr and ENCODED not in result.stderr
    return result.stderr.removeprefix("dramatiq-cron: error: ").strip()


def ok(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_wrong_password_is_a_refusal_not_an_unreachable_redis(server: RedisServer) -> None:
    said = error(run(url(server, ":wrong@"), "list", APP), 2)
    assert said == (
        f"Redis at redis://127.0.0.1:{server.port}/0 refused the user name or password in the URL "
        "(a wrong password, or the user is disabled)"
    )


def test_no_password_says_one_is_needed_without_protocol_jargon(server: RedisServer) -> None:
    said = error(run(url(server, ""), "status", APP), 2)
    assert said == (
        "Redis requires a password and none was given: put it in the URL as ':PASSWORD@' (or 'USER:PASSWORD@') "
        f"before the host, percent-encoded (Redis at redis://127.0.0.1:{server.port}/0)"
    )


def test_an_unencoded_password_is_one_whole_sentence_naming_what_to_encode(server: RedisServer) -> None:
    said = error(run(url(server, f":{PASSWORD}@"), "list", APP), 2)
    assert said == (
        "CronMiddleware: invalid redis URL: its user name or password holds a '/', '?', '#' or '@' that is not "
        "percent-encoded (write '/' as %2F, '?' as %3F, '#' as %23, '@' as %40): "
        f"'redis://***@127.0.0.1:{server.port}/0'"
    )


def test_only_an_unreachable_redis_exits_3() -> None:
    said = error(run(f"redis://:{ENCODED}@127.0.0.1:{free_port()}/0", "status", APP), 3)
    assert said.startswith("cannot reach Redis at redis://127.0.0.1:")


def test_a_bind_address_that_is_no_host_is_a_bad_bind_not_an_auth_problem(server: RedisServer) -> None:
    said = error(run(url(server), "web", APP, "--bind", "nonsense"), 2)
    assert said == "--bind 'nonsense': no such host 'nonsense' here; give HOST:PORT, for example 127.0.0.1:8080"


def test_an_expression_that_never_fires_says_so(server: RedisServer) -> None:
    said = error(run(url(server), "add", APP, "tick_0", "0 0 31 2 *", "--name", "feb31"), 2)
    assert said == (
        "actor 'tick_0', cron '0 0 31 2 *': this expression never fires (no date matches all of its fields together)"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["history", APP, "-n", "0"], "-n/--limit must be at least 1, got 0"),
        (["list", APP, "--limit", "0"], "--limit must be at least 1, got 0"),
        (["list", APP, "--next", "0"], "--next must be at least 1, got 0"),
    ],
    ids=["history-n", "list-limit", "list-next"],
)
def test_a_count_below_1_names_the_option_that_was_typed(server: RedisServer, args: list[str], says: str) -> None:
    assert error(run(url(server), *args), 2) == says


def test_the_unknown_actor_hint_names_actors_that_only_have_runtime_schedules(server: RedisServer) -> None:
    """Given a runtime schedule of an actor this app does not declare, an
    unknown name lists that actor too, and remove of an unknown actor exits 2."""
    store = RuntimeSchedules(
        server.client(password=PASSWORD),
        Keys("dramatiq-cron"),
        resolve_actor=lambda actor: ActorInfo(actor_name="ghost", queue_name="default"),
    )
    store.add("ghost", "0 * * * *", name="g1")
    try:
        hint = "(cron actors: tick_0; with runtime schedules only: ghost)"
        assert error(run(url(server), "pause", APP, "nosuch"), 2) == f"unknown cron actor or schedule 'nosuch' {hint}"
        assert error(run(url(server), "remove", APP, "nosuchactor", "x"), 2) == f"unknown actor 'nosuchactor' {hint}"
        assert error(run(url(server), "add", APP, "nosuch", "0 * * * *", "--name", "x"), 2).endswith(hint)
        # The actor of a runtime schedule stays removable after its code is gone.
        assert ok(run(url(server), "remove", APP, "ghost:g1", "--json")) == {"schedule": "ghost:g1", "removed": True}
    finally:
        store.client.delete(*store.client.keys("{dramatiq-cron}:*"))


def test_web_help_offers_no_json(server: RedisServer) -> None:
    result = run(url(server), "web", "--help")
    assert result.returncode == 0 and "--bind" in result.stdout and "--json" not in result.stdout
    assert "--json" in run(url(server), "list", "--help").stdout


def test_add_takes_every_option_of_a_schedule_and_create_only_refuses_an_existing_name(server: RedisServer) -> None:
    added = ok(
        run(
            url(server), "add", APP, "plain_job", "0 9 * * *", "--name", "all-options", "--json",
            "--args", "[3]", "--catch-up", "latest", "--catch-up-window", "60000", "--jitter", "500",
            "--max-age", "30000", "--overlap", "skip", "--overlap-ttl", "90000", "--options", '{"max_retries": 1}',
            "--timezone", "Europe/Berlin",
        )
    )  # fmt: skip
    assert {k: added[k] for k in ("catch_up", "catch_up_window", "jitter", "max_age", "overlap", "overlap_ttl")} == {
        "catch_up": "latest",
        "catch_up_window": 60_000,
        "jitter": 500,
        "max_age": 30_000,
        "overlap": "skip",
        "overlap_ttl": 90_000,
    }
    assert (added["options"], added["args"], added["timezone"], added["revision"]) == (
        {"max_retries": 1},
        [3],
        "Europe/Berlin",
        1,
    )
    try:
        again = ["add", APP, "plain_job", "0 10 * * *", "--args", "[4]", "--name", "all-options"]
        said = error(run(url(server), *again, "--create-only"), 2)
        assert said.startswith("runtime schedule 'plain_job:all-options' already exists")
        assert ok(run(url(server), *again, "--json"))["revision"] == 2
        assert error(run(url(server), *again, "--options", "[1]"), 2) == "--options must be a JSON object, got '[1]'"
    finally:
        ok(run(url(server), "remove", APP, "plain_job:all-options", "--json"))


def test_list_streams_every_runtime_schedule_with_search_and_actor_filters(server: RedisServer) -> None:
    """Given 2,500 runtime schedules (more than one page of 1,000), list
    shows them all; --actor and --search filter declared and runtime ones
    alike; an unnamed schedule's NAME is '-'."""
    store = RuntimeSchedules(
        server.client(password=PASSWORD),
        Keys("dramatiq-cron"),
        resolve_actor=lambda actor: ActorInfo(actor_name=str(actor), queue_name="default"),
    )
    store.add_many([("plain_job", "0 * * * *", f"tenant-{n}") for n in range(2500)])
    try:
        everything = ok(run(url(server), "list", APP, "--json", "--next", "1"))
        assert len(everything["schedules"]) == 2501 and everything["runtime_total"] == 2500
        assert everything["schedules"][0]["id"] == "tick_0" and everything["schedules"][0]["name"] is None
        ids = [s["id"] for s in everything["schedules"][1:]]
        assert ids == sorted(f"plain_job:tenant-{n}" for n in range(2500))

        found = ok(run(url(server), "list", APP, "--json", "--search", "TENANT-24"))
        assert sorted(s["id"] for s in found["schedules"]) == sorted(
            f"plain_job:tenant-{n}" for n in [24, *range(240, 250), *range(2400, 2500)]
        )
        assert [s["id"] for s in ok(run(url(server), "list", APP, "--json", "--actor", "tick_0"))["schedules"]] == [
            "tick_0"
        ]

        table = run(url(server), "list", APP, "--limit", "10")
        header, declared, *rows, more = table.stdout.splitlines()
        assert header.split()[:3] == ["ACTOR", "NAME", "SOURCE"] and declared.split()[:3] == ["tick_0", "-", "code"]
        assert len(rows) == 10 and more == "... and 2490 more runtime schedules (see --limit)."
        assert error(run(url(server), "list", APP, "--actor", "nosuch"), 2) == (
            "no schedules of actor 'nosuch' (cron actors: tick_0; with runtime schedules only: plain_job)"
        )
    finally:
        store.client.delete(*store.client.keys("{dramatiq-cron}:*"))


def test_the_api_and_the_command_refuse_the_same_input_with_the_same_sentence(server: RedisServer) -> None:
    """The command acts through the Python API's functions: for the same
    bad input both say the same (the command may add the actors there are)."""
    broker = StubBroker()
    cron = CronMiddleware(redis=url(server))
    broker.add_middleware(cron)

    def plain_job(n: int) -> None:
        pass

    dramatiq.actor(plain_job, broker=broker)
    dramatiq.actor(lambda: None, actor_name="tick_0", broker=broker, cron="* * * * * *")
    cron.add("plain_job", Schedule("0 * * * *", args=(1,)), name="taken")
    try:
        cases: list[tuple[Callable[[], object], list[str]]] = [
            (
                lambda: cron.add("plain_job", "0 0 31 2 *", name="x"),
                ["add", APP, "plain_job", "0 0 31 2 *", "--args", "[1]", "--name", "x"],
            ),
            (
                lambda: cron.add("plain_job", Schedule("0 * * * *", args=(1,)), name="a b"),
                ["add", APP, "plain_job", "0 * * * *", "--args", "[1]", "--name", "a b"],
            ),
            (
                lambda: cron.add("plain_job", Schedule("0 * * * *", args=(1,)), name="taken", replace=False),
                ["add", APP, "plain_job", "0 * * * *", "--args", "[1]", "--name", "taken", "--create-only"],
            ),
            (lambda: cron.pause("nosuch"), ["pause", APP, "--schedule", "nosuch"]),
            (lambda: cron.remove("plain_job:a b"), ["remove", APP, "plain_job:a b"]),
        ]
        for call, args in cases:
            with pytest.raises(CronScheduleError) as api:
                call()
            said = error(run(url(server), *args), 2)
            assert said == str(api.value) or said.startswith(f"{api.value} ("), (said, str(api.value))
    finally:
        cron.remove("plain_job:taken")


@pytest.mark.parametrize("userinfo", [":wrong@", ""], ids=["wrong-password", "no-password"])
def test_the_api_says_the_commands_sentence_when_redis_refuses_the_credentials(
    server: RedisServer, userinfo: str
) -> None:
    broker = StubBroker()
    cron = CronMiddleware(redis=url(server, userinfo))
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="tick_0", broker=broker, cron="* * * * * *")
    said = error(run(url(server, userinfo), "pause", APP, "--schedule", "tick_0"), 2)
    assert said.startswith("Redis ") and " password" in said
    for call in (lambda: cron.pause("tick_0"), lambda: cron.add("tick_0", "0 * * * *", name="x")):
        with pytest.raises(CronConfigurationError) as api:
            call()
        assert str(api.value).endswith(said), (said, str(api.value))  # an add says what it could not do first


def test_the_api_raises_unavailable_when_redis_cannot_be_reached() -> None:
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    broker = RedisBroker(url=unreachable)
    cron = CronMiddleware(redis=unreachable)
    broker.add_middleware(cron)
    dramatiq.actor(lambda: None, actor_name="tick_0", broker=broker, cron="* * * * * *")
    for call in (lambda: cron.pause("tick_0"), lambda: cron.trigger("tick_0"), lambda: cron.get("tick_0:x")):
        with pytest.raises(CronUnavailableError, match="did not answer"):
            call()
