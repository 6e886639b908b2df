"""What the Python data source loads: Spark starts a new Python process for each stream's reader,
which imports ``pipelines.spark.python_source`` before the stream's first plan."""

import subprocess
import sys

from log_store.config import PROJECT_ROOT


def loaded_after(statement: str) -> set[str]:
    """The product modules a new interpreter holds after ``statement``."""
    probe = f"import sys\n{statement}\nprint(' '.join(m for m in sys.modules if m.startswith('pipelines.')))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_python_source_does_without_the_jvm_sources_bridge():
    assert "pipelines.spark.bridge" not in loaded_after("import pipelines.spark.python_source")


def test_register_and_format_are_the_bridges():
    from pipelines.spark import FORMAT, bridge, register

    assert (FORMAT, register) == (bridge.FORMAT, bridge.register)
    assert "pipelines.spark.bridge" in loaded_after("from pipelines.spark import register")
