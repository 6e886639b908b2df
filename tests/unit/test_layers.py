"""Dependencies point one way: jobs -> serve -> pipelines -> control_plane -> log_store (never back up),
read from the import statements, so a new upward import fails here rather than in review."""

import ast
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
LAYERS = ["log_store", "control_plane", "pipelines", "serve", "jobs"]  # bottom first


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
    return out


@pytest.mark.parametrize("layer", LAYERS)
def test_no_module_imports_a_layer_above_its_own(layer):
    above = set(LAYERS[LAYERS.index(layer) + 1:]) | {"chaos", "benchmarks", "tests"}
    bad = {str(p.relative_to(PROJECT)): sorted(imports(p) & above) for p in (PROJECT / layer).rglob("*.py")}
    assert {p: mods for p, mods in bad.items() if mods} == {}


def test_only_the_engine_modules_name_deltas_internal_package():
    """py4j reaches Delta's JVM classes from log_store only (the engine facade's layer)."""
    users = {str(p.relative_to(PROJECT)) for layer in LAYERS[1:] for p in (PROJECT / layer).rglob("*.py")
             if "org.apache.spark.sql.delta" in p.read_text() or "_jvm" in p.read_text()}
    assert users == set()


# format("lakelog")'s JVM source and sink: the one place above log_store that hands Spark's JVM
# objects across py4j (docs/engine.md, "One engine facade")
JVM_BRIDGE = {"pipelines/spark/bridge.py", "pipelines/spark/reading.py"}
PY4J_HANDLES = {"_jvm", "_jdf", "_jsparkSession", "sparkContext", "_gateway"}


def test_py4j_handles_above_log_store_only_in_format_lakelogs_jvm_bridge():
    """Above log_store, no code reaches the JVM through py4j (a Spark Connect session has none)
    but format("lakelog")'s JVM source and sink; read from the code, not its comments."""
    users = {}
    for layer in LAYERS[1:]:
        for p in (PROJECT / layer).rglob("*.py"):
            tree = ast.parse(p.read_text())
            used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in PY4J_HANDLES}
            used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                     if a.name.split(".")[0] == "py4j"}
            used |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                     and n.module.split(".")[0] == "py4j"}
            if used:
                users[str(p.relative_to(PROJECT))] = sorted(used)
    assert set(users) <= JVM_BRIDGE, {p: u for p, u in users.items() if p not in JVM_BRIDGE}


def test_the_wheel_holds_every_package_of_the_source_tree():
    """lakelog's wheel (databricks.yml installs it) finds every package, subpackages included."""
    import tomllib

    from setuptools import find_packages

    from tests.support import PROJECT

    found = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packaged = set(find_packages(str(PROJECT), include=found["include"]))
    roots = {p.split("/")[0] for p in found["include"]} | {p.rstrip("*") for p in found["include"]}
    on_disk = {str(init.parent.relative_to(PROJECT)).replace("/", ".") for init in PROJECT.glob("*/**/__init__.py")
               if str(init.parent.relative_to(PROJECT)).split("/")[0] in roots}
    assert on_disk and on_disk <= packaged, sorted(on_disk - packaged)
    assert {"control_plane.group", "pipelines.spark"} <= packaged


def _module_level_imports(path: Path, known: set[str]) -> set[str]:
    """The product modules ``path`` imports when it is loaded (not inside functions, not under
    ``TYPE_CHECKING``): ``from a.b import c`` names ``a.b.c`` if that is a module, else ``a.b``."""
    out: set[str] = set()
    stack = list(ast.parse(path.read_text()).body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.If, ast.Try)):
            stack += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                      *(n for h in getattr(node, "handlers", []) for n in h.body)]
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                out.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module)
    return out & known


def test_no_import_cycles():
    """No module imports, while it loads, a module that imports it back (through any chain): a
    cycle makes the order of imports matter and a half-loaded module fail."""
    paths = {}
    for layer in LAYERS:
        for p in (PROJECT / layer).rglob("*.py"):
            name = ".".join(p.relative_to(PROJECT).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = p
    graph = {m: _module_level_imports(p, set(paths)) - {m} for m, p in paths.items()}
    cycles, state = [], {}

    def visit(m: str, trail: list[str]) -> None:
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycles.append(trail[trail.index(n):] + [n])
            elif n not in state:
                visit(n, trail + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []
