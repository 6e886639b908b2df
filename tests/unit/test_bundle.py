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


def resolved(value, target: str = "dev"):
    """``value`` with ``${var.x}`` and ``${workspace.*}`` references replaced as deploy to
    ``target`` would (the target's variables over the defaults)."""
    if isinstance(value, dict):
        return {k: resolved(v, target) for k, v in value.items()}
    if isinstance(value, list):
        return [resolved(v, target) for v in value]
    if isinstance(value, str):
        overrides = BUNDLE["targets"][target].get("variables") or {}

        def one(match: re.Match) -> str:
            name = match.group(1)
            if name.startswith("var."):
                return overrides.get(name[4:], BUNDLE["variables"][name[4:]]["default"])
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
SERVERLESS = "lakelog_serverless_"
CLASSIC_JOBS = sorted(k for k in JOBS if not k.startswith(SERVERLESS))
SERVERLESS_JOBS = sorted(k for k in JOBS if k.startswith(SERVERLESS))


def test_the_bundle_has_the_jobs_of_dbx_yml_and_only_known_sections():
    assert set(BUNDLE) <= TOP_LEVEL and BUNDLE["bundle"]["name"] == "lakelog"
    commands = {parse_command(resolved(t["python_wheel_task"]["parameters"]))[0]
                for job in JOBS.values() for t in job["tasks"]}
    assert {"produce", "stream", "consume", "controller", "audit"} <= commands
    assert set(BUNDLE["targets"]) == {"dev", "prod", "serverless"}


def command_of(task) -> list[str]:
    """The lakelog command path a task runs."""
    return parse_command(list(task.python_wheel_task.parameters))


@pytest.mark.parametrize("key", CLASSIC_JOBS)
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
        assert cluster.new_cluster.data_security_mode.value == "DATA_SECURITY_MODE_DEDICATED", \
            "Delta's engine and lakelog's JVM source are reached through the driver's JVM"


@pytest.mark.parametrize("key", SERVERLESS_JOBS)
def test_each_serverless_job_runs_in_an_environment_with_the_wheel_and_no_cluster_or_jar(key):
    job = Job.from_dict(resolved(JOBS[key], "serverless"))
    assert not job.job_clusters
    environments = {e.environment_key: e.spec for e in job.environments}
    for task in job.tasks:
        assert task.python_wheel_task.package_name == "lakelog" and command_of(task)
        assert not task.libraries and not task.job_cluster_key and not task.new_cluster and not task.existing_cluster_id
        spec = environments[task.environment_key]
        assert spec.dependencies == ["./dist/*.whl"] and not spec.java_dependencies, "the wheel; no jar on serverless"
        assert spec.environment_version.isdigit() and not spec.client
        params = list(task.python_wheel_task.parameters)
        conf = params[params.index("--conf") + 1]
        assert conf.endswith("/conf/databricks.yaml") and (PROJECT / "conf" / "databricks.yaml").is_file()


def test_each_job_has_a_serverless_twin_and_one_of_the_two_runs_per_target():
    twins = {k: SERVERLESS + k.removeprefix("lakelog_") for k in CLASSIC_JOBS}
    assert sorted(twins.values()) == SERVERLESS_JOBS
    for classic, serverless in twins.items():
        [a], [b] = Job.from_dict(resolved(JOBS[classic])).tasks, Job.from_dict(resolved(JOBS[serverless])).tasks
        assert command_of(a) == command_of(b)
        assert [p for p in b.python_wheel_task.parameters if p.startswith("--") and p not in ("--conf", "--root")] \
            == [p for p in a.python_wheel_task.parameters if p.startswith("--") and p != "--root"]
    for target in BUNDLE["targets"]:
        running = {k for k in JOBS if Job.from_dict(resolved(JOBS[k], target)).schedule.pause_status.value == "UNPAUSED"}
        assert running == set(SERVERLESS_JOBS if target == "serverless" else CLASSIC_JOBS), target


def test_a_task_with_a_wrong_argument_would_be_caught():
    with pytest.raises(click.UsageError):
        parse_command(["stream", "--topic", "t", "--no-such-flag"])
    with pytest.raises(ValueError, match="Unexpected field"):
        Job.from_dict({"name": "x", "tasks": [{"task_key": "a", "python_wheel_task": {
            "package_name": "lakelog", "entry_point": "lakelog", "paramters": []}}]})
