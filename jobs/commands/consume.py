"""``lakelog consume``: a topic's records as a member of a group (or standalone), to the terminal
or exactly once into a Delta sink."""

from __future__ import annotations

import json
import sys

import click

from control_plane.settings import ASSIGNORS
from jobs.context import Context, json_option, pass_ctx, progress_bar
from jobs.output import emit, stderr


@click.command()
@click.option("--topic", required=True)
@click.option("--group", required=True)
@click.option("--output", default=None, help="Delta sink table path: records are written there exactly once.")
@click.option("--max-records", default=None, type=click.IntRange(min=1))
@click.option("--member-id", default=None, help="Name this member (default: a random id).")
@click.option("--protocol", type=click.Choice(["eager", "cooperative"]), default=None, help="Rebalance protocol (conf: group.protocol).")
@click.option("--assignor", default=None, help=f"{', '.join(ASSIGNORS)} (conf: group.assignor).")
@click.option("--session-timeout-ms", type=int, default=None)
@click.option("--heartbeat-interval-ms", type=int, default=None)
@click.option("--idle-timeout", type=float, default=0.0, show_default=True,
              help="Seconds to stay in the group once caught up (0: leave as soon as caught up).")
@click.option("--standalone", is_flag=True, help="Consume every partition without joining the group (no membership).")
@json_option
@pass_ctx
def consume(c: Context, topic: str, group: str, output: str | None, max_records: int | None, member_id: str | None,
            protocol: str | None, assignor: str | None, session_timeout_ms: int | None, heartbeat_interval_ms: int | None,
            idle_timeout: float, standalone: bool, as_json: bool) -> None:
    """Consume TOPIC as a member of GROUP (to stdout, or exactly once to a Delta sink).

    Several processes with the same GROUP share the partitions; each leaves the group when it
    is caught up (after --idle-timeout) or has delivered --max-records.
    """
    from pipelines.consumer import Consumer
    from pipelines.group_consumer import GroupConsumer

    settings = c.group_settings({"protocol": protocol, "assignor": assignor, "session_timeout_ms": session_timeout_ms,
                                   "heartbeat_interval_ms": heartbeat_interval_ms})

    def print_batch(df, _ranges) -> None:
        for row in df.toLocalIterator():
            rec = {
                "partition": row["partition"], "offset": row["offset"], "leader_epoch": row["leader_epoch"],
                "key": None if row["key"] is None else bytes(row["key"]).decode("utf-8", "replace"),
                "value": bytes(row["value"]).decode("utf-8", "replace"),
                "timestamp": str(row["timestamp"]),
            }
            sys.stdout.write((json.dumps(rec) if as_json else "\t".join(str(v) for v in rec.values())) + "\n")

    with progress_bar("consuming records") as bar:
        task = bar.add_task("consume", total=max_records)
        update = lambda done, total: bar.update(task, completed=done, total=max_records)  # noqa: E731
        if standalone:
            consumer = Consumer(c.spark, c.root, topic, group, c.config.consumer, member_id)
            result = consumer.run_to_sink(output, max_records, update) if output else consumer.run(print_batch, max_records, update)
        else:
            member = GroupConsumer(c.spark, c.root, topic, group, c.config.consumer, settings, member_id)
            result = member.run(None if output else print_batch, output, max_records, idle_timeout,
                                on_batch=lambda _r, done: update(done, max_records))
    if output or not as_json:
        summary = result.model_dump()
        if as_json:
            emit(summary, True)
        else:
            stderr.print(f"consumed {result.records} records in {result.batches} batches ({result.seconds:.1f}s)")
        expired = getattr(result, "expired", 0)
        if expired:
            stderr.print(f"warning: {expired} records of retired partitions expired before group {group} read them "
                         f"(`lakelog groups describe --group {group}` lists them)", style="yellow", highlight=False)
