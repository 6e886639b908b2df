"""The CLI as a user types it, in the test run's Spark session."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from jobs.cli import cli


@pytest.fixture()
def run(spark, root):
    """``run(*args)``: ``lakelog --root <root> *args`` through click's runner."""
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(cli, ["--root", root, *args], catch_exceptions=False)

    return invoke
