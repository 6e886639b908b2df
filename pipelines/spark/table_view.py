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

A table is kept by one query of one topic: its properties name the topic's id (a topic deleted and
created again with the name has a new one) and the query's checkpoint (``claim``). A run with
another checkpoint, or of another incarnation of the topic, is refused before it reads: a second
query merging into the table would roll keys back to the older records it reads (the table keeps
no tombstones nor positions to tell an older record from a newer one), and a new incarnation's
records merged over the old one's rows would keep the keys it never had. ``replace`` rebuilds the
table from the topic's first record, in one commit that empties it and names the new owner.
"""

from __future__ import annotations

import os
import uuid

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from log_store.errors import LakelogError

# The table's columns: the record's, and where it sits in the log (which record this row is).
COLUMNS = ["key", "value", "headers", "timestamp", "topic", "partition", "offset"]
TOPIC_ID_PROP, CHECKPOINT_PROP = "lakelog.tableView.topicId", "lakelog.tableView.checkpoint"


class TableViewOwnerError(LakelogError):
    """The output table is kept by another query, or was built from another incarnation of the topic."""


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


def _where(checkpoint: str) -> str:
    """A checkpoint location as the table names it: a local path made absolute."""
    return checkpoint.rstrip("/") if "://" in checkpoint else os.path.abspath(checkpoint)


def _has_progress(spark, checkpoint: str) -> bool:
    """Whether a query committed a micro-batch at ``checkpoint`` (Spark's ``commits`` log)."""
    from log_store.files import list_names

    return bool(list_names(spark, checkpoint.rstrip("/") + "/commits"))


def claim(spark, schema, output: str, checkpoint: str, topic: str, topic_id: str, replace: bool = False) -> None:
    """Make ``output`` the table of ``topic`` (incarnation ``topic_id``) kept by the query at
    ``checkpoint``, or refuse: it is another query's, or another incarnation's. A table made before
    tables named their owner is taken as this query's. ``replace``: empty it and name this owner,
    in one commit (refused with a checkpoint that has progress: the table would miss its records)."""
    from delta.tables import DeltaTable

    from log_store.table_create import table_exists

    mine = {TOPIC_ID_PROP: topic_id, CHECKPOINT_PROP: _where(checkpoint)}

    def make(builder) -> None:
        builder = builder.location(output).addColumns(schema)
        for k, v in mine.items():
            builder = builder.property(k, v)
        builder.execute()

    if replace:
        if _has_progress(spark, checkpoint):
            raise TableViewOwnerError(f"--replace rebuilds {output} from the first record of '{topic}', but the "
                                      f"checkpoint {checkpoint} would start after its last run: give a new --checkpoint")
        if not table_exists(spark, output):
            make(DeltaTable.createIfNotExists(spark))  # a run racing this one may make it first: checked below
        else:
            from log_store import commits

            txn = commits.start(spark, output, "the table view")  # one commit: every row out, this owner in
            txn.read_whole_table()
            txn.remove(txn.files(), data_change=True)
            txn.set_properties(mine)
            txn.commit({})
            return
    if not table_exists(spark, output):
        make(DeltaTable.createIfNotExists(spark))  # a run racing this one may make it first: checked below
    props = DeltaTable.forPath(spark, output).detail().first()["properties"] or {}
    if props.get(TOPIC_ID_PROP) not in (None, topic_id):
        raise TableViewOwnerError(
            f"{output} holds the keys of an earlier topic '{topic}' (deleted and created again: topic id "
            f"{props[TOPIC_ID_PROP]}, now {topic_id}); give a new --output, or --replace (with a new --checkpoint) "
            "to rebuild it from the topic now")
    if props.get(CHECKPOINT_PROP) not in (None, mine[CHECKPOINT_PROP]):
        raise TableViewOwnerError(
            f"{output} is kept by the query with checkpoint {props[CHECKPOINT_PROP]}; run with that --checkpoint, "
            "give a new --output, or --replace (with a new --checkpoint) to rebuild it with this one")
    if TOPIC_ID_PROP not in props or CHECKPOINT_PROP not in props:
        quoted = {k: v.replace("\\", "\\\\").replace("'", "\\'") for k, v in mine.items()}
        assignments = ", ".join(f"'{k}' = '{v}'" for k, v in quoted.items())
        spark.sql(f"ALTER TABLE delta.`{output}` SET TBLPROPERTIES ({assignments})")


def start(records: DataFrame, output: str, checkpoint: str, interval: str | None = None):
    """Start the query that keeps ``output`` current from ``records`` (a ``readStream`` of
    ``format("lakelog")``; ``claim`` first): by default what is there, then stop (Trigger.AvailableNow)."""
    writer = (records.writeStream.foreachBatch(lambda batch, _batch_id: merge_batch(batch, output))
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(processingTime=interval) if interval else writer.trigger(availableNow=True)
    return writer.start()
