"""The Databricks Asset Bundle (databricks.yml) checked without a workspace: every job against the
bundle's job schema (databricks-bundles' typed models, which refuse unknown and missing fields),
and every task's arguments as a lakelog command the CLI accepts."""

from __future__ import annotations

import re
import tomllib

import click
import pytest
import yaml
from databricks.bundles.jobs import Job

from jobs.cli import cli
from tests.support import PROJECT

BUNDLE = yaml.safe_load((PROJECT / "databricks.yml").read_text())
TOP_LEVEL = {"bundle", "variables", "artifacts", "resources", "targets", "include", "workspace", "sync",
             "permissions", "run_as", "presets", "experimental", "python"}
WORKSPACE = {"workspace.file_path": "/Users/someone/.bundle/lakelog/dev/files"}


def resolved(value):
    """``value`` with ``${var.x}`` and ``${workspace.*}`` references replaced as deploy would."""
    if isinstance(value, dict):
        return {k: resolved(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolved(v) for v in value]
    if isinstance(value, str):
        def one(match: re.Match) -> str:
            name = match.group(1)
            if name.startswith("var."):
                return BUNDLE["variables"][name[4:]]["default"]
            return WORKSPACE[name]
        return re.sub(r"\$\{([a-z_.]+)\}", one, value)
    return value


def parse_command(args: list[str]) -> list[str]:
    """The command path the CLI resolves ``args`` to, raising click's usage errors as the CLI would."""
    ctx = cli.make_context("lakelog", list(args))
    path, command = [], cli
    while isinstance(command, click.Group):
        name, command, rest = command.resolve_command(ctx, ctx.protected_args + ctx.args)
        path.append(name)
        ctx = command.make_context(name, rest, parent=ctx)
    return path


JOBS = BUNDLE["resources"]["jobs"]


def test_the_bundle_has_the_jobs_of_dbx_yml_and_only_known_sections():
    assert set(BUNDLE) <= TOP_LEVEL and BUNDLE["bundle"]["name"] == "lakelog"
    commands = {parse_command(resolved(t["python_wheel_task"]["parameters"]))[0]
                for job in JOBS.values() for t in job["tasks"]}
    assert {"produce", "stream", "consume", "controller", "audit"} <= commands
    assert set(BUNDLE["targets"]) == {"dev", "prod"}


@pytest.mark.parametrize("key", sorted(JOBS))
def test_each_job_fits_the_bundle_schema_and_runs_a_lakelog_command(key):
    job = Job.from_dict(resolved(JOBS[key]))
    scripts = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["scripts"]
    for task in job.tasks:
        wheel = task.python_wheel_task
        assert wheel.package_name == "lakelog" and wheel.entry_point in scripts
        assert parse_command(list(wheel.parameters))
        assert [lib.whl for lib in task.libraries if lib.whl] == ["./dist/*.whl"]
        jars = [lib.jar for lib in task.libraries if lib.jar]
        uses_format = parse_command(list(wheel.parameters))[0] == "stream"
        assert jars == (["./log_store/jvm/target/lakelog-jvm.jar"] if uses_format else []), "format('lakelog') is a JVM source"
    for cluster in job.job_clusters:
        conf = cluster.new_cluster.spark_env_vars["LAKELOG_CONF"]
        assert conf.endswith("/conf/databricks.yaml") and (PROJECT / "conf" / "databricks.yaml").is_file()
        assert cluster.new_cluster.spark_version.startswith("19."), "format('lakelog') streams need Spark 4.2"


def test_a_task_with_a_wrong_argument_would_be_caught():
    with pytest.raises(click.UsageError):
        parse_command(["stream", "--topic", "t", "--no-such-flag"])
    with pytest.raises(ValueError, match="Unexpected field"):
        Job.from_dict({"name": "x", "tasks": [{"task_key": "a", "python_wheel_task": {
            "package_name": "lakelog", "entry_point": "lakelog", "paramters": []}}]})
