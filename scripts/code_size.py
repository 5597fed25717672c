"""Code size of the package: code lines per subpackage and the largest classes.

A code line is a line that holds code: blanks, comments and docstrings are
not counted.  Run from the repository root::

    python scripts/code_size.py [PACKAGE_DIR]
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path


def code_lines(source: str) -> set[int]:
    """The line numbers holding code (not blank, comment or docstring)."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    end = body[0].end_lineno or body[0].lineno
                    docstrings.update(range(body[0].lineno, end + 1))
    lines: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in skip:
            continue
        for line in range(token.start[0], token.end[0] + 1):
            if line not in docstrings:
                lines.add(line)
    return lines


def classes(path: Path, source: str, lines: set[int]) -> list[tuple[int, int, int, str]]:
    """(code lines, methods, attributes, name) of each class in a module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        size = len([n for n in lines if node.lineno <= n <= (node.end_lineno or node.lineno)])
        methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        attributes = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
                        attributes.add(target.attr)
        found.append((size, len(methods), len(attributes), f"{path.stem}.{node.name}"))
    return found


def main(root: Path) -> None:
    per_package: dict[str, int] = {}
    all_classes = []
    modules = 0
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        lines = code_lines(source)
        modules += 1
        package = path.parent.relative_to(root.parent).as_posix()
        per_package[package] = per_package.get(package, 0) + len(lines)
        all_classes.extend(classes(path, source, lines))
    print("| package | code lines |")
    print("|---|---:|")
    for package, size in sorted(per_package.items()):
        print(f"| {package} | {size} |")
    print(f"| **all ({modules} modules)** | **{sum(per_package.values())}** |")
    print()
    print("| largest classes | code lines | methods | attributes |")
    print("|---|---:|---:|---:|")
    for size, methods, attributes, name in sorted(all_classes, reverse=True)[:8]:
        print(f"| {name} | {size} | {methods} | {attributes} |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "dramatiq_cron_middleware").resolve())
