"""The CLI's global options before or after the verb, its exit codes and --version, without Spark
(every case fails or finishes before a session is needed)."""

import click
from click.testing import CliRunner

from jobs.cli import cli
from jobs.context import Context, global_options, json_option, pass_ctx


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_conf_after_the_verb_is_used_and_wins_over_the_one_before(tmp_path):
    after = run("topics", "list", "--conf", str(tmp_path / "after.yaml"))
    assert after.exit_code == 1 and "after.yaml" in after.output
    both = run("--conf", str(tmp_path / "before.yaml"), "topics", "describe", "--topic", "t", "--conf",
               str(tmp_path / "after.yaml"))
    assert both.exit_code == 1 and "after.yaml" in both.output and "before.yaml" not in both.output
    before = run("--conf", str(tmp_path / "before.yaml"), "groups", "list")
    assert before.exit_code == 1 and "before.yaml" in before.output


def test_root_after_the_verb_reaches_the_configuration(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("root: /from/file\n")
    seen = {}

    @cli.command("_probe_root", hidden=True)
    @pass_ctx
    def probe(c: Context) -> None:
        seen["root"] = c.config.root

    probe.params.extend(global_options())
    try:
        assert run("--conf", str(conf), "_probe_root").exit_code == 0 and seen["root"] == "/from/file"
        assert run("_probe_root", "--conf", str(conf), "--root", "/after").exit_code == 0 and seen["root"] == "/after"
        assert run("--root", "/before", "_probe_root", "--conf", str(conf)).exit_code == 0 and seen["root"] == "/before"
    finally:
        cli.commands.pop("_probe_root")


def test_json_before_the_verb_counts_as_json_after_it():
    got = {}

    @click.command()
    @json_option
    def leaf(as_json: bool) -> None:
        got["json"] = as_json

    @click.group()
    @click.option("--json", "as_json", is_flag=True)
    @click.pass_context
    def root(ctx, as_json):
        ctx.obj = Context(None, None, as_json)

    root.add_command(leaf)
    CliRunner().invoke(root, ["--json", "leaf"])
    assert got["json"] is True
    CliRunner().invoke(root, ["leaf"])
    assert got["json"] is False
    CliRunner().invoke(root, ["leaf", "--json"])
    assert got["json"] is True


def test_usage_errors_exit_2_and_version_exits_0():
    assert run("topics", "list", "--bogus").exit_code == 2
    assert run("topics", "list", "--root").exit_code == 2  # the option needs a value
    assert run("nosuchverb").exit_code == 2
    version = run("--version")
    assert version.exit_code == 0 and "lakelog, version" in version.output


def test_reset_offsets_bad_targets_fail_before_spark_starts(tmp_path, monkeypatch):
    """Each bad reset request exits 1 (or 2 for usage) with what was wrong; no session is built."""
    monkeypatch.setattr(Context, "spark", property(lambda self: (_ for _ in ()).throw(AssertionError("spark started"))))
    base = ("--root", str(tmp_path), "groups", "reset-offsets", "--group", "g", "--topic", "t")
    both = run(*base, "--to-earliest", "--shift-by", "-2")
    assert both.exit_code == 1 and "exactly one reset target" in both.output and "--to-earliest, --shift-by" in both.output
    none = run(*base)
    assert none.exit_code == 1 and "got none" in none.output
    negative = run(*base, "--to-offset", "-5")
    assert negative.exit_code == 1 and "must be 0 or more" in negative.output
    when = run(*base, "--to-datetime", "last tuesday")
    assert when.exit_code == 1 and "ISO 8601" in when.output
    modes = run(*base, "--to-earliest", "--dry-run", "--execute")
    assert modes.exit_code == 2 and "not both" in modes.output
    assert not (tmp_path / "control").exists()


def test_sql_registers_the_words_of_its_query_and_everything_for_show():
    from control_plane.tables import views_named

    named = views_named("SELECT p.topic FROM Partitions p JOIN log_Orders_2 l ON l.partition = p.partition")
    assert {"partitions", "log_orders_2", "p", "l"} <= named and "topics" not in named and "group_offsets" not in named
    assert views_named("  show views") is None and views_named("SHOW TABLES") is None
    assert views_named("SELECT * FROM showcase") == {"select", "from", "showcase"}


def test_remote_before_or_after_the_verb_over_the_file_over_spark_remote(tmp_path, monkeypatch):
    """Which Spark Connect server a command's session is built on (``remote_url``): --remote (after
    the verb winning), else the file's spark.remote, else $SPARK_REMOTE; on Databricks the runtime's
    own session unless the file names one."""
    from log_store.config import SparkSettings
    from log_store.session import remote_url

    conf = tmp_path / "c.yaml"
    conf.write_text("spark:\n  remote: sc://from-file:1\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("root: /r\n")
    seen = {}

    @cli.command("_probe_remote", hidden=True)
    @pass_ctx
    def probe(c: Context) -> None:
        seen["remote"] = remote_url(c.spark_settings)

    probe.params.extend(global_options())
    monkeypatch.setenv("SPARK_REMOTE", "sc://from-env:1")
    try:
        assert run("--conf", str(plain), "_probe_remote").exit_code == 0 and seen["remote"] == "sc://from-env:1"
        assert run("--conf", str(conf), "_probe_remote").exit_code == 0 and seen["remote"] == "sc://from-file:1"
        assert run("--remote", "sc://before:1", "--conf", str(conf), "_probe_remote").exit_code == 0
        assert seen["remote"] == "sc://before:1"
        assert run("--remote", "sc://before:1", "_probe_remote", "--remote", "sc://after:1").exit_code == 0
        assert seen["remote"] == "sc://after:1"
    finally:
        cli.commands.pop("_probe_remote")
    assert remote_url(SparkSettings(mode="databricks")) is None
    assert remote_url(SparkSettings(mode="databricks", remote="sc://x:1")) == "sc://x:1"
