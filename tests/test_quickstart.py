"""The README's quickstart, copied as written, boots and fires a tick.

A newcomer copies the quickstart's ``myapp.py`` into a folder, starts Redis,
runs the documented ``dramatiq`` command there and then ``dramatiq-cron
list``.  This test does the same with real processes: the block is written
to a temporary folder unchanged except for the Redis port (the test's own
redis-server instead of 6379), and the console block's commands are run as
the README spells them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.instances import stop_group, wait_for
from tests.support.markdown import blocks
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
_LOCAL_REDIS = re.compile(r"redis://localhost:6379\b")


def _quickstart() -> tuple[str, list[list[str]]]:
    """The quickstart's myapp.py and its ``dramatiq``/``dramatiq-cron`` command lines."""
    python = blocks(README, "python", section="Quickstart")
    console = blocks(README, "console", section="Quickstart")
    assert python and console, "the README's Quickstart has a python and a console block"
    source = python[0].source
    assert source.startswith("# myapp.py\n")
    commands = [
        shlex.split(line[2:], comments=True)
        for block in console
        for line in block.source.splitlines()
        if line.startswith(("$ dramatiq ", "$ dramatiq-cron "))
    ]
    return source, commands


def test_the_quickstart_is_short_and_declares_the_middleware_before_its_actor() -> None:
    source, commands = _quickstart()
    lines = [line for line in source.splitlines() if line.strip()]
    assert len(lines) < 20
    assert source.index("add_middleware(CronMiddleware(") < source.index("@dramatiq.actor(")
    assert [c[0] for c in commands] == ["dramatiq", "dramatiq-cron"]


@pytest.mark.slow
def test_the_quickstart_copied_as_written_boots_and_fires_a_tick(tmp_path: Path, redis_server: RedisServer) -> None:
    """Given the quickstart's myapp.py in an empty folder and a redis-server,
    When the README's `dramatiq myapp` runs there, Then the actor's output
    shows a tick, and the README's `dramatiq-cron list myapp` reports the
    schedule's last tick as fired."""
    source, commands = _quickstart()
    (tmp_path / "myapp.py").write_text(_LOCAL_REDIS.sub(f"redis://127.0.0.1:{redis_server.port}", source))
    worker, listing = commands
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DRAMATIQ_CRON_REDIS_URL", None)
    env.pop("PYTHONPATH", None)  # only the folder and the installed package, as for a reader
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(BIN / worker[0]), *worker[1:]],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: re.search(r"^tick$", log_path.read_text(), re.MULTILINE),
            timeout=90,
            interval=0.2,
            what=f"the quickstart's actor to print a tick ({log_path})",
        )
        listed = subprocess.run(
            [str(BIN / listing[0]), *listing[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert listed.returncode == 0, listed.stderr
        header, row = listed.stdout.splitlines()[:2]
        assert header.split()[:2] == ["ACTOR", "NAME"]
        assert row.split()[0] == "tick" and "fired" in row.split(), listed.stdout
    finally:
        stop_group(proc, grace=30)
    log = log_path.read_text()
    assert "Traceback" not in log and "ERROR" not in log, log
