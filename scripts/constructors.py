"""Constructors taking more than 8 parameters (issue 29: none should).

Counts every parameter of each ``__init__`` but ``self`` (``*args`` and
``**kwargs`` count one each).  Run from the repository root::

    python scripts/constructors.py [PACKAGE_DIR]

Exit status 1 when one is found.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LIMIT = 8


def wide(root: Path) -> list[tuple[int, str]]:
    """(parameters, ``module.Class``) of every constructor over the limit."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    a = item.args
                    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - 1
                    count += (a.vararg is not None) + (a.kwarg is not None)
                    if count > LIMIT:
                        found.append((count, f"{path.relative_to(root).with_suffix('')}.{node.name}"))
    return sorted(found, reverse=True)


def main(root: Path) -> int:
    found = wide(root)
    for count, name in found:
        print(f"{count:3d}  {name}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "dramatiq_cron_middleware")))
