"""``lakelog groups``: list and describe consumer groups (Kafka's ``kafka-consumer-groups``)."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit


@click.group()
def groups() -> None:
    """Inspect consumer groups."""


@groups.command("list")
@json_option
@pass_ctx
def list_(c: Context, as_json: bool) -> None:
    """Groups under the root with their latest generation, protocol and member count."""
    from control_plane.group.describe import list_groups

    emit(list_groups(c.spark, c.root), as_json, "groups")


@groups.command("describe")
@click.option("--group", required=True)
@json_option
@pass_ctx
def describe(c: Context, group: str, as_json: bool) -> None:
    """Members, generation, protocol, each member's partitions, committed offsets, lag and metrics."""
    from control_plane.group.describe import describe_group

    d = describe_group(c.spark, c.root, group)
    if as_json:
        emit(d.model_dump(mode="json"), True)
        return
    head = {k: v for k, v in d.model_dump(mode="json").items() if k not in ("members", "partitions")}
    emit(head, False, f"group {group}")
    emit([{**m.model_dump(), "partitions": ",".join(m.partitions), "warmups": ",".join(m.warmups)} for m in d.members],
         False, "members")
    emit([p.model_dump() for p in d.partitions], False, "partitions")
