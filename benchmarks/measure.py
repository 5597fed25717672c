"""Measuring tools shared by the benchmark scenarios: Redis command
attribution per process, CPU and memory from /proc, percentiles.

Commands are attributed with ``MONITOR`` on a Redis used only for the
lease: every line names the client's address, and ``ss`` maps a client's
local port to the process that owns the socket.  Commands run *inside* a
Lua script appear in MONITOR as ``lua`` clients; they cost no round trip
and are counted apart.
"""

from __future__ import annotations

import collections
import os
import re
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path

_MONITOR_LINE = re.compile(r'^\+\d+\.\d+ \[\d+ ([^\]]+)\] "([^"]+)"')
_SS_LINE = re.compile(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:(\d+).*pid=(\d+)")
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


class Monitor:
    """Counts the commands each client address sends, until stopped."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._sock.sendall(b"MONITOR\r\n")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self.started = time.monotonic()
        self.elapsed = 0.0
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            for raw in lines:
                match = _MONITOR_LINE.match(raw.decode(errors="replace"))
                if match:
                    self.counts[(match.group(1), match.group(2).upper())] += 1

    def stop(self) -> None:
        """Stop counting; ``elapsed`` is the window in seconds."""
        self.elapsed = time.monotonic() - self.started
        self._stop.set()
        self._thread.join(2)
        self._sock.close()


def socket_owners(redis_port: int) -> dict[int, int]:
    """Client port -> pid of every process connected to ``redis_port``."""
    out = subprocess.run(["ss", "-Htnp", f"dport = :{redis_port}"], capture_output=True, text=True).stdout
    owners: dict[int, int] = {}
    for line in out.splitlines():
        match = _SS_LINE.search(line)
        if match and int(match.group(2)) == redis_port:
            owners[int(match.group(1))] = int(match.group(3))
    return owners


def commands_by_pid(monitor: Monitor, owners: dict[int, int]) -> tuple[dict[int, int], int, int]:
    """Round trips per pid, plus unattributed ones and script-internal ones."""
    per_pid: dict[int, int] = collections.Counter()
    unknown = 0
    inside_scripts = 0
    for (address, _command), n in monitor.counts.items():
        if address == "lua":
            inside_scripts += n
            continue
        port = int(address.rsplit(":", 1)[1]) if ":" in address else -1
        if port in owners:
            per_pid[owners[port]] += n
        else:
            unknown += n
    return dict(per_pid), unknown, inside_scripts


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process, or of one of its threads."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def rss_mib(pid: int) -> float:
    """Resident set size of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentiles(values: list[float]) -> dict[str, float]:
    """n, p50, p99 and max (nearest-rank), rounded to 0.1."""
    if not values:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]

    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 1),
        "p99": round(rank(0.99), 1),
        "max": round(ordered[-1], 1),
    }


def load_average() -> str:
    """The 1/5/15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
