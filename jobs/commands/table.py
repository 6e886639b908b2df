"""``lakelog topics table``: a topic's current state per key as a Delta table kept current by a
stream (``pipelines.spark.table_view``), as a scheduled job runs it: what came since its last run,
merged by key, then stop."""

from __future__ import annotations

import click

from jobs.commands.stream import lakelog_error, topic_stream
from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit, stderr


@click.command("table")
@click.option("--topic", required=True, help="The topic (a compacted one, usually).")
@click.option("--output", required=True, help="The Delta table of the latest record per key (made on the first run).")
@click.option("--checkpoint", required=True, help="The query's checkpoint location: where the next run starts.")
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=None,
              help="At most this many records per micro-batch.")
@click.option("--interval", default=None, metavar="DURATION",
              help="Run continuously with this trigger interval (e.g. '1 minute') instead of stopping when caught up.")
@click.option("--replace", is_flag=True, default=False,
              help="Rebuild OUTPUT from the topic's first record (with a new CHECKPOINT): after the topic was "
                   "deleted and created again, or to keep it with another checkpoint.")
@json_option
@pass_ctx
def table(c: Context, topic: str, output: str, checkpoint: str, max_offsets_per_trigger: int | None,
          interval: str | None, replace: bool, as_json: bool) -> None:
    """Keep the Delta table OUTPUT as TOPIC's latest record per key: a tombstone deletes its key's
    row, records with a null key are left out. Read read_committed: no aborted transaction's record
    and no transaction's marker becomes a key's state, an open transaction's records not until it
    commits. Query it with SQL (SELECT ... FROM delta.`OUTPUT`).
    Each run merges what came since the last (its CHECKPOINT), in the order the resize gates
    deliver, so a key's latest record holds across a resize. A Spark Structured Streaming query (starts a JVM).
    OUTPUT is kept by one CHECKPOINT and one incarnation of TOPIC: another is refused (--replace rebuilds)."""
    from pipelines.spark.table_view import COLUMNS, claim, start

    query = None
    merged: dict[int, int] = {}  # micro-batch id -> its records
    try:
        # read_committed: an aborted transaction's record is never a key's state, an open one's not yet
        records = topic_stream(c, topic, None, "earliest", max_offsets_per_trigger, True, include_headers=True,
                               isolation_level="read_committed")
        claim_id = claim(c.spark, records.select(*COLUMNS).schema, output, checkpoint, topic,
                         c.topic_reader().describe(topic).topic_id, replace)
        query = start(records, output, checkpoint, interval, claim_id)
        while not query.awaitTermination(0.1):  # each micro-batch (a MERGE) takes longer than this
            _take_progress(query, merged)
    except KeyboardInterrupt:
        if query is None:
            raise
        query.stop()
    except Exception as exc:
        raise lakelog_error(exc) from None
    _take_progress(query, merged)
    records_read = sum(merged.values())
    keys = c.spark.read.format("delta").load(output).count() if records_read or _exists(c, output) else 0
    out = {"topic": topic, "output": output, "records": records_read, "keys": keys}
    if as_json:
        emit(out, True)
        return
    emit([out], False, f"table view of {topic}")
    stderr.print(f"merged {records_read} records; {output} holds {keys} keys")


def _take_progress(query, merged: dict[int, int]) -> None:
    """Each micro-batch's record count from the query's progress, read while it runs: Spark keeps
    only the last ``spark.sql.streaming.numRecentProgressUpdates`` (100) of them."""
    for progress in query.recentProgress:
        merged[progress["batchId"]] = progress["numInputRows"]


def _exists(c: Context, path: str) -> bool:
    from log_store.table_create import table_exists

    return table_exists(c.spark, path)
