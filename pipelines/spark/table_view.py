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
created again with the name has a new one), the query's checkpoint and the claim (``claim``). A run
with another checkpoint, or of another incarnation of the topic, is refused before it reads: a second
query merging into the table would roll keys back to the older records it reads (the table keeps
no tombstones nor positions to tell an older record from a newer one), and a new incarnation's
records merged over the old one's rows would keep the keys it never had. ``replace`` rebuilds the
table from the topic's first record, in one commit that empties it, names the new owner and fences
the old claim. Claims read and set the properties in one transaction, so of two racing one loses.

A query still running when its table is replaced must merge no more. Each MERGE carries its claim as
Delta's idempotent-DML application id (``spark.databricks.delta.write.txnAppId``), which the MERGE's
own transaction reads: the fence a replace sets makes it skip (no commit), and a replace landing
while it runs changes what it read (a conflict). Properties read before the MERGE would not do: the
MERGE's transaction reads the table anew when it starts, after a replace that came between.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from log_store.errors import LakelogError

# The table's columns: the record's, and where it sits in the log (which record this row is).
COLUMNS = ["key", "value", "headers", "timestamp", "topic", "partition", "offset"]
TOPIC_ID_PROP, CHECKPOINT_PROP = "lakelog.tableView.topicId", "lakelog.tableView.checkpoint"
CLAIM_PROP = "lakelog.tableView.claim"  # this claim's id: a query's MERGEs carry it (``fence``)
FENCED = 2**63 - 1  # a replaced claim's application version: above any a MERGE gives
TXN_APP_ID, TXN_VERSION = "spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion"


class TableViewOwnerError(LakelogError):
    """The output table is kept by another query, or was built from another incarnation of the topic."""


def latest_per_key(records: DataFrame) -> DataFrame:
    """Each key's record with the highest offset in ``records`` (one micro-batch: a key's records
    come from one partition), tombstones included; records with a null key left out."""
    newest_first = Window.partitionBy("key").orderBy(F.col("offset").desc())
    return (records.where(F.col("key").isNotNull()).select(*COLUMNS)
            .withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank"))


def fence(claim_id: str) -> str:
    """The application id a claim's MERGEs carry, set to ``FENCED`` when the table is replaced."""
    return f"lakelog.tableView.{claim_id}"


def merge_batch(batch: DataFrame, output: str, claim_id: str | None = None) -> None:
    """Merge one micro-batch into the Delta table at ``output`` (made on the first batch): each
    key's latest record replaces its row, a tombstone deletes it. ``claim_id`` (``claim``'s): commit
    only while the table is this claim's, else ``TableViewOwnerError`` (module docstring)."""
    spark = batch.sparkSession
    latest = latest_per_key(batch)
    if not _is_delta(spark, output):
        latest.where("value IS NOT NULL").write.format("delta").mode("append").save(output)
        return
    view = f"lakelog_table_view_{uuid.uuid4().hex}"
    latest.createOrReplaceTempView(view)
    try:
        with _carrying(spark, output, claim_id):
            merged = spark.sql(f"""MERGE INTO delta.`{output}` AS t USING {view} AS s ON t.key = s.key
                                   WHEN MATCHED AND s.value IS NULL THEN DELETE
                                   WHEN MATCHED THEN UPDATE SET *
                                   WHEN NOT MATCHED AND s.value IS NOT NULL THEN INSERT *""").collect()
    except Exception as exc:  # a replace landing while the MERGE ran: its conflict
        _check_still_mine(spark, output, claim_id, exc)
        raise
    finally:
        spark.catalog.dropTempView(view)
    if not merged:  # skipped: the claim is fenced
        _check_still_mine(spark, output, claim_id, None)


@contextmanager
def _carrying(spark, output: str, claim_id: str | None):
    """Delta's idempotent-DML settings naming the claim's fence, for the MERGE run inside: a
    version above any this claim's MERGEs gave (each gives the table's version before it, plus 1)."""
    if claim_id is None:
        yield
        return
    from log_store.engine import table_version

    spark.conf.set(TXN_APP_ID, fence(claim_id))
    spark.conf.set(TXN_VERSION, str(table_version(spark, output) + 1))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def _check_still_mine(spark, output: str, claim_id: str | None, exc: Exception | None) -> None:
    """``TableViewOwnerError`` if the table is no longer ``claim_id``'s (``exc``: what the MERGE raised)."""
    from log_store import commits

    if claim_id is None:
        return
    txn = commits.start(spark, output, "the table view")
    props = txn.configuration()
    txn.release()
    if props.get(CLAIM_PROP) != claim_id:
        raise TableViewOwnerError(
            f"{output} was rebuilt (--replace) for the query with checkpoint {props.get(CHECKPOINT_PROP)} while this "
            "query ran, and is that query's now: this one merges no more and stops. Run that checkpoint's query, or "
            "give this one a new --output (and a new --checkpoint)") from exc
    if exc is None:
        raise TableViewOwnerError(f"{output} refused this query's MERGE as already committed, though the table "
                                  "is still its own (another run with its checkpoint?): run again")


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


def claim(spark, schema, output: str, checkpoint: str, topic: str, topic_id: str, replace: bool = False) -> str:
    """Make ``output`` the table of ``topic`` (incarnation ``topic_id``) kept by the query at
    ``checkpoint``, or refuse: it is another query's, or another incarnation's. A table made before
    tables named their owner is taken as this query's. ``replace``: empty it, name this owner and fence
    the old claim, in one commit (refused with a checkpoint that has progress: the table would miss
    its records). The claim's id, for ``start``. Read and set in one transaction: of two runs racing,
    the one that commits second reads the table again (and is refused if it is the other's)."""
    from log_store.errors import ConcurrentCommitError

    if replace and _has_progress(spark, checkpoint):
        raise TableViewOwnerError(f"--replace rebuilds {output} from the first record of '{topic}', but the "
                                  f"checkpoint {checkpoint} would start after its last run: give a new --checkpoint")
    mine = {TOPIC_ID_PROP: topic_id, CHECKPOINT_PROP: _where(checkpoint)}
    for _attempt in range(5):
        try:
            return _claim_once(spark, schema, output, topic, mine, replace)
        except ConcurrentCommitError:  # another run changed the table since this one read it: read again
            continue
    raise TableViewOwnerError(f"{output} kept changing while this run claimed it (other runs claiming it at the "
                              "same time?): run again")


def _claim_once(spark, schema, output: str, topic: str, mine: dict[str, str], replace: bool) -> str:
    from log_store import commits
    from log_store.table_create import table_exists

    if not table_exists(spark, output):
        _make(spark, schema, output, {**mine, CLAIM_PROP: uuid.uuid4().hex})
        replace = False  # made from nothing; if a racing run made it first, its owner is checked below
    txn = commits.start(spark, output, "the table view")
    props = txn.configuration()
    new_claim = {CLAIM_PROP: uuid.uuid4().hex}
    if replace:  # one commit: every row out, this owner in, the old claim fenced
        txn.read_whole_table()
        txn.remove(txn.files(), data_change=True)
        txn.set_properties({**mine, **new_claim})
        old = props.get(CLAIM_PROP)
        txn.commit({fence(old): FENCED} if old else {})
        return new_claim[CLAIM_PROP]
    if props.get(TOPIC_ID_PROP) not in (None, mine[TOPIC_ID_PROP]):
        txn.release()
        raise TableViewOwnerError(
            f"{output} holds the keys of an earlier topic '{topic}' (deleted and created again: topic id "
            f"{props[TOPIC_ID_PROP]}, now {mine[TOPIC_ID_PROP]}); give a new --output, or --replace (with a new "
            "--checkpoint) to rebuild it from the topic now")
    if props.get(CHECKPOINT_PROP) not in (None, mine[CHECKPOINT_PROP]):
        txn.release()
        raise TableViewOwnerError(
            f"{output} is kept by the query with checkpoint {props[CHECKPOINT_PROP]}; run with that --checkpoint, "
            "give a new --output, or --replace (with a new --checkpoint) to rebuild it with this one")
    missing = {k: v for k, v in {**mine, **new_claim}.items() if k not in props}
    if not missing:
        txn.release()
        return props[CLAIM_PROP]
    txn.commit_properties(missing)  # a table made before tables named their owner (or their claim)
    return props.get(CLAIM_PROP, new_claim[CLAIM_PROP])


def _make(spark, schema, output: str, properties: dict[str, str]) -> None:
    """Make the empty table naming its owner; nothing if a run racing this one made it first."""
    from delta.tables import DeltaTable

    from log_store.table_create import table_exists

    builder = DeltaTable.createIfNotExists(spark).location(output).addColumns(schema)
    for k, v in properties.items():
        builder = builder.property(k, v)
    try:
        builder.execute()
    except Exception:  # noqa: BLE001 - both made version 0; the other's commit won
        if not table_exists(spark, output):
            raise


def start(records: DataFrame, output: str, checkpoint: str, interval: str | None = None, claim_id: str | None = None):
    """Start the query that keeps ``output`` current from ``records`` (a ``readStream`` of
    ``format("lakelog")``; ``claim`` first, and pass its id): by default what is there, then stop
    (Trigger.AvailableNow). With ``claim_id``, the query stops with ``TableViewOwnerError`` once the
    table is replaced for another claim."""
    writer = (records.writeStream.foreachBatch(lambda batch, _batch_id: merge_batch(batch, output, claim_id))
              .option("checkpointLocation", checkpoint))
    writer = writer.trigger(processingTime=interval) if interval else writer.trigger(availableNow=True)
    return writer.start()
