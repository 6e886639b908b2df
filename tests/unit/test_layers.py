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
