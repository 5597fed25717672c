"""A cron expression in words: ``"*/5 * * * *"`` is "Every 5 minutes".

The wording comes from the ``cron-descriptor`` library (installed with the
``web`` extra), given the normalised expression the middleware fires: 6
fields mean seconds first, as here.  ``H`` fields are first resolved to the
values croniter picks for the schedule, so the words name the real minute.
Anything the library cannot read is shown as the expression itself.
"""

from __future__ import annotations

import functools

from croniter import croniter

__all__ = ["describe"]


@functools.lru_cache(maxsize=4096)
def describe(expression: str, *, hash_id: str = "") -> str:
    """The expression in words, or the expression itself if no wording fits.

    Parameters:
      expression: A normalised expression (5 fields, or 6 with seconds first).
      hash_id: The schedule's identity, which ``H`` fields are hashed with.
    """
    try:
        from cron_descriptor import ExpressionDescriptor, Options
    except ImportError:  # the web extra is optional for the package itself
        return expression
    text = _resolve_hashes(expression, hash_id)
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        words = str(ExpressionDescriptor(text, options).get_description())
    except Exception:  # the library raises several types of its own
        return expression
    # A field the library could not place leaves a double space behind.
    return " ".join(words.split()) or expression


def _resolve_hashes(expression: str, hash_id: str) -> str:
    fields = expression.split(" ")
    if not any(f[:1] in ("H", "h") for f in fields):
        return expression
    has_seconds = len(fields) == 6
    try:
        expanded = croniter(expression, 0, second_at_beginning=has_seconds, hash_id=hash_id).expanded
    except Exception:
        return expression
    # croniter orders the fields minute..weekday, then second.
    order = [5, 0, 1, 2, 3, 4] if has_seconds else [0, 1, 2, 3, 4]
    out = []
    for field, index in zip(fields, order, strict=True):
        if field[:1] in ("H", "h") and index < len(expanded):
            out.append(",".join(str(v) for v in expanded[index]))
        else:
            out.append(field)
    return " ".join(out)
