"""The package's layers hold: what design.md's layer table says is what the
imports do.

Read from the source (``ast``), not by importing it, so an import inside a
function or under ``TYPE_CHECKING`` counts like any other: a type that names
a module above is still a dependency on it (a change there breaks the type
check here), so it is not exempt.

Three rules:

- **Layers.** design.md's table under "## Modules" lists the layers bottom
  to top, one row each; a module may import from its own row and the rows
  above it in the table (lower layers), never from a row below it.  Every
  module has a row.
- **No private names across modules.** No ``from x import _name`` of this
  package, and no ``obj._name`` whose ``_name`` the module does not define
  itself (``self._x`` and ``cls._x`` are a class's own).  Exempt: dramatiq's
  ``RedisBroker._dispatch``, the one broker internal the boundary drives
  (store/boundary.py; a private of another project, pinned by its tests).
- **Only store/ talks to Redis.** Outside store/, no call of a Redis command
  method, no script loaded (``register_script``, ``eval``, ``script_load``,
  a ``.lua`` file), and every name taken from redis-py is an exception type
  (to catch or to subclass).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dramatiq_cron_middleware"
DESIGN = ROOT / "docs" / "design.md"
NAME = PACKAGE.name

#: Private names of other projects a module may use, and why (see above).
FOREIGN_PRIVATES = {("store/boundary.py", "_dispatch")}
#: Redis commands as redis-py's client methods (names nothing else here uses).
REDIS_COMMANDS = frozenset(
    "hget hset hmget hgetall hdel hscan hscan_iter hlen hexists hincrby zadd zrange zrangebyscore zrevrange "
    "zrevrangebyscore zrem zcard zscore zcount xadd xrange xrevrange xlen xtrim xread sadd srem smembers "
    "sismember scard lpush rpush lpop rpop blpop brpop lrange llen ltrim pexpire pexpireat pttl expire ttl incr "
    "incrby decr execute_command pipeline config_get client_list client_id client_setname scan_iter mget mset "
    "setnx psetex pubsub eval evalsha script_load register_script flushall flushdb unlink".split()
)


@dataclass(frozen=True)
class Module:
    path: str  # relative to the package: "store/lease.py"
    name: str  # dotted: "dramatiq_cron_middleware.store.lease"
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.name if self.path.endswith("__init__.py") else self.name.rpartition(".")[0]


def modules() -> list[Module]:
    out = []
    for file in sorted(PACKAGE.rglob("*.py")):
        rel = file.relative_to(PACKAGE).as_posix()
        dotted = ".".join([NAME, *rel.removesuffix(".py").split("/")]).removesuffix(".__init__")
        out.append(Module(rel, dotted, ast.parse(file.read_text(), filename=str(file))))
    return out


def imports(module: Module) -> list[tuple[int, str, list[str]]]:
    """``(line, module imported, names)`` of every import of this package."""
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.package.split(".")[: len(module.package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == NAME or target.startswith(NAME + "."):
                found.append((node.lineno, target, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.startswith(NAME)]
    return found


def layers() -> list[list[str]]:
    """design.md's layer table, bottom first: per row the backticked names
    of its first column (a folder ``x/`` or a module ``x.py``)."""
    text = DESIGN.read_text()
    table = text.split("| folder | role | imports from |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    return [re.findall(r"`([\w/]+(?:\.py|/))`", row.split("|")[1]) for row in rows]


def layer_of(path: str, table: list[list[str]]) -> int | None:
    for rank, row in enumerate(table):
        for entry in row:
            if path == entry or (entry.endswith("/") and path.startswith(entry)):
                return rank
    return None


def path_of(dotted: str, by_name: dict[str, Module]) -> str | None:
    """The module a dotted import names (a package's ``__init__.py``)."""
    while dotted:
        if dotted in by_name:
            return by_name[dotted].path
        dotted = dotted.rpartition(".")[0]
    return None


def test_every_module_is_in_a_layer_of_design_md() -> None:
    # Given design.md's layer table, then each module of the package sits in
    # exactly one of its rows.
    table = layers()
    assert len(table) >= 6, f"design.md's layer table was not found: {table}"
    assert [m.path for m in modules() if layer_of(m.path, table) is None] == []


def test_no_import_runs_up_a_layer() -> None:
    # Given every import of the package's own modules (inside functions and
    # under TYPE_CHECKING too), then none reaches a layer above its module's.
    table = layers()
    found = modules()
    by_name = {m.name: m for m in found}
    upward = []
    for module in found:
        rank = layer_of(module.path, table)
        for line, target, names in imports(module):
            targets = [f"{target}.{n}" if f"{target}.{n}" in by_name else target for n in names] or [target]
            for dotted in targets:
                imported = path_of(dotted, by_name)
                theirs = layer_of(imported, table) if imported is not None else None
                if rank is not None and theirs is not None and theirs > rank:
                    upward.append(f"{module.path}:{line} imports {imported}")
    assert sorted(set(upward)) == []


def test_no_private_name_crosses_a_module() -> None:
    # Given every module, then it imports no _name of another of ours and
    # reads no obj._name it does not define itself.
    crossing = []
    for module in modules():
        for line, target, names in imports(module):
            crossing += [f"{module.path}:{line} imports {target}.{n}" for n in names if _private(n)]
        own = _defined(module.tree)
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr) or node.attr in own:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if (module.path, node.attr) not in FOREIGN_PRIVATES:
                crossing.append(f"{module.path}:{node.lineno} reads {ast.unparse(node)}")
    assert crossing == []


def test_only_the_store_talks_to_redis() -> None:
    # Given every module outside store/, then none calls a Redis command,
    # loads a script, or takes from redis-py anything but exception types.
    talking = []
    for module in modules():
        if module.path.startswith("store/"):
            continue
        redis_names = _redis_bindings(module.tree)
        inner = {id(n.value) for n in ast.walk(module.tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in REDIS_COMMANDS:
                    talking.append(f"{module.path}:{node.lineno} calls {ast.unparse(node.func)}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".lua"):
                talking.append(f"{module.path}:{node.lineno} names the script {node.value}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "redis":
                source = _resolve(node.module or "redis")
                for alias in node.names:
                    if not _exception(getattr(source, alias.name, None)):
                        talking.append(f"{module.path}:{node.lineno} imports redis's {alias.name}")
            elif isinstance(node, ast.Attribute) and _root_name(node) in redis_names and id(node) not in inner:
                value = _resolve(ast.unparse(node).replace(_root_name(node) or "", "redis", 1))
                if not _exception(value) and not _module_value(value):
                    talking.append(f"{module.path}:{node.lineno} uses {ast.unparse(node)}")
    assert talking == []


def test_the_rules_see_what_they_refuse() -> None:
    # Given a module that breaks each rule, then each check notices it: the
    # rules are not vacuous.
    tree = ast.parse("from redis import Redis\nimport redis\nredis.Redis\nclient.hset('k', 'f', 'v')\nx.y._z\n")
    assert _redis_bindings(tree) == {"redis"}
    assert not _exception(_resolve("redis.Redis")) and _exception(_resolve("redis.ConnectionError"))
    assert "hset" in REDIS_COMMANDS and "_z" not in _defined(tree)
    table = layers()
    assert layer_of("store/lease.py", table) < layer_of("leader/thread.py", table) < layer_of("service.py", table)
    assert layer_of("service.py", table) < layer_of("ops/cli.py", table) < layer_of("testing.py", table)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and
    attributes, arguments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _redis_bindings(tree: ast.Module) -> set[str]:
    """The names a module binds to redis-py itself (``import redis``)."""
    return {
        alias.asname or alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.split(".")[0] == "redis"
    }


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _resolve(dotted: str) -> object:
    value: object = redis
    for part in dotted.split(".")[1:]:
        value = getattr(value, part, None)
    return value


def _exception(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _module_value(value: object) -> bool:
    return type(value).__name__ == "module"
