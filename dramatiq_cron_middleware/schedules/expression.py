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

import re
from importlib import metadata

from ..errors import CronScheduleError

__all__ = ["RULES", "SEMANTICS", "canonical_fields", "check_ascii"]

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
