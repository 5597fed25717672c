"""The vocabulary shared by the Lua scripts and the Python that calls them.

Result codes and the ledger's value format are written once, here (the
outcomes of a tick are domain vocabulary, in ``schedules/outcome.py``): the
Lua side gets the same constants through a generated preamble (see
:func:`load_script`), so a reader never matches magic numbers across
languages.  The scripts themselves live in ``lua/*.lua`` beside this module,
each with a legend of its KEYS and ARGV.

Every script answers in one convention, ``{status, server time ms, corrupt
flags, payload...}``, read by :func:`decode`: the status is a
:class:`Status`, the server time feeds the clock, the flags name keys found
unusable (:class:`Corrupt`), and the payload is the script's own answer.
"""

from __future__ import annotations

import enum
import functools
import re
from importlib import resources
from typing import Any, NamedTuple

import redis

from ..schedules.ids import whole_actor  # the id grammar's (re-exported: callers import it from here)
from ..schedules.outcome import Outcome

__all__ = [
    "BadRequest",
    "ClaimResult",
    "Corrupt",
    "LedgerValue",
    "Outcome",
    "Reply",
    "Status",
    "SyncCode",
    "decode",
    "load_script",
    "parse_entry",
    "parse_ledger_value",
    "whole_actor",
]


class Status(enum.IntEnum):
    """A script's verdict: the first element of every reply."""

    #: Done as asked.
    OK = 1
    #: Declined, nothing decided: the lease holds another token, the batch
    #: never ran (now void), the message or mark was already there...
    DECLINED = 0
    #: A malformed request, refused before any write (the payload says why).
    BAD_REQUEST = -2


class BadRequest(Exception):
    """A script refused a malformed request, writing nothing."""


class Reply(NamedTuple):
    """A script's reply: see :func:`decode`."""

    status: Status
    server_ms: int
    corrupt: Corrupt
    payload: list[Any]

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


def decode(raw: Any) -> Reply:
    """Read a script's reply ``{status, server time ms, corrupt flags,
    payload...}``: the one reading every caller shares.

    Raises:
      BadRequest: the script refused a malformed request.
    """
    status = Status(int(raw[0]))
    if status == Status.BAD_REQUEST:
        raise BadRequest(str(raw[3]))
    return Reply(status, int(raw[1]), Corrupt(int(raw[2])), raw[3:])


class ClaimResult(enum.IntEnum):
    """What the claim script decided for one entry of a batch."""

    #: Recorded as fired: the caller enqueues it.
    FIRE = 1
    #: Refused: an equal or newer tick is already decided.
    REFUSED = 0
    #: Recorded without firing (a missed tick).
    RECORDED = 2
    #: Recorded as skipped: the previous message is still queued or running.
    SKIPPED = 3
    #: Recorded as paused.
    PAUSED = 4
    #: Not decided: the tick lies after the server's time (asked too early).
    NOT_YET = 5
    #: Not decided: the schedule's runtime definition was removed or replaced.
    GONE = 6
    #: Not decided: the ledger entry is missing or unusable; sync again.
    LOST = -1


class SyncCode(enum.IntEnum):
    """What the sync script found for one schedule's ledger entry."""

    OK = 0
    #: No entry: a new baseline at now.
    BASELINE = 1
    #: The entry was unparsable: replaced by a baseline at now.
    CORRUPT = 2
    #: The entry lay in the future (a clock step): replaced by a baseline.
    FUTURE = 3
    #: The schedule changed shape (expression, zone, interval, bounds) under
    #: the same identity: it restarts from now, replaced by a baseline.
    RESHAPED = 4


# The sync script answers one digit per schedule.
assert all(0 <= code < 10 for code in SyncCode)


class Corrupt(enum.IntFlag):
    """Keys a script found holding the wrong type or an unparsable value;
    each was treated as missing (and replaced where the script writes it)."""

    NONE = 0
    LEASE = 1
    EPOCH = 2
    CANDIDATES = 4
    TICKS = 8
    HISTORY = 16
    PAUSED = 32
    BATCH = 64
    #: The runtime definitions' revisions: every runtime tick is GONE.
    RUNTIME_REVS = 256


#: Outcome recorded in the ledger value per claim result.
RESULT_OUTCOMES = {
    ClaimResult.FIRE: Outcome.FIRED,
    ClaimResult.RECORDED: Outcome.MISSED,
    ClaimResult.SKIPPED: Outcome.SKIPPED,
    ClaimResult.PAUSED: Outcome.PAUSED,
}

# The one grammar of a ledger value, as common.lua's parse_entry reads it:
# ``<tick ms>:<epoch>`` optionally followed by ``:<result>`` or ``:baseline``,
# at most 40 characters, the tick at most 16 (its sign included) and the
# epoch at most 15 digits, so that Lua's doubles hold them exactly.
_LEDGER_VALUE = re.compile(r"(-?\d+):(\d+)(?::(-?\d)|:baseline)?")


class LedgerValue(NamedTuple):
    """A parsed ledger value."""

    tick_ms: int
    epoch: int
    result: int | None
    baseline: bool


def parse_entry(value: object) -> tuple[int, str, int | None] | None:
    """A ledger value as the scripts read it, ``(tick, epoch as written,
    result or None)``; None when it does not follow the grammar."""
    match = _LEDGER_VALUE.fullmatch(value) if isinstance(value, str) and len(value) <= 40 else None
    if match is None or len(match.group(1)) > 16 or len(match.group(2)) > 15:
        return None
    result = match.group(3)
    return int(match.group(1)), match.group(2), None if result is None else int(result)


def parse_ledger_value(value: object) -> LedgerValue | None:
    """Parse a ledger value, or None if it does not follow the grammar."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    parsed = parse_entry(value)
    if parsed is None:
        return None
    tick, epoch, result = parsed
    return LedgerValue(tick, int(epoch), result, str(value).endswith(":baseline"))


def _preamble() -> str:
    lines = ["-- Generated from store/codes.py: the constants the Python side uses."]
    for status in Status:
        lines.append(f"local ST_{status.name} = {status.value}")
    for member in ClaimResult:
        lines.append(f"local R_{member.name} = {member.value}")
    for sync in SyncCode:
        lines.append(f"local S_{sync.name} = {sync.value}")
    for flag in Corrupt:
        if flag.name and flag.value:
            lines.append(f"local C_{flag.name} = {flag.value}")
    outcomes = {f"O_{outcome.name}": outcome for outcome in Outcome}
    outcomes.update((f"O_{code.name}", outcome) for code, outcome in RESULT_OUTCOMES.items())
    for name, outcome in outcomes.items():
        lines.append(f"local {name} = '{outcome.value}'")
    return "\n".join(lines) + "\n" + _read("common.lua")


def _read(name: str) -> str:
    return (resources.files(__package__) / "lua" / name).read_text(encoding="utf-8")


@functools.cache
def script_source(name: str) -> str:
    """The full source of ``lua/<name>.lua``: the generated constants, the
    shared functions of ``common.lua``, then the script."""
    return _preamble() + "\n" + _read(f"{name}.lua")


def read_only(error: redis.ResponseError) -> redis.ResponseError:
    """``error`` as ``redis.ReadOnlyError`` when it is a write a script
    tried on a replica.  Redis 7 answers that with ``READONLY``, which
    redis-py raises as ``ReadOnlyError``; Redis 6 wraps it in a script error
    (``ERR Error running script ...: -READONLY You can't write against a
    read only replica.``), which redis-py raises as a plain
    ``ResponseError``.  Either way it is one fault: a replica answered."""
    if not isinstance(error, redis.ReadOnlyError) and "-READONLY " in str(error):
        return redis.ReadOnlyError(str(error))
    return error


class _Script(redis.commands.core.Script):
    """redis-py's ``Script``, its replica refusals raised as
    ``ReadOnlyError`` on every Redis version (:func:`read_only`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except redis.ResponseError as error:
            mapped = read_only(error)
            if mapped is error:
                raise
            raise mapped from None


def load_script(client: redis.Redis, name: str) -> Any:
    """Register ``lua/<name>.lua`` on ``client`` (EVALSHA with a fallback)."""
    return _Script(client, script_source(name))
