"""``lakelog groups``: list, describe, reset and delete consumer groups (Kafka's ``kafka-consumer-groups``)."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit, stderr


@click.group()
def groups() -> None:
    """Inspect consumer groups."""


@groups.command("list")
@json_option
@pass_ctx
def list_(c: Context, as_json: bool) -> None:
    """Groups under the root with their latest generation, protocol and member count."""
    from control_plane.group.describe import list_groups

    emit(c.read_groups(list_groups), as_json, "groups")


@groups.command("describe")
@click.option("--group", required=True)
@json_option
@pass_ctx
def describe(c: Context, group: str, as_json: bool) -> None:
    """Members, generation, protocol, each member's partitions, committed offsets, lag and metrics."""
    from control_plane.group.describe import describe_group

    d = c.read_groups(lambda reads: describe_group(reads, group))
    if as_json:
        emit(d.model_dump(mode="json"), True)
        return
    head = {k: v for k, v in d.model_dump(mode="json").items() if k not in ("members", "partitions")}
    emit(head, False, f"group {group}")
    emit([{**m.model_dump(), "partitions": ",".join(m.partitions), "warmups": ",".join(m.warmups)} for m in d.members],
         False, "members")
    emit([p.model_dump() for p in d.partitions], False, "partitions")


def _waiting(c: Context, group: str):
    """Tell people why a command waits: members that have not left are watched for a heartbeat."""
    told = []

    def on_wait(remaining: float) -> None:
        if not told and not c.as_json:
            stderr.print(f"group {group}: members have not left; watching their heartbeats for up to "
                         f"{remaining:.0f} s to see whether they are alive ...")
            told.append(True)

    return on_wait


@groups.command("reset-offsets")
@click.option("--group", required=True)
@click.option("--topic", required=True)
@click.option("--to-earliest", is_flag=True, help="The first record of each partition.")
@click.option("--to-latest", is_flag=True, help="The log end (skip everything there now).")
@click.option("--to-datetime", metavar="ISO", help="The first record at or after this time (naive: UTC).")
@click.option("--to-offset", type=int, metavar="N", help="This offset (clamped into each partition's range).")
@click.option("--shift-by", type=int, metavar="N", help="Move the current position by N (negative: back).")
@click.option("--partitions", metavar="0,3", help="Only these partitions (default: all readable ones).")
@click.option("--dry-run", is_flag=True, help="Show the plan only (the default).")
@click.option("--execute", is_flag=True, help="Commit the plan; refused while the group has live members.")
@json_option
@pass_ctx
def reset_offsets(c: Context, group: str, topic: str, to_earliest: bool, to_latest: bool, to_datetime: str | None,
                  to_offset: int | None, shift_by: int | None, partitions: str | None, dry_run: bool, execute: bool,
                  as_json: bool) -> None:
    """Move a group's positions on a topic (Kafka's ``kafka-consumer-groups --reset-offsets``).

    Without --execute it prints the plan and writes nothing. A group consuming into a sink
    writes the replayed records to it again (a reset is a replay, not a duplicate).
    """
    from control_plane.group.reset import ResetTarget, parse_datetime

    if dry_run and execute:
        raise click.UsageError("give --dry-run or --execute, not both")
    target = ResetTarget(to_earliest=to_earliest, to_latest=to_latest,
                         to_datetime=parse_datetime(to_datetime) if to_datetime else None,
                         to_offset=to_offset, shift_by=shift_by)  # checked before Spark starts
    from control_plane.group.admin import GroupAdmin

    admin = GroupAdmin(c.spark, c.root)
    steps = admin.plan_reset(group, topic, target, partitions)
    if execute:
        admin.execute_reset(group, steps, _waiting(c, group))
    rows = [{"topic": s.topic, "partition": s.partition, "current_offset": s.current, "new_offset": s.target,
             "log_start": s.log_start, "log_end": s.log_end} for s in steps]
    if as_json:
        emit({"group": group, "target": target.describe(), "executed": execute, "partitions": rows}, True)
        return
    emit(rows, False, f"group {group}: reset to {target.describe()} ({'executed' if execute else 'dry run'})")
    if not execute:
        stderr.print("dry run: nothing written; add --execute to commit these positions")


@groups.command("delete")
@click.option("--group", required=True)
@json_option
@pass_ctx
def delete(c: Context, group: str, as_json: bool) -> None:
    """Delete a group's positions (Kafka's ``kafka-consumer-groups --delete``); refused while it has
    live members. Its history stays queryable; a group started again with the name starts anew."""
    from control_plane.group.admin import GroupAdmin

    GroupAdmin(c.spark, c.root).delete(group, _waiting(c, group))
    emit({"group": group, "deleted": True}, as_json, "deleted")
