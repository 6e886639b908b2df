"""``lakelog``: a Kafka-style command line over the log store, control plane and clients.

The root only: its options and the verbs, each in its own module under ``jobs/commands``.
``--root`` (or ``$LAKELOG_ROOT``), ``--conf`` (or ``$LAKELOG_CONF``), ``--json``, ``--verbose``
and ``--remote`` (a Spark Connect server, or ``$SPARK_REMOTE``) go before or after the verb.
Exit codes: 0 ok, 1 an error lakelog reports (what was wrong, what to do), 2 a usage error
(click's).
"""

from __future__ import annotations

import click

from jobs.commands.audit import audit
from jobs.commands.consume import consume
from jobs.commands.controller import controller
from jobs.commands.demo import demo
from jobs.commands.groups import groups
from jobs.commands.produce import produce
from jobs.commands.replicate import replicate
from jobs.commands.serve import serve
from jobs.commands.sql import sql
from jobs.commands.stream import stream
from jobs.commands.topics import topics
from jobs.commands.transactions import transactions
from jobs.context import REMOTE_HELP, Context, LakelogGroup, add_global_options


@click.group(cls=LakelogGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", envvar="LAKELOG_ROOT", default=None, help="Root path or URI (default from conf: ./lakelog-data).")
@click.option("--conf", envvar="LAKELOG_CONF", default=None, help="Configuration YAML (default conf/local.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (any read command).")
@click.option("--verbose", is_flag=True, help="Show Spark's and the JVM's own log lines.")
@click.option("--remote", metavar="sc://HOST:PORT", default=None, help=REMOTE_HELP + ".")
@click.version_option(package_name="lakelog", prog_name="lakelog")
@click.pass_context
def cli(ctx: click.Context, root: str | None, conf: str | None, as_json: bool, verbose: bool, remote: str | None) -> None:
    """lakelog: a Kafka-style partitioned log in Delta Lake tables.

    Shell completion: eval "$(_LAKELOG_COMPLETE=bash_source lakelog)" (zsh_source, fish_source).
    """
    if ctx.obj is None:
        ctx.obj = Context(conf, root, as_json, verbose, remote)
    else:  # options given after the verb were parsed first (eager): they win
        obj = ctx.obj
        obj.conf_path = obj.conf_path or conf
        obj.root_override = obj.root_override or root
        obj.as_json = obj.as_json or as_json
        obj.verbose = obj.verbose or verbose
        obj.remote = obj.remote or remote


for command in (topics, produce, consume, stream, groups, transactions, controller, audit, sql, demo, replicate, serve):
    cli.add_command(command)
add_global_options(cli)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
