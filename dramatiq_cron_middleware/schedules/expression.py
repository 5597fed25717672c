"""Cron expressions: one meaning whatever croniter is installed.

croniter does the calendar arithmetic, but its versions read some
expressions differently (croniter 7.0 changed ``59/15``, dom-and-dow
combinations, ``H`` steps and ranges, and refuses forms 6.x accepted).
Before any expression reaches croniter, each field is rewritten to a
canonical form that every supported croniter version reads alike, with
standard cron's meaning, and the forms they read differently are refused
at declaration (docs/schedules.md, "One meaning on every croniter"):

- ``N/step`` where ``N`` is the field's last value (``59/15``, ``23/2``,
  ``DEC/3``) is that value alone (croniter 6 read it as the whole field
  stepped);
- ``H/step`` and ``H(a-b)/step`` with a step as wide as the range or wider
  are the hashed value alone, ``H`` or ``H(a-b)`` (croniter 6 drew the
  value from another range);
- in a 6-field expression, Sunday is written 0, not 7 (``5-7`` becomes
  ``0,5,6``: croniter 6 refuses 7 there);
- refused: ``N/step`` in the day-of-week (crons disagree on whether the
  week ends at 6 or 7), ``H(a-b)`` beyond the field, ``#n`` outside 1-5,
  day-of-month or month 0, and any character that is not ASCII.

:data:`SEMANTICS` names these rules and the installed croniter's major
version; it is part of every candidate's schedule-set fingerprint.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import re
from importlib import metadata

from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

from ..errors import CronScheduleError, shown

__all__ = [
    "RULES",
    "SEMANTICS",
    "canonical_fields",
    "check_ascii",
    "check_fires",
    "cron_shape",
    "day_or",
    "normalise",
    "parsed",
    "picked",
    "uses_hash",
]

#: The version of the rules below: bumped whenever they give an expression
#: another meaning.
RULES = 1


def _croniter_major() -> str:
    try:
        return metadata.version("croniter").split(".")[0]
    except metadata.PackageNotFoundError:  # pragma: no cover - vendored or renamed
        return "unknown"


#: What decides how this process reads a cron expression: the rules and
#: croniter's major version ("cron rules 1, croniter 7").
SEMANTICS = f"cron rules {RULES}, croniter {_croniter_major()}"

# Each field's first and last value, as croniter bounds them.
_LIMITS = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (0, 7),
}
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1)}
_HASHED = re.compile(r"^H(?:\((\d+)-(\d+)\))?(?:/(\d+))?$", re.IGNORECASE)
_START_STEP = re.compile(r"^([0-9]+|[A-Za-z]{3})/([0-9]+)$")
_NTH = re.compile(r"#([0-9]+)$")


def check_ascii(where: str, expression: str) -> None:
    """Refuse a character that is not ASCII (a no-break space pasted from a
    web page, an Arabic-Indic digit): croniter 6 and 7 read them apart."""
    for char in expression:
        if not char.isascii():
            raise CronScheduleError(
                f"{where}: character {char!r} (U+{ord(char):04X}) is not ASCII; a cron expression is ASCII digits, "
                "names and symbols separated by spaces or tabs"
            )


def canonical_fields(where: str, fields: list[str]) -> list[str]:
    """The fields (5, or 6 with seconds first) rewritten to their canonical
    form; raise :class:`CronScheduleError` for a form croniter versions
    read differently."""
    seconds = len(fields) == 6
    names = (("second",) if seconds else ()) + ("minute", "hour", "day-of-month", "month", "day-of-week")
    out = [
        ",".join(_canonical_part(where, name, part) for part in field.split(","))
        for name, field in zip(names, fields, strict=True)
    ]
    if seconds:
        # croniter 6 refuses day-of-week 7 (Sunday) in a 6-field expression.
        out[-1] = ",".join(_sunday_as_0(where, part) for part in out[-1].split(","))
    return out


def _sunday_as_0(where: str, part: str) -> str:
    """A day-of-week part with Sunday written 0, not 7."""
    if "7" not in re.sub(r"/[0-9]+$", "", part):
        return part
    if part == "7":
        return "0"
    ranged = re.fullmatch(r"([0-7])-7(?:/([0-9]+))?", part)
    if ranged is not None:
        step = int(ranged.group(2) or 1)
        days = sorted({day % 7 for day in range(int(ranged.group(1)), 8, step)})
        return ",".join(map(str, days))
    if re.fullmatch(r"(7#[1-5]|L7)", part):
        return part.replace("7", "0")
    raise CronScheduleError(f"{where}: {part!r}: write Sunday as 0 here (day-of-week 7 in a 6-field expression)")


def _canonical_part(where: str, name: str, part: str) -> str:
    low, high = _LIMITS[name]
    hashed = _HASHED.match(part)
    if hashed is not None:
        begin, end, step = hashed.groups()
        if begin is not None and end is not None:
            for bound in (int(begin), int(end)):
                if not low <= bound <= high:
                    raise CronScheduleError(f"{where}: {part!r} reaches beyond the {name} field ({low}-{high})")
            width = int(end) - int(begin) + 1
        else:
            width = (6 if name == "day-of-week" else high) - low + 1
        if step is not None and int(step) >= width:
            # One value per period: the hashed value alone, as croniter 7
            # reads it (croniter 6 drew it from 0..step-1).
            return part.split("/")[0]
        return part
    nth = _NTH.search(part)
    if nth is not None and not 1 <= int(nth.group(1)) <= 5:
        raise CronScheduleError(f"{where}: {part!r}: the n of '#n' (the n-th weekday of the month) must be 1 to 5")
    if name in ("day-of-month", "month"):
        for token in re.findall(r"[0-9]+", part.split("/")[0]):
            if int(token) == 0:
                raise CronScheduleError(f"{where}: {part!r}: {name} 0 does not exist (days and months count from 1)")
    start_step = _START_STEP.match(part)
    if start_step is not None:
        if name == "day-of-week":
            raise CronScheduleError(
                f"{where}: {part!r}: a day-of-week 'N/step' is read differently by cron implementations (the week "
                "ending at 6 or at 7); list the days (for example '1,3,5') or give a range ('1-5/2')"
            )
        start = start_step.group(1).lower()
        value = _MONTHS.get(start) if name == "month" and start.isalpha() else (int(start) if start.isdigit() else None)
        if value == high:
            # The field's last value with a step: that value alone (croniter
            # 6 read '59/15' as every 15 minutes).
            return str(value)
    return part


_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELD_CHARS = re.compile(r"^[0-9A-Za-z*/,\-#?()]+$")
# croniter's ``R`` picks a random value per process: every worker would
# fire at a different time, so it is refused.
_RANDOM = re.compile(r"(?i)(^|[^a-z])r($|[^a-z])")


# Loading a large runtime set binds each schedule; most share a handful of
# expressions, and normalising one costs a croniter parse.  (An exception
# is not cached: a bad expression is checked again each time.)
@functools.lru_cache(maxsize=4096)
def normalise(where: str, expression: str, hash_seed: str = "") -> tuple[str, bool]:
    """The expression in canonical form with single spaces, and whether it
    has seconds; refused (naming ``where``) unless it is valid cron that
    fires.  ``hash_seed`` stands in for the schedule's identity in ``H``
    fields until it is bound."""
    check_ascii(where, expression)
    # ASCII whitespace only: str.split() would also split on the file and
    # record separators (``\x1c``-``\x1f``), which cron does not.
    text = " ".join(_BLANKS.split(expression.strip(" \t\n\r\f\v")))
    if not text:
        raise CronScheduleError(f"{where}: the expression is empty")
    if text.startswith("@"):
        if text.lower() not in _ALIASES:
            raise CronScheduleError(f"{where}: unknown alias; use one of {', '.join(sorted(_ALIASES))}")
        text = _ALIASES[text.lower()]
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise CronScheduleError(
            f"{where}: expected 5 fields (minute hour day month weekday) or 6 with seconds first, got {len(fields)}"
        )
    for field in fields:
        if not _FIELD_CHARS.match(field):
            raise CronScheduleError(f"{where}: field {shown(field)} is not valid cron syntax")
        if _RANDOM.search(field):
            raise CronScheduleError(f"{where}: field {shown(field)}: random 'R' values differ per process; use 'H'")
    fields = canonical_fields(where, [_collapse_single_ranges(f) for f in fields])
    fields = _every_day_when_either_covers_all(fields)
    text = " ".join(fields)
    has_seconds = len(fields) == 6
    # (A hashed expression is checked again with the schedule's own hash
    # id when it is bound: H may pick a day that never comes.)
    check_fires(where, text, has_seconds, hash_seed if _hashed(text) else "")
    return text, has_seconds


def check_fires(where: str, text: str, has_seconds: bool, hash_id: str) -> None:
    """Refuse a normalised expression croniter cannot parse, or that never
    fires (as a whole, or through one of two restricted day fields)."""
    fields = text.split(" ")
    either = day_or(fields[-3], fields[-1])
    if either:
        _check_each_day_field_fires(where, fields, has_seconds, hash_id)
    try:
        # Through the parse cache: declaring 10,000 schedules that share a
        # few expressions parses each expression once.
        # (The many ids whose H picks the same values share one walk.)
        key = (text, has_seconds, either, picked(text, has_seconds, hash_id, either))
        if key not in _FIRES:
            it = copy.copy(parsed(text, has_seconds, hash_id, either))
            it.set_current(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), force=True)
            it.get_next(float)
            if len(_FIRES) >= 100_000:
                _FIRES.clear()
            _FIRES.add(key)
    except CroniterBadDateError:
        hashed = f" (with the value H picks for {hash_id!r})" if hash_id and "/" in hash_id else ""
        raise CronScheduleError(
            f"{where}: this expression never fires{hashed} (no date matches all of its fields together)"
        ) from None
    except (CroniterError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CronScheduleError(f"{where}: {exc}") from None


# Expressions (their H values picked) known to fire.
_FIRES: set[tuple[object, ...]] = set()
_RANGE = re.compile(r"^([0-9A-Za-z]+)-([0-9A-Za-z]+)(/[0-9]+)?$")
_BLANKS = re.compile(r"[ \t\n\r\f\v]+")


def _check_each_day_field_fires(where: str, fields: list[str], has_seconds: bool, hash_id: str) -> None:
    """With both day fields restricted, refuse one that never fires on its
    own (``0 0 31 2 0``: no February has a 31st): croniter 6 refuses the
    expression, croniter 7 fires on the other field alone."""
    dom, month, dow = fields[-3], fields[-2], fields[-1]
    for side, text, other in (
        (f"day-of-month {dom!r}", " ".join([*fields[:-1], "*"]), " ".join([*fields[:-3], "*", month, dow])),
        (f"day-of-week {dow!r}", " ".join([*fields[:-3], "*", month, dow]), " ".join([*fields[:-1], "*"])),
    ):
        try:
            it = copy.copy(parsed(text, has_seconds, hash_id, False))
            it.set_current(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), force=True)
            it.get_next(float)
        except CroniterBadDateError:
            raise CronScheduleError(
                f"{where}: {side} never falls in month {month!r}, so only the other day field could fire, and "
                f"croniter versions disagree on that; write {other!r} if that is what you mean"
            ) from None
        except (CroniterError, ValueError, KeyError, TypeError, IndexError):
            return  # reported with the whole expression by the caller


def _every_day_when_either_covers_all(fields: list[str]) -> list[str]:
    """With both day fields restricted, classic cron fires on a day matching
    either one; if one of them matches every day (``0,*/1``, ``0-6``), every
    day fires.  croniter reads a day-of-week that covers the week as ``*``
    and then applies day-of-month alone, so spell "every day" out for it."""
    dom, dow = fields[-3], fields[-1]
    if not day_or(dom, dow):
        return fields
    try:
        expanded = croniter(f"* * {dom} * {dow}", 0).expanded
    except (CroniterError, ValueError, KeyError, TypeError, IndexError):
        return fields  # reported with the whole expression by the caller
    if expanded[2] == ["*"] or expanded[4] == ["*"]:
        return [*fields[:-3], "*", fields[-2], "*"]
    return fields


def _collapse_single_ranges(field: str) -> str:
    """Rewrite ``5-5`` (and ``5-5/2``) as ``5``: croniter 7 expands such a
    one-value range to ``*`` (every minute instead of minute 5) or to the
    whole field stepped, while classic cron means the single value."""
    parts = []
    for part in field.split(","):
        match = _RANGE.match(part)
        if match is not None:
            low, high = match.group(1), match.group(2)
            same = int(low) == int(high) if low.isdigit() and high.isdigit() else low.lower() == high.lower()
            if same:
                part = low
        parts.append(part)
    return ",".join(parts)


@functools.lru_cache(maxsize=4096)
def cron_shape(expression: str, has_seconds: bool) -> tuple[bool, bool]:
    """Whether a normalised expression is fixed-time (see cadence.py), and
    whether its day fields combine with OR."""
    fields = expression.split(" ")
    time_fields = fields[:3] if has_seconds else fields[:2]
    return not any(f.startswith("*") for f in time_fields), day_or(fields[-3], fields[-1])


def day_or(day_of_month: str, day_of_week: str) -> bool:
    # Classic cron (Vixie, Debian, cronsim): when both day fields restrict,
    # a day matching either fires; a field starting with ``*`` (``*/2``
    # too) makes the two fields combine with AND instead.
    return not any(f.startswith(("*", "?")) for f in (day_of_month, day_of_week))


def uses_hash(expression: str) -> bool:
    """Whether a cron expression has an ``H`` field (its values then depend
    on the schedule's identity)."""
    return _hashed(" ".join(expression.split()))


@functools.lru_cache(maxsize=4096)
def _hashed(expression: str) -> bool:
    """Whether any field uses ``H``: only then does the parse depend on the
    schedule's identity, so thousands of schedules sharing an expression
    share one parse."""
    return any(field[:1] in ("H", "h") for field in expression.split(" "))


def picked(expression: str, has_seconds: bool, hash_id: str, day_or: bool) -> str:
    """The values the H fields of ``expression`` pick for ``hash_id`` ("" for
    none): what its ticks depend on instead of the id, so the ids picking
    the same values share their walks."""
    if not hash_id:
        return ""
    it = parsed(expression, has_seconds, hash_id, day_or)
    return repr((it.expanded, it.nth_weekday_of_month, getattr(it, "nearest_weekday", None)))


@functools.lru_cache(maxsize=100_000)
def parsed(expression: str, has_seconds: bool, hash_id: str, day_or: bool) -> croniter:
    """A parsed expression, to be copied before walking (see ``Cadence._cron``)."""
    return croniter(expression, 0, second_at_beginning=has_seconds, hash_id=hash_id, day_or=day_or)
