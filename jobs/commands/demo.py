"""``lakelog demo``: the story in one command (the job itself is ``jobs.demo``)."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx


@click.command()
@json_option
@pass_ctx
def demo(c: Context, as_json: bool) -> None:
    """Create a topic, produce keyed records, consume them with a group, and show what happened.
    Runs Spark jobs (starts a JVM)."""
    from jobs.demo import run_demo

    run_demo(c.spark, c.root, c.config, as_json)
