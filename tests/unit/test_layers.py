"""The layer table of docs/architecture.md holds for every import under src/quorumq."""

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

import quorumq

PACKAGE_ROOT = Path(quorumq.__file__).parent
ARCHITECTURE = PACKAGE_ROOT.parents[1] / "docs" / "architecture.md"
CORE_FORBIDDEN = ("grpc", "google.protobuf", "rocketmq", "asyncio", "threading", "os", "socket", "time",
                  "kazoo", "pyspark")
CLIENT_FORBIDDEN = ("store", "broker", "endpoint", "namesrv", "controller", "replication")


def layer_table() -> dict[str, int]:
    """Package -> layer number, from the table's rows `| n | a, b | ... |`."""
    layers = {}
    for number, packages in re.findall(r"^\|\s*(\d+)\s*\|\s*([a-z_, ]+?)\s*\|", ARCHITECTURE.read_text(), re.M):
        for package in packages.split(","):
            layers[package.strip()] = int(number)
    return layers


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = ("quorumq", *path.relative_to(PACKAGE_ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(module: str, path: Path) -> set[str]:
    """Every module name a file imports, anywhere in it (a function-level import counts): absolute
    and relative imports (resolved against the file's package) and importlib.import_module with a
    literal name. `from a import b` yields a.b: the module a.b if there is one, else a name in a."""
    package_name = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = resolve("." * node.level + (node.module or ""), package_name)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and is_import_module(node.func) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(resolve(node.args[0].value, package_name))
    return names


def resolve(name: str, package_name: str) -> str:
    """The absolute name of an import written in package `package_name` (`..a` -> parent.a)."""
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    base = package_name.rsplit(".", level - 1)[0] if level > 1 else package_name
    return f"{base}.{name[level:]}" if name[level:] else base


def is_import_module(func: ast.expr) -> bool:
    """importlib.import_module(...) or import_module(...) (from importlib import import_module)."""
    return (isinstance(func, ast.Attribute) and func.attr == "import_module"
            and isinstance(func.value, ast.Name) and func.value.id == "importlib") \
        or (isinstance(func, ast.Name) and func.id == "import_module")


def imports(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the quorumq modules it imports (a name that is no module counts as its package)."""
    graph = defaultdict(set)
    for module, path in found.items():
        for name in imported_names(module, path):
            while name not in found and "." in name:
                name = name.rpartition(".")[0]
            if name.startswith("quorumq") and name != module:
                graph[module].add(name)
    return graph


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_the_table_places_every_package():
    layers = layer_table()
    unplaced = {package(module) for module in modules()} - set(layers)
    assert not unplaced, f"packages missing from the layer table in {ARCHITECTURE.name}: {sorted(unplaced)}"


def test_every_import_points_down():
    layers = layer_table()
    upward = []
    for module, targets in imports(modules()).items():
        for target in targets:
            source_package, target_package = package(module), package(target)
            if source_package != target_package and layers[target_package] <= layers[source_package]:
                upward.append(f"{module} (layer {layers[source_package]}) imports {target} "
                              f"(layer {layers[target_package]})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_circle():
    graph = imports(modules())
    state: dict[str, int] = {}  # 1 on the path being walked, 2 done

    def walk(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target):], target] if target in path else [module, target]
            if target not in state and (circle := walk(target, [*path, target])):
                return circle
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (circle := walk(module, [module])):
            pytest.fail("import circle: " + " -> ".join(circle))


def external_imports(module: str, path: Path) -> set[str]:
    """The modules outside quorumq that a file imports, anywhere in it."""
    return {name for name in imported_names(module, path) if name.partition(".")[0] != "quorumq"}


def reached_from(start_package: str) -> set[str]:
    """Every quorumq module a package's modules import, directly or through other quorumq modules."""
    found, graph = modules(), imports(modules())
    reached, todo = set(), [module for module in found if package(module) == start_package]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph.get(module, ()))
    return reached


def test_core_loads_no_io_and_no_protocol():
    found = modules()
    heavy = sorted(f"{module} imports {name}" for module in reached_from("core")
                   for name in external_imports(module, found[module])
                   if any(name == top or name.startswith(top + ".") for top in CORE_FORBIDDEN))
    assert not heavy, "\n".join(heavy)


def test_the_client_library_loads_no_server_code():
    servers = sorted(module for module in reached_from("client") if package(module) in CLIENT_FORBIDDEN)
    assert not servers, f"client/ loads {servers}"


def test_the_proxy_loads_no_broker_or_store_code():
    """A proxy holds no state: what it serves comes from the brokers and the name server."""
    servers = sorted(module for module in reached_from("proxy") if package(module) in CLIENT_FORBIDDEN)
    assert not servers, f"proxy/ loads {servers}"
