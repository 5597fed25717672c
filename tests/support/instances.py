"""Real ``dramatiq`` instances of the test app, and the history they leave.

An instance is one ``dramatiq tests.apps.cronapp --processes N`` command in
its own process group.  Tests signal it by pid (SIGTERM, SIGKILL of the
whole group, SIGSTOP/SIGCONT of one worker process) and read its log.
Every cron enqueue is recorded by the app, so :class:`History` can judge
duplicates and losses afterwards, Jepsen-style.

An instance start used to pay a fresh interpreter plus the imports of
dramatiq, redis-py, croniter and the package (about 1 CPU-s each).  So an
instance is forked from a template process that imported those libraries
once (never the app: it imports it itself, after its environment is set)
and then runs dramatiq's own CLI ``main`` with the same argv: the real
command, in its own session, with its own log and exit status, starting
its real worker processes.  An instance on a clock shim (``LD_PRELOAD``),
another command, a different interpreter setting (``PYTHON*``) or a gone
template is started with exec, as before.
"""

from __future__ import annotations

import atexit
import collections
import datetime as dt
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
DRAMATIQ = str(Path(sys.executable).parent / "dramatiq")

#: A declared outage: ``(from_ms, to_ms, schedule)``; schedule "" means all.
Outage = tuple[int, int, str]

#: How far before its tick an enqueue may be recorded and still count as on
#: time: the app stamps records with this host's wall clock, the claim
#: script checks Redis time, and both read the same clock here.
EARLY_TOLERANCE_MS = 20

#: A logged acquisition: its stamp (local time), pid and epoch.
_ACQUIRED = re.compile(
    r"^\[([0-9-]+ [0-9:]+,[0-9]+)\] \[PID (\d+)\].*Acquired cron leadership \(epoch (\d+)\)", re.MULTILINE
)


# The template: imports the libraries, then serves one request a line
# ({"args", "env", "cwd", "log"}): forks, answers {"pid"}, and {"pid", "code"}
# when that child exits.  No thread and no logging handler exist at a fork.
_TEMPLATE = r"""
import atexit, io, json, os, select, signal, sys, threading, time, traceback, logging
import croniter, redis, dramatiq, dramatiq.cli, dramatiq.brokers.redis, dramatiq.brokers.stub
import dramatiq_cron_middleware

if threading.active_count() != 1 or logging.root.handlers:
    sys.exit("the template is not safe to fork")
base = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl+C is for the tests: the template keeps the statuses
print(json.dumps({"ready": True}), flush=True)


def run(request):
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.close(wake_r)
    os.close(wake_w)
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    os.chdir(request["cwd"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(request["args"][0]), *extra, *base]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdin = open(0, closefd=False)
    sys.stdout = io.TextIOWrapper(open(1, "wb", 0, closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(open(2, "wb", 0, closefd=False), write_through=True)
    sys.argv = list(request["args"])
    try:
        code = dramatiq.cli.main()
    except SystemExit as exc:
        code = exc.code if exc.code is None or isinstance(exc.code, int) else (print(exc.code, file=sys.stderr), 1)[1]
    threading._shutdown()
    atexit._run_exitfuncs()
    return code or 0


pending = b""
while True:
    ready, _, _ = select.select([0, wake_r], [], [])
    if wake_r in ready:
        os.read(wake_r, 512)
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        cpu = usage.ru_utime + usage.ru_stime
        print(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status), "cpu": cpu}), flush=True)
    if 0 not in ready:
        continue
    data = os.read(0, 65536)
    if not data:
        break
    *lines, pending = (pending + data).split(b"\n")
    for line in lines:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run(json.loads(line))
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
"""


def python_server(script: str) -> subprocess.Popen[str]:
    """``script`` in a Python process of its own (the repository on its
    path), spoken to in lines over its stdin and stdout: command.py's
    command server and this module's template."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


class _Template:
    """This test process's template (started at its first instance)."""

    def __init__(self) -> None:
        self.proc = python_server(_TEMPLATE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[str] = self.proc.stdin
        self.answers: IO[str] = self.proc.stdout
        self.codes: dict[int, int] = {}
        self.started: list[int] = []
        self.gone = False
        self.changed = threading.Condition()
        self.lock = threading.Lock()  # one start at a time: answers come in order
        if self.answers.readline().strip() != '{"ready": true}':
            self.close()
            raise OSError("the instance template did not start")
        threading.Thread(target=self._read, daemon=True, name="instance-template").start()

    def _read(self) -> None:
        for line in self.answers:
            answer = json.loads(line)
            with self.changed:
                if "code" in answer:
                    self.codes[answer["pid"]] = answer["code"]
                    reaped_cpu[0] += answer["cpu"]
                else:
                    self.started.append(answer["pid"])
                self.changed.notify_all()
        with self.changed:
            self.gone = True
            self.changed.notify_all()

    def start(self, args: list[str], env: dict[str, str], log: str) -> _Forked:
        with self.lock, self.changed:
            self.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(ROOT), "log": log}) + "\n")
            self.stdin.flush()
            if not self.changed.wait_for(lambda: self.started or self.gone, timeout=30) or not self.started:
                self.close()  # no late fork of this request
                raise OSError("no answer from the instance template")
            return _Forked(self, self.started.pop(0), args)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit status, waited for up to ``timeout`` seconds."""
        with self.changed:
            self.changed.wait_for(lambda: pid in self.codes or self.gone, timeout=timeout)
            if pid not in self.codes and self.gone:
                raise RuntimeError(f"the instance template is gone: the exit status of pid {pid} is lost")
            return self.codes.get(pid)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def finish(self) -> None:
        """At the test process's exit: no more requests; the template ends."""
        self.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.close()


class _Forked:
    """What the tests use of ``subprocess.Popen``, for an instance the
    template forked (the template, its parent, reaps it)."""

    def __init__(self, template: _Template, pid: int, args: list[str]) -> None:
        self.template, self.pid, self.args = template, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.template.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.template.wait(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


#: See :func:`forked_cpu`.
reaped_cpu = [0.0]


def forked_cpu() -> float:
    """User+sys CPU-s of the instances and commands (tests/support/command.py)
    this process's servers forked and reaped, children included
    (``RUSAGE_CHILDREN`` counts a server only when it exits): what
    tests/support/cpu_profile.py adds to a test's."""
    return reaped_cpu[0]


_template: _Template | None = None
_template_pid: int | None = None


def _interpreter(env: dict[str, str]) -> dict[str, str]:
    """The settings in ``env`` a Python reads at its start (``PYTHON*``)."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k not in ("PYTHONPATH", "PYTHONUNBUFFERED")}


def _forked(args: list[str], env: dict[str, str], log: str) -> _Forked | None:
    """``args`` forked from this process's template, or None where exec is
    needed: another command than ``dramatiq``, a clock shim, different
    interpreter settings, no template."""
    global _template, _template_pid
    if args[0] != DRAMATIQ or "LD_PRELOAD" in env or _interpreter(env) != _interpreter(dict(os.environ)):
        return None
    if _template is None or _template_pid != os.getpid() or _template.proc.poll() is not None or _template.gone:
        try:
            _template, _template_pid = _Template(), os.getpid()
        except OSError:
            _template = None
            return None
        atexit.register(_template.finish)
    try:
        return _template.start(args, env, log)
    except (OSError, ValueError):
        return None


def acquired_at(log: str, *, pid: int, after_ms: int) -> list[int]:
    """The instants (epoch ms, by the log's local time) at which process
    ``pid`` logged in ``log`` that it acquired leadership, after ``after_ms``."""
    stamps = [stamp for stamp, logged_pid, _ in _ACQUIRED.findall(log) if int(logged_pid) == pid]
    instants = (int(dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000) for s in stamps)
    return [at for at in instants if at > after_ms]


def wait_for(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.02, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def children_of(pid: int) -> list[int]:
    """Direct child pids of ``pid`` (from /proc)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(stat.split("/")[2]))
    return out


def stop_group(proc: subprocess.Popen[Any] | _Forked, *, grace: float) -> None:
    """Stop a process that leads its own process group: SIGTERM, up to
    ``grace`` seconds to exit, then SIGKILL to whatever is left of the group
    (children included), and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rsplit(")", 1)[1].split()[0] != "Z"


class Instance:
    """One ``dramatiq`` command running the test app.

    Parameters:
      env: Environment for the app (see tests/apps/cronapp.py).
      processes, threads: Passed to ``dramatiq``.
      extra: More command-line arguments (``--use-spawn``...).
      app: The module to run.
    """

    def __init__(
        self,
        env: dict[str, str],
        *,
        processes: int = 1,
        threads: int = 1,
        extra: Iterable[str] = (),
        app: str = "tests.apps.cronapp",
        name: str = "instance",
        command: list[str] | None = None,
    ) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
        self.args = command or [DRAMATIQ, app, "--processes", str(processes), "--threads", str(threads), *extra]
        self.processes = processes
        self.name = name
        fd, self.log_path = tempfile.mkstemp(prefix=f"cron-{name}-", suffix=".log")
        os.close(fd)
        self.proc: subprocess.Popen[bytes] | _Forked | None = None

    def start(self) -> Instance:
        """Start and wait until every worker process has booted."""
        self.proc = _forked(self.args, self.env, self.log_path)
        if self.proc is None:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    self.args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        wait_for(
            lambda: self.log().count("Worker process is ready for action") >= self.processes,
            timeout=30,
            what=f"{self.name} to boot ({self.log_path})",
        )
        return self

    @property
    def pid(self) -> int:
        """The main ``dramatiq`` process."""
        assert self.proc is not None
        return self.proc.pid

    def worker_pids(self) -> list[int]:
        """The worker processes' pids."""
        return [p for p in children_of(self.pid) if alive(p)]

    def log(self) -> str:
        """Everything the instance printed so far."""
        return Path(self.log_path).read_text(errors="replace")

    def leader_pids(self) -> list[tuple[int, int]]:
        """(pid, epoch) of every acquisition logged, in order."""
        return [(int(p), int(e)) for _, p, e in _ACQUIRED.findall(self.log())]

    def acquired_at(self, *, pid: int, after_ms: int) -> list[int]:
        """When (epoch ms, by this host's clock, as the log stamps it) process
        ``pid`` logged that it acquired leadership, after ``after_ms``: the
        line is written before its first fire, so no fire of that
        leadership precedes it."""
        return acquired_at(self.log(), pid=pid, after_ms=after_ms)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the main process."""
        os.kill(self.pid, sig)

    def freeze(self) -> None:
        """SIGSTOP the main process and every worker: none of them runs a
        line until :meth:`thaw`."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what :meth:`freeze` stopped."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def kill9(self) -> None:
        """SIGKILL the main process and every worker at once."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for exit; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self.name} did not stop within {timeout}s after SIGTERM") from None

    def close(self) -> None:
        """Make sure nothing of this instance survives the test."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)  # a paused worker cannot exit
        except ProcessLookupError:
            pass
        stop_group(self.proc, grace=10)


def kill_all(instances: Iterable[Instance]) -> None:
    """Teardown: SIGKILL every instance's process group and reap it.  A
    graceful shutdown takes a couple of seconds per instance; the tests
    whose point it is stop their instances themselves before this."""
    for instance in instances:
        if instance.proc is not None:
            instance.kill9()


@dataclass
class Enqueue:
    """One recorded cron enqueue."""

    pid: int
    actor: str
    schedule: str
    tick: str
    tick_ms: int
    message_id: str
    at: float
    manual: bool = False
    #: Enqueued by ``dramatiq-cron backfill`` (the ``cron_backfill`` option).
    backfill: bool = False


@dataclass
class Verdict:
    """What the history checker found."""

    expected: int
    duplicates: dict[tuple[str, int], list[Enqueue]] = field(default_factory=dict)
    losses: list[tuple[str, int]] = field(default_factory=list)
    lags_ms: list[float] = field(default_factory=list)
    #: Enqueues recorded before their tick (beyond the tolerance).
    early: list[Enqueue] = field(default_factory=list)
    #: Ticks never enqueued that a declared outage excused.
    excused: int = 0

    def summary(self) -> str:
        """A one-line report for assertion messages."""
        early = [(e.schedule, e.tick_ms, round(e.at * 1000 - e.tick_ms)) for e in self.early[:5]]
        return (
            f"expected={self.expected} duplicates={len(self.duplicates)} losses={len(self.losses)} "
            f"early={len(self.early)} first duplicates={list(self.duplicates)[:5]} first losses={self.losses[:5]} "
            f"first early (schedule, tick, lag ms)={early}"
        )


def _enqueue(line: str) -> Enqueue | None:
    """One recorded line's enqueue; None for a blank or cut line, or a
    record without a tick."""
    if not line.strip():
        return None
    try:
        r = json.loads(line)
    except ValueError:  # a line cut by SIGKILL mid-write
        return None
    if not r.get("tick"):
        return None
    return Enqueue(
        pid=r["pid"],
        actor=r["actor"],
        schedule=r.get("schedule") or r["actor"],
        tick=r["tick"],
        tick_ms=int(dt.datetime.fromisoformat(r["tick"]).timestamp() * 1000),
        message_id=r.get("message_id", ""),
        at=r["at"],
        manual=bool(r.get("manual")),
        backfill=bool(r.get("backfill")),
    )


class History:
    """Every cron enqueue the app recorded under ``record_dir``."""

    def __init__(self, record_dir: str) -> None:
        self.record_dir = record_dir
        # Each file's complete lines are parsed once (the app only appends;
        # tests poll the history while thousands of records come in):
        # path -> (inode, bytes parsed, their records).
        self._parsed: dict[str, tuple[int, int, list[Enqueue]]] = {}

    def enqueues(self, *, include_manual: bool = False) -> list[Enqueue]:
        """All recorded enqueues, in time order."""
        return self._read("enqueues", include_manual=include_manual)

    def runs(self) -> list[Enqueue]:
        """All recorded runs of cron messages (what the actors did, after
        the consumers' middleware, ``AgeLimit`` included), in time order."""
        return self._read("runs", include_manual=False)

    def _read(self, kind: str, *, include_manual: bool) -> list[Enqueue]:
        out = []
        for path in glob.glob(os.path.join(self.record_dir, f"{kind}-*.jsonl")):
            out.extend(e for e in self._records(path) if include_manual or not e.manual)
        out.sort(key=lambda e: e.at)
        return out

    def _records(self, path: str) -> list[Enqueue]:
        """One file's records: the complete lines' from the cache and the
        new ones; a last line without its newline (being written, or cut
        by SIGKILL) is parsed anew each time."""
        try:
            with open(path, "rb") as f:
                stat = os.fstat(f.fileno())
                inode = stat.st_ino
                known, offset, records = self._parsed.get(path, (inode, 0, []))
                if known != inode or stat.st_size < offset:  # another file there now
                    offset, records = 0, []
                f.seek(offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        records.extend(e for line in data[:end].decode().splitlines() if (e := _enqueue(line)) is not None)
        self._parsed[path] = (inode, offset + end, records)
        tail = _enqueue(data[end:].decode(errors="replace"))
        return records if tail is None else [*records, tail]

    def ticks(self, schedule: str | None = None) -> list[int]:
        """Distinct enqueued ticks (ms), sorted."""
        return sorted({e.tick_ms for e in self.enqueues() if schedule is None or e.schedule == schedule})

    def first_tick(self, schedule: str | None = None, *, timeout: float = 60) -> int:
        """The first tick enqueued (ms), waiting for one: where a judged
        window of instances just started begins.  A schedule no leader has
        decided yet starts at its first leader's first turn, so the host's
        clock read before that (a loaded machine may take seconds to elect
        one) would count ticks nobody owed as lost."""
        ticks: list[int] = wait_for(lambda: self.ticks(schedule), timeout=timeout, what="a first tick")
        return ticks[0]

    def judge(
        self,
        *,
        schedules: Iterable[str],
        start_ms: int,
        end_ms: int,
        step_ms: int = 1000,
        outages: Iterable[tuple[int, int] | Outage] = (),
        runs: bool = False,
        settle_s: float = 60.0,
    ) -> Verdict:
        """Judge every expected (schedule, tick) with ``start_ms < tick <=
        end_ms`` on a fixed ``step_ms`` grid: more than one enqueue is a
        duplicate; none is a loss unless the tick lies in a declared outage
        ``(from_ms, to_ms)`` or ``(from_ms, to_ms, schedule)``; an enqueue
        recorded more than :data:`EARLY_TOLERANCE_MS` before its tick is an
        early fire.  Duplicates and early fires are judged over the whole
        history, not just the window.  With ``runs``, the actors' runs are
        judged instead of the enqueues (a message a consumer dropped is
        lost).

        A loaded leader may still be catching up the window's last ticks
        when a test judges it (the on-time ticks first, then the backlog
        oldest first), so a verdict with losses is taken again until
        ``settle_s`` have passed: a tick still missing then is lost."""
        deadline = time.monotonic() + settle_s
        while True:
            verdict = self._verdict(
                schedules=list(schedules),
                start_ms=start_ms,
                end_ms=end_ms,
                step_ms=step_ms,
                outages=list(outages),
                runs=runs,
            )
            if not verdict.losses or time.monotonic() >= deadline:
                return verdict
            time.sleep(0.25)

    def _verdict(
        self,
        *,
        schedules: list[str],
        start_ms: int,
        end_ms: int,
        step_ms: int,
        outages: list[tuple[int, int] | Outage],
        runs: bool,
    ) -> Verdict:
        by_key: dict[tuple[str, int], list[Enqueue]] = collections.defaultdict(list)
        enqueues = self.runs() if runs else self.enqueues()
        for e in enqueues:
            by_key[(e.schedule, e.tick_ms)].append(e)
        spans = [(o[0], o[1], o[2] if len(o) > 2 else "") for o in outages]
        verdict = Verdict(expected=0)
        verdict.duplicates = {k: v for k, v in by_key.items() if len(v) > 1}
        verdict.early = [e for e in enqueues if e.at * 1000 < e.tick_ms - EARLY_TOLERANCE_MS]
        first = (start_ms // step_ms + 1) * step_ms
        for schedule in schedules:
            for tick in range(first, end_ms + 1, step_ms):
                verdict.expected += 1
                hits = by_key.get((schedule, tick))
                if hits:
                    verdict.lags_ms.append((hits[0].at * 1000) - tick)
                elif any(lo <= tick <= hi and who in ("", schedule) for lo, hi, who in spans):
                    verdict.excused += 1
                else:
                    verdict.losses.append((schedule, tick))
        return verdict


def now_ms() -> int:
    """Wall-clock now in epoch ms (the same clock the app records with)."""
    return int(time.time() * 1000)
