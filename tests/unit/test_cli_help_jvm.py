"""Every command that can run a Spark job says in its --help that it starts a JVM (docs/cli.md's
list, "Commands without a JVM"), and the commands that never do say nothing of the kind."""

import re

import pytest
from click.testing import CliRunner

from jobs.cli import cli

# the commands (or an option of theirs) that run Spark jobs, as docs/cli.md lists them
STARTS_A_JVM = [
    ("produce",),  # a larger or remote file
    ("consume",),  # --output: a Delta sink
    ("stream",),
    ("topics", "table"),
    ("topics", "alter"),  # --layout
    ("audit",),
    ("demo",),
    ("controller", "tick"),  # an arrival-layout log's retired partitions
    ("sql",),  # when the query cannot be answered without Spark
]
NEVER = [("topics", "create"), ("topics", "describe"), ("topics", "list"), ("groups", "list"),
         ("replicate",), ("serve",)]


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", result.output)


@pytest.mark.parametrize("path", STARTS_A_JVM, ids=" ".join)
def test_a_command_that_can_run_spark_says_it_starts_a_jvm(path):
    assert "starts a JVM" in help_text(path)


@pytest.mark.parametrize("path", NEVER, ids=" ".join)
def test_a_command_without_spark_says_nothing_of_a_jvm(path):
    assert "starts a JVM" not in help_text(path)
