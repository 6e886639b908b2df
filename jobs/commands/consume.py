"""``lakelog consume``: a topic's records as a member of a group (or standalone), to the terminal
or exactly once into a Delta sink."""

from __future__ import annotations

import json
import sys
from datetime import timezone

import click

from control_plane.settings import ASSIGNORS
from jobs.context import Context, json_option, pass_ctx, progress_bar
from jobs.output import emit, stderr


@click.command()
@click.option("--topic", required=True)
@click.option("--group", default=None, help="Consumer group (default: a new console-consumer-NNNNN group, as Kafka's).")
@click.option("--from-beginning", is_flag=True, help="A group without positions starts at the earliest record.")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Read this one partition without a group (needs --offset; commits nothing).")
@click.option("--offset", default=None, metavar="N|earliest|latest", help="With --partition: where to start.")
@click.option("--output", default=None, help="Delta sink table path: records are written there exactly once "
              "(by Spark: starts a JVM; to the terminal, on a local or S3 root, none starts).")
@click.option("--max-records", default=None, type=click.IntRange(min=1))
@click.option("--member-id", default=None, help="Name this member (default: a random id).")
@click.option("--protocol", type=click.Choice(["eager", "cooperative"]), default=None, help="Rebalance protocol (conf: group.protocol).")
@click.option("--assignor", default=None, help=f"{', '.join(ASSIGNORS)} (conf: group.assignor).")
@click.option("--session-timeout-ms", type=int, default=None)
@click.option("--heartbeat-interval-ms", type=int, default=None)
@click.option("--idle-timeout", type=float, default=0.0, show_default=True,
              help="Seconds to stay in the group once caught up (0: leave as soon as caught up).")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]), default=None,
              help="read_committed: only committed transactions' records, up to the last stable offset "
                   "(conf: consumer.isolation_level; default read_uncommitted, as Kafka's).")
@click.option("--standalone", is_flag=True, help="Consume every partition without joining the group (no membership).")
@json_option
@pass_ctx
def consume(c: Context, topic: str, group: str | None, from_beginning: bool, partition: int | None, offset: str | None,
            output: str | None, max_records: int | None, member_id: str | None,
            protocol: str | None, assignor: str | None, session_timeout_ms: int | None, heartbeat_interval_ms: int | None,
            idle_timeout: float, isolation_level: str | None, standalone: bool, as_json: bool) -> None:
    """Consume TOPIC as a member of GROUP (to stdout, or exactly once to a Delta sink).

    Several processes with the same GROUP share the partitions; each leaves the group when it
    is caught up (after --idle-timeout) or has delivered --max-records. Printed records read
    ``Partition:P  Offset:O  key  value`` (Kafka's console consumer with key, partition and offset
    shown); --json prints one JSON object per record.
    """
    from pipelines.consumer import ArrowHandler, Consumer
    from pipelines.group_consumer import GroupConsumer

    if (partition is None) != (offset is None):
        raise click.UsageError("--partition and --offset go together (one partition from an offset, without a group)")
    if partition is not None and (group or output or standalone):
        raise click.UsageError("--partition reads without a group: drop --group, --output and --standalone")

    def print_rows(rows) -> None:
        for row in rows:
            stamp = row["timestamp"]  # naive UTC, as Spark's rows give it, whichever read it
            stamp = stamp.astimezone(timezone.utc).replace(tzinfo=None) if stamp is not None and stamp.tzinfo else stamp
            rec = {
                "partition": row["partition"], "offset": row["offset"], "leader_epoch": row["leader_epoch"],
                "key": None if row["key"] is None else bytes(row["key"]).decode("utf-8", "replace"),
                "value": None if row["value"] is None else bytes(row["value"]).decode("utf-8", "replace"),
                "timestamp": str(stamp),
            }
            line = json.dumps(rec) if as_json else \
                "\t".join([f"Partition:{rec['partition']}", f"Offset:{rec['offset']}",
                           *("null" if rec[f] is None else rec[f] for f in ("key", "value"))])
            sys.stdout.write(line + "\n")

    print_arrow = ArrowHandler(lambda batch, _ranges: print_rows(batch.to_pylist()))

    consumer_settings = c.config.consumer
    if isolation_level:
        consumer_settings = consumer_settings.model_copy(update={"isolation_level": isolation_level})
    if partition is not None:
        from pipelines.partition_read import partition_chunks

        for chunk in partition_chunks(c.spark, c.root, topic, partition, offset, max_records, consumer_settings):
            for batch in chunk.to_batches():
                print_rows(batch.to_pylist())
        return
    if not group:
        import random

        group = f"console-consumer-{random.randint(10000, 99999)}"
        stderr.print(f"group {group} (no --group given)", highlight=False)
    if from_beginning:
        consumer_settings = consumer_settings.model_copy(update={"auto_offset_reset": "earliest"})
    settings = c.group_settings({"protocol": protocol, "assignor": assignor, "session_timeout_ms": session_timeout_ms,
                                   "heartbeat_interval_ms": heartbeat_interval_ms})

    with progress_bar("consuming records") as bar:
        task = bar.add_task("consume", total=max_records)
        update = lambda done, total: bar.update(task, completed=done, total=max_records)  # noqa: E731
        if standalone:
            consumer = Consumer(c.spark, c.root, topic, group, consumer_settings, member_id)
            result = consumer.run_to_sink(output, max_records, update) if output else consumer.run(print_arrow, max_records, update)
        else:
            member = GroupConsumer(c.spark, c.root, topic, group, consumer_settings, settings, member_id)
            result = member.run(None if output else print_arrow, output, max_records, idle_timeout,
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
