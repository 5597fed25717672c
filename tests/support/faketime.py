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
"""

from __future__ import annotations

import glob
import os
import tempfile

from tests.support.components import missing

__all__ = ["ClockShim", "libfaketime"]

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
        self.library = libfaketime()
        fd, self.path = tempfile.mkstemp(prefix="cron-faketime-", suffix=".rc")
        os.close(fd)
        self.offset_s = 0
        self.step_to(0)

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
