"""``lakelog topics``: create, list, describe, alter, delete and draw topics (Kafka's ``kafka-topics``)."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit, stderr, stdout


@click.group()
def topics() -> None:
    """Create, list, describe, resize and picture topics."""


def _print_description(d, topic: str) -> None:
    emit({k: v for k, v in d.model_dump(mode="json").items() if k != "partitions"}, False, f"topic {topic}")
    emit([p.model_dump(mode="json") for p in d.partitions], False, "partitions")


@topics.command("create")
@click.option("--topic", required=True)
@click.option("--partitions", required=True, type=int)
@json_option
@pass_ctx
def create(c: Context, topic: str, partitions: int, as_json: bool) -> None:
    """Create TOPIC with N partitions."""
    c.config  # validate configuration before touching Spark
    record = c.topic_admin().create(topic, partitions)
    emit({"topic": record.topic, "partitions": record.partition_count, "location": record.location}, as_json, "created")


@topics.command("list")
@json_option
@pass_ctx
def list_(c: Context, as_json: bool) -> None:
    """List topics under the root."""
    rows = [
        {"topic": r.topic, "partitions": r.partition_count, "undeleted": r.undeleted_partition_count,
         "version": r.topic_version, "location": r.location,
         "state": "marked for deletion" if r.event.removes_topic else "live"}
        for r in c.topic_reader().list()
    ]
    emit(rows, as_json, "topics")


@topics.command("describe")
@click.option("--topic", required=True)
@json_option
@pass_ctx
def describe(c: Context, topic: str, as_json: bool) -> None:
    """Partitions of TOPIC: location, leader epoch, mode, earliest and latest offset."""
    d = c.topic_reader().describe(topic)
    if as_json:
        emit(d.model_dump(mode="json"), True)
    else:
        _print_description(d, topic)


@topics.command("delete")
@click.option("--topic", required=True)
@json_option
@pass_ctx
def delete(c: Context, topic: str, as_json: bool) -> None:
    """Delete TOPIC (Kafka's ``kafka-topics --delete``): fences its producers and consumers, removes
    its records and files, keeps its history. Re-running finishes a deletion that was interrupted."""
    c.config  # validate configuration before touching Spark
    record = c.controller().delete(topic)
    emit({"topic": topic, "deleted": True, "topic_version": record.topic_version, "location": record.location},
         as_json, "deleted")


@topics.command("alter")
@click.option("--topic", required=True)
@click.option("--partitions", required=True, type=int, help="The new number of undeleted partitions.")
@click.option("--delete-partition-enable/--no-delete-partition-enable", default=None,
              help="Allow shrinking (default: controller.delete_partition_enable or $LAKELOG_DELETE_PARTITION_ENABLE).")
@json_option
@pass_ctx
def alter(c: Context, topic: str, partitions: int, delete_partition_enable: bool | None, as_json: bool) -> None:
    """Grow TOPIC to N partitions, or shrink it (marks partitions >= N for deletion; needs the switch).

    Re-running a killed alter finishes it.
    """
    c.config  # validate configuration before touching Spark
    result = c.controller(delete_partition_enable).alter(topic, partitions)
    d = c.topic_admin().describe(topic)
    if as_json:
        emit({"result": result.model_dump(mode="json"), "topic": d.model_dump(mode="json")}, True)
        return
    if result.note:
        stderr.print(result.note, highlight=False, markup=False)
    _print_description(d, topic)


@topics.command("timeline")
@click.option("--topic", required=True)
@click.option("--output", default=None, help="PNG path (default <root>/timelines/<topic>.png).")
@json_option
@pass_ctx
def timeline(c: Context, topic: str, output: str | None, as_json: bool) -> None:
    """Draw TOPIC's history (modes, epochs, expansions, deletions, retirements) as a PNG."""
    from pipelines.timeline import write_timeline

    c.config
    path, events = write_timeline(c.spark, c.root, topic, output)
    if as_json:
        emit({"path": path, "events": [e.model_dump(mode="json") for e in events]}, True)
    else:
        stdout.print(path, highlight=False, soft_wrap=True)
