"""A topic's current state per key as a Delta table analysts query with SQL (the table view of a
compacted topic: Kafka Streams' KTable, in a Delta table).

Kept current by a stream rather than computed on read. A key's latest record is the one the
log delivers last, and across a resize a key's records lie in two partitions whose offsets do
not compare: only the resize gates order them, and ``format("lakelog")`` applies the gates. A
micro-batch stops at a gate, so within one batch every record of a key comes from one partition
and its latest is the one with the highest offset; batches merge in order. A read of the whole
log would have to replay the topic's resize history to order a key's partitions; this costs one
MERGE per micro-batch, and a scheduled run reads only what came since the last one.

Each micro-batch merges into the table by key: the latest record replaces the key's row, a
tombstone (a null value) deletes it, records with a null key are left out (they have no state).
A replayed micro-batch (a run killed after its MERGE, before its checkpoint) merges the same
records again to the same rows: the checkpoint gives exactly-once state, as Delta's sink does.
"""

from __future__ import annotations

import uuid

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

# The table's columns: the record's, and where it sits in the log (which record this row is).
COLUMNS = ["key", "value", "headers", "timestamp", "topic", "partition", "offset"]


def latest_per_key(records: DataFrame) -> DataFrame:
    """Each key's record with the highest offset in ``records`` (one micro-batch: a key's records
    come from one partition), tombstones included; records with a null key left out."""
    newest_first = Window.partitionBy("key").orderBy(F.col("offset").desc())
    return (records.where(F.col("key").isNotNull()).select(*COLUMNS)
            .withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank"))


def merge_batch(batch: DataFrame, output: str) -> None:
    """Merge one micro-batch into the Delta table at ``output`` (made on the first batch): each
    key's latest record replaces its row, a tombstone deletes it."""
    spark = batch.sparkSession
    latest = latest_per_key(batch)
    if not _is_delta(spark, output):
        latest.where("value IS NOT NULL").write.format("delta").mode("append").save(output)
        return
    view = f"lakelog_table_view_{uuid.uuid4().hex}"
    latest.createOrReplaceTempView(view)
    try:
        spark.sql(f"""MERGE INTO delta.`{output}` AS t USING {view} AS s ON t.key = s.key
                      WHEN MATCHED AND s.value IS NULL THEN DELETE
                      WHEN MATCHED THEN UPDATE SET *
                      WHEN NOT MATCHED AND s.value IS NOT NULL THEN INSERT *""")
    finally:
        spark.catalog.dropTempView(view)


def _is_delta(spark, path: str) -> bool:
    from log_store.table_create import table_exists

    return table_exists(spark, path)


def start(records: DataFrame, output: str, checkpoint: str, interval: str | None = None):
    """Start the query that keeps ``output`` current from ``records`` (a ``readStream`` of
    ``format("lakelog")``): by default what is there, then stop (Trigger.AvailableNow)."""
    writer = (records.writeStream.foreachBatch(lambda batch, _batch_id: merge_batch(batch, output))
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(processingTime=interval) if interval else writer.trigger(availableNow=True)
    return writer.start()
