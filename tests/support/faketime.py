"""A clock shim for one redis-server: Debian's libfaketime, steered by a file.

The server runs with ``LD_PRELOAD=libfaketime.so.1`` and
``FAKETIME_TIMESTAMP_FILE`` naming a file that holds an offset in seconds
(``+3600``, ``-40``, ``+0``).  ``FAKETIME_NO_CACHE=1`` makes the library
read the file at every clock call, so rewriting it steps the server's wall
clock at once, as an NTP step or ``date -s`` on the Redis host would:
``TIME`` jumps and every key's expiry moves with it.  The monotonic clock
stays real (``FAKETIME_DONT_FAKE_MONOTONIC=1``), as it does on a real host.
``FAKETIME_DONT_RESET=1`` keeps one timeline should the server fork.

Debian's redis-server links the system jemalloc, whose first ``malloc``
reads the clock while libfaketime is still resolving its own symbols:
the two deadlock at start.  glibc's ``libc_malloc_debug.so.0``, preloaded
in front, answers ``malloc`` instead (the server's memory accounting is not
what these tests look at), so the shim starts cleanly.

Install with ``apt-get install faketime`` (.ci/run does).

A Python process cannot run on libfaketime 0.9.10: with the monotonic
clock left real, every ``time.sleep`` fails with ``EINVAL`` (its
``clock_nanosleep`` on an absolute monotonic deadline); with it faked,
``threading.Event.wait`` never returns.  :class:`WallClockShim` is the
same idea for such a process, narrowed to what a host's wall clock is: a
small preload library (built with ``cc`` at first use) that adds the
file's offset to ``CLOCK_REALTIME`` (``clock_gettime``, ``gettimeofday``,
``time``) and leaves every other clock alone.  Every reader of the wall
clock in the process moves (Python's ``time.time``, whoever bound it,
``datetime.now``, C extensions), and sleeps and waits keep working.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile

from tests.support.components import missing, require_binary

__all__ = ["ClockShim", "WallClockShim", "libfaketime"]

_LIB_PATTERNS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
_MALLOC_PATTERNS = ("/lib/*/libc_malloc_debug.so.0", "/usr/lib/*/libc_malloc_debug.so.0")


def _first(patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def libfaketime() -> str:
    """Path of libfaketime.so.1; skips the test locally (fails it in CI)
    when the ``faketime`` package is missing."""
    found = _first(_LIB_PATTERNS)
    if found is None:
        missing("libfaketime.so.1 not found (apt-get install faketime)")
        raise AssertionError("unreachable")  # pragma: no cover
    return found


class ClockShim:
    """The offset file a shimmed redis-server follows, and its environment."""

    def __init__(self) -> None:
        self.library = self._library()
        fd, self.path = tempfile.mkstemp(prefix="cron-faketime-", suffix=".rc")
        os.close(fd)
        self.offset_s = 0
        self.step_to(0)

    def _library(self) -> str:
        return libfaketime()

    def env(self) -> dict[str, str]:
        """The environment that puts a process on this shim's clock."""
        preload = [p for p in (_first(_MALLOC_PATTERNS), self.library) if p]
        return {
            "LD_PRELOAD": " ".join(preload),
            "FAKETIME_TIMESTAMP_FILE": self.path,
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_RESET": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def step_to(self, offset_s: int) -> None:
        """Set the shimmed wall clock to real time plus ``offset_s`` seconds
        (written atomically: the library never reads half a file)."""
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{offset_s:+d}\n")
        os.replace(tmp, self.path)
        self.offset_s = offset_s

    def close(self) -> None:
        """Remove the offset file."""
        for path in (self.path, f"{self.path}.tmp"):
            try:
                os.unlink(path)
            except OSError:
                pass


_WALL_CLOCK_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The offset (seconds) in the file CRON_WALL_CLOCK_FILE names, read at every
   call, so that rewriting the file steps the clock at once. */
static long long offset_ns(void) {
    const char *path = getenv("CRON_WALL_CLOCK_FILE");
    char buf[64];
    int fd, n;
    if (path == NULL || (fd = open(path, O_RDONLY)) < 0) return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    return (long long)(strtod(buf, NULL) * 1e9);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (real == NULL) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    if (tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
"""


class WallClockShim(ClockShim):
    """A wall clock of its own for a Python process (see the module): the
    same offset file and ``step_to``, through a preload library built here
    instead of libfaketime."""

    def _library(self) -> str:
        cc = require_binary("cc", install="apt-get install gcc")
        self._build_dir = tempfile.mkdtemp(prefix="cron-wallclock-")
        source = os.path.join(self._build_dir, "wallclock.c")
        library = os.path.join(self._build_dir, "libwallclock.so")
        with open(source, "w") as f:
            f.write(_WALL_CLOCK_SHIM)
        subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", library, source, "-ldl"], check=True)
        return library

    def env(self) -> dict[str, str]:
        """The environment that puts a process on this shim's wall clock."""
        return {"LD_PRELOAD": self.library, "CRON_WALL_CLOCK_FILE": self.path}

    def close(self) -> None:
        """Remove the offset file and the library."""
        super().close()
        shutil.rmtree(self._build_dir, ignore_errors=True)
