"""``lakelog``: a Kafka-style command line over the log store, control plane and clients.

The root only: its options and the verbs, each in its own module under ``jobs/commands``.
Every command takes ``--root`` (or ``$LAKELOG_ROOT``) and ``--conf`` (or ``$LAKELOG_CONF``);
read commands take ``--json``. Errors print what was wrong and exit non-zero.
"""

from __future__ import annotations

import click

from jobs.commands.audit import audit
from jobs.commands.consume import consume
from jobs.commands.controller import controller
from jobs.commands.demo import demo
from jobs.commands.groups import groups
from jobs.commands.produce import produce
from jobs.commands.sql import sql
from jobs.commands.topics import topics
from jobs.context import Context, LakelogGroup


@click.group(cls=LakelogGroup)
@click.option("--root", envvar="LAKELOG_ROOT", default=None, help="Root path or URI (default from conf: ./lakelog-data).")
@click.option("--conf", envvar="LAKELOG_CONF", default=None, help="Configuration YAML (default conf/local.yaml).")
@click.pass_context
def cli(ctx: click.Context, root: str | None, conf: str | None) -> None:
    """lakelog: a Kafka-style partitioned log in Delta Lake tables."""
    ctx.obj = Context(conf, root)


for command in (topics, produce, consume, groups, controller, audit, sql, demo):
    cli.add_command(command)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
