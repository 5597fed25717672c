"""docs/design.md names modules that exist, so its module table stays true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dramatiq_cron_middleware"
DESIGN = ROOT / "docs" / "design.md"

_NAMED = re.compile(r"`([\w/*.]+\.(?:py|lua))`")


def _resolves(name: str) -> bool:
    """A path under the package or the repository (a glob allowed), or a
    file name that only one module or script of the package carries."""
    if "/" in name:
        return any(PACKAGE.glob(name)) or any(ROOT.glob(name))
    return (PACKAGE / name).exists() or len(list(PACKAGE.rglob(name))) == 1


def test_every_module_design_md_names_exists() -> None:
    # Given the design document, when every backticked .py or .lua file it
    # names is looked up in the package, then each is there (and a bare name
    # is not ambiguous).
    named = set(_NAMED.findall(DESIGN.read_text()))
    assert named, "design.md names no modules: the pattern is broken"
    assert sorted(name for name in named if not _resolves(name)) == []


def test_every_module_has_a_row_in_design_md() -> None:
    # Given the package's modules, then design.md's module table names each
    # one (by path under the package), so a new module gets a row.
    text = DESIGN.read_text()
    modules = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py") if path.name != "__init__.py"]
    assert sorted(module for module in modules if f"`{module}`" not in text) == []
