"""How many examples a property test tries.

Each test names its full count.  CI (``CI`` set: its derandomized profile
replays the same examples every run) and ``HYPOTHESIS_PROFILE=thorough``
(``make chaos``, a nightly run) try all of them; an ordinary run of the
suite tries a quarter, at least 20, and explores new ones each time (and
replays what hypothesis's example database kept from earlier failures).
Bugs the searches found are pinned as ``@example``s or tests of their own,
so they are checked on every run whatever the count.
"""

from __future__ import annotations

import os


def thorough() -> bool:
    """Whether property tests run their full count."""
    return bool(os.environ.get("CI")) or os.environ.get("HYPOTHESIS_PROFILE") == "thorough"


def examples(full: int) -> int:
    """``full`` in a thorough run, a quarter of it (at least 20) otherwise."""
    return full if thorough() else max(full // 4, 20)
