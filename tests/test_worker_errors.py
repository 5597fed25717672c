"""What a worker says when its scheduler's Redis refuses it (issue 30.8):
an authentication failure said as such, once, saying that it retries, in
words without protocol jargon; and a schedule error that names its actor."""

from __future__ import annotations

import pytest

from tests.support.inprocess import in_process_app
from tests.support.instances import wait_for
from tests.support.redis_server import RedisServer


def _connections(server: RedisServer) -> int:
    return int(server.client(password="s3cret").info("stats")["total_connections_received"])


@pytest.mark.parametrize(
    ("userinfo", "said"),
    [
        (":wrong@", "Redis refused the cron scheduler's password (a wrong password, or the user is disabled)"),
        ("", "Redis requires a password and the cron scheduler's URL gives none"),
    ],
    ids=["wrong password", "no password"],
)
def test_a_refused_password_is_one_warning_saying_so_and_that_it_retries(
    redis_server: RedisServer, userinfo: str, said: str
) -> None:
    """Given a Redis that requires a password, When the scheduler connects
    with a wrong one or none and retries several times, Then one WARNING
    says authentication failed and that it retries, with no HELLO/RESP or
    "cannot reach" wording, and never the password."""
    redis_server.client().config_set("requirepass", "s3cret")
    url = redis_server.url.replace("redis://", f"redis://{userinfo}")
    with in_process_app(url, {"job": "* * * * * *"}, lock_ttl=2000) as app:
        before = _connections(redis_server)
        wait_for(lambda: _connections(redis_server) >= before + 4, timeout=60, what="four more attempts")
        warned = app.warnings("")
        assert len(warned) == 1, warned
        redis_server.client(password="s3cret").config_set("requirepass", "")  # accepted now: it recovers
        wait_for(lambda: app.sent(), timeout=60, what="a tick once Redis accepts it")
        assert app.warnings("accepts the cron scheduler's password again")
    assert said in warned[0] and "retrying every" in warned[0], warned[0]
    for jargon in ("HELLO", "RESP", "cannot reach", "AuthenticationError", "wrong@"):
        assert jargon not in warned[0], warned[0]
