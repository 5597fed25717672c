"""The ``dramatiq-cron`` command as an operator runs it: a process of its
own (``python -m dramatiq_cron_middleware``) from the repository root.

The suite runs the command hundreds of times, and each start imported
dramatiq, redis-py and the package again (about 0.4 CPU-s, on a machine
whose two cores every test shares).  So the command runs in a child forked
from a small server that imported those libraries once (one per test
process, started at the first command): the child still is a process of
its own, with the command's environment, working directory and path
(``PYTHONPATH`` as given), its own stdout, stderr and exit status, and it
imports the app itself, after its environment is set.  Only the libraries
come ready, as a forkserver's workers get them.  A command the server
cannot run (it died) runs as a plain ``python -m`` process.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from tests.support.instances import ROOT, python_server, reaped_cpu

__all__ = ["dramatiq_cron"]

#: Seconds a command may take (as ``subprocess.run(timeout=...)``).
TIMEOUT = 60

# The server: reads one request a line ({"args", "env", "out", "err"}),
# forks, answers {"pid"} at once and {"code", "cpu"} once the child is gone.
_SERVER = r"""
import json, os, sys, time, traceback
import dramatiq, redis, dramatiq.brokers.redis, dramatiq.brokers.stub  # the libraries, once
import dramatiq_cron_middleware.ops.cli

base = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.clear()
            os.environ.update(request["env"])
            time.tzset()
            os.chdir(request["cwd"])
            extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.path[:] = [os.getcwd(), *extra, *base]
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, path in ((1, request["out"]), (2, request["err"])):
                target = os.open(path, os.O_WRONLY | os.O_TRUNC)
                os.dup2(target, fd)
                os.close(target)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            sys.argv = [sys.argv[0], *request["args"]]
            try:
                code = dramatiq_cron_middleware.ops.cli.main(request["args"])
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status, usage = os.wait4(pid, 0)
    print(json.dumps({"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}), flush=True)
"""


class _Server:
    """The forking server of this test process."""

    def __init__(self) -> None:
        self.proc = python_server(_SERVER)
        self.lock = threading.Lock()

    def run(self, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with tempfile.TemporaryDirectory(prefix="dramatiq-cron-") as tmp, self.lock:
            out, err = Path(tmp, "out"), Path(tmp, "err")
            out.touch()
            err.touch()
            request = {"args": args, "env": env, "cwd": str(ROOT), "out": str(out), "err": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = int(json.loads(_line(self.proc.stdout, TIMEOUT))["pid"])
            try:
                answer = json.loads(_line(self.proc.stdout, TIMEOUT))
                code = int(answer["code"])
                reaped_cpu[0] += answer["cpu"]
            except TimeoutError:
                # As subprocess.run does: the command is killed.  The server
                # goes too (a reader of its answers is left waiting).
                os.kill(pid, signal.SIGKILL)
                self.close()
                raise subprocess.TimeoutExpired(args, TIMEOUT, out.read_text(), err.read_text()) from None
            return subprocess.CompletedProcess(args, code, out.read_text(), err.read_text())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def finish(self) -> None:
        """At the test process's exit: no more requests; the server ends."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.close()


def _line(stream: IO[str], timeout: float) -> str:
    """The next line of ``stream``, waited for at most ``timeout`` seconds."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        raise TimeoutError("no answer from the command server")
    if not box or not box[0]:
        raise EOFError("the command server is gone")
    return box[0]


_server: _Server | None = None
_server_pid: int | None = None


def _the_server() -> _Server | None:
    global _server, _server_pid
    if _server is None or _server_pid != os.getpid() or _server.proc.poll() is not None:
        try:
            _server, _server_pid = _Server(), os.getpid()
        except OSError:
            return None
        atexit.register(_server.finish)
    return _server


def dramatiq_cron(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``dramatiq-cron *args`` with ``env`` on top of this process's
    environment (the repository on ``PYTHONPATH``); returns the finished process."""
    full: dict[str, Any] = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    server = _the_server()
    if server is not None:
        try:
            return server.run(list(args), full)
        except (EOFError, BrokenPipeError, TimeoutError):
            pass  # the server is gone: a plain process instead
    return subprocess.run(
        [sys.executable, "-m", "dramatiq_cron_middleware", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
