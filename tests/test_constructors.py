"""No constructor takes more than 8 parameters (issue 29): what belongs
together travels as one value (a ``Candidate``, a ``Durability``).
``scripts/constructors.py`` lists the ones over; there are none left."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_constructor_takes_more_than_eight_parameters() -> None:
    spec = importlib.util.spec_from_file_location("constructors", ROOT / "scripts" / "constructors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.wide(ROOT / "dramatiq_cron_middleware") == []
