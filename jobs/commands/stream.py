"""``lakelog stream``: a topic into a Delta table with Spark Structured Streaming
(``spark.readStream.format("lakelog")``), as a scheduled job runs it: by default everything
there when it starts, in capped micro-batches, then stop (Trigger.AvailableNow)."""

from __future__ import annotations

import click

import re

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit, stderr
from log_store.errors import LakelogError


@click.command()
@click.option("--topic", required=True, help="Topic, or several comma-separated (the source's subscribe option).")
@click.option("--output", required=True, help="Delta table the records are written to (Spark's Delta sink).")
@click.option("--checkpoint", required=True, help="The query's checkpoint location: its positions, the source of truth.")
@click.option("--group", default=None, help="Also commit the stream's positions to this group (lag, retirement).")
@click.option("--starting-offsets", default="earliest", show_default=True,
              help="Where a new query starts: earliest, latest or Kafka's JSON form.")
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=None,
              help="At most this many records per micro-batch.")
@click.option("--fail-on-data-loss/--no-fail-on-data-loss", default=True, show_default=True,
              help="Stop if records were retired before the stream read them (else skip them with a warning).")
@click.option("--interval", default=None, metavar="DURATION",
              help="Run continuously with this trigger interval (e.g. '10 seconds') instead of stopping when caught up.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]), default=None,
              help="read_committed: only committed transactions' records, up to the last stable offset "
                   "(conf: consumer.isolation_level; default read_uncommitted, as Kafka's).")
@json_option
@pass_ctx
def stream(c: Context, topic: str, output: str, checkpoint: str, group: str | None, starting_offsets: str,
           max_offsets_per_trigger: int | None, fail_on_data_loss: bool, interval: str | None,
           isolation_level: str | None, as_json: bool) -> None:
    """Stream TOPIC into the Delta table OUTPUT, exactly once through the query's CHECKPOINT.
    A Spark Structured Streaming query (starts a JVM)."""
    query = None
    try:
        query = _start(c, topic, output, checkpoint, group, starting_offsets, max_offsets_per_trigger,
                       fail_on_data_loss, interval, isolation_level or c.config.consumer.isolation_level)
        query.awaitTermination()
    except KeyboardInterrupt:
        if query is None:
            raise
        query.stop()
    except Exception as exc:  # Spark wraps the source's own errors: say lakelog's, in one line
        raise lakelog_error(exc) from None
    batches = [{"batch": p["batchId"], "records": p["numInputRows"],
                "seconds": round(p["durationMs"].get("triggerExecution", 0) / 1000, 2)}
               for p in query.recentProgress if p["numInputRows"]]
    if as_json:
        emit({"topic": topic, "output": output, "records": sum(b["records"] for b in batches), "batches": batches}, True)
        return
    emit(batches, False, f"micro-batches of {topic} into {output}")
    stderr.print(f"streamed {sum(b['records'] for b in batches)} records in {len(batches)} micro-batches")


def lakelog_error(exc: Exception) -> Exception:
    """The lakelog error inside a Spark error (the data source runs in Spark's Python workers, a
    table view's MERGE in ``foreachBatch``: Spark reports their errors with their traceback),
    lakelog's for a batch whose files' root was lost after its plan (``reading.read_lost``), or
    ``exc`` itself."""
    from pipelines.spark.reading import read_lost

    found = re.findall(r"(?:log_store\.errors|pipelines\.spark\.(?:reading|table_view))\.\w+: ([^\n]+)", str(exc))
    return LakelogError(found[-1].strip()) if found else read_lost(exc) or exc


def topic_stream(c: Context, topic: str, group: str | None, starting_offsets: str, max_offsets_per_trigger: int | None,
                 fail_on_data_loss: bool, include_headers: bool = False, isolation_level: str | None = None):
    """``spark.readStream.format("lakelog")`` of ``topic`` with the command's options
    (``isolation_level``: Kafka's ``kafka.isolation.level``; None: the source's default)."""
    from pipelines.spark import register

    spark = c.spark
    register(spark, c.root)
    reader = (spark.readStream.format("lakelog").option("subscribe", topic).option("startingOffsets", starting_offsets)
              .option("failOnDataLoss", str(fail_on_data_loss).lower())
              .option("leaderWaitTimeout", f"{c.config.consumer.leader_wait_timeout_ms}ms"))
    if group:
        reader = reader.option("group", group)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    if include_headers:
        reader = reader.option("includeHeaders", "true")
    if isolation_level:
        reader = reader.option("kafka.isolation.level", isolation_level)
    return reader.load()


def _start(c: Context, topic: str, output: str, checkpoint: str, group: str | None, starting_offsets: str,
           max_offsets_per_trigger: int | None, fail_on_data_loss: bool, interval: str | None, isolation_level: str):
    records = topic_stream(c, topic, group, starting_offsets, max_offsets_per_trigger, fail_on_data_loss,
                           isolation_level=isolation_level)
    writer = records.writeStream.format("delta").option("checkpointLocation", checkpoint)
    writer = writer.trigger(processingTime=interval) if interval else writer.trigger(availableNow=True)
    return writer.start(output)
