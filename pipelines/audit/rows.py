"""The audit's questions as DataFrames, one window each: each log row with the step from the
previous offset and epoch; each delivered row with its copy number and the step from its key's
previous sequence; every owed record with its outcome; one group's share of a shared sink."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from control_plane.group.describe import DeliveryView
from pipelines.audit.feeds import BEFORE_KEPT, SINK_ROW, UNATTRIBUTED


def attributed_to(changes: DataFrame, others: list[int], shared: bool) -> DataFrame:
    """One group's share of a sink: less the versions whose commits name another group
    (``others``). In a sink several groups write (``shared``), rows delivered before the oldest
    kept commit name no group: one copy of each counts as delivered for every group that did not
    deliver that record later, and is left out of the duplicate and order checks."""
    mine = changes.where(~F.col("_commit_version").isin(others)) if others else changes
    if not shared:
        return mine
    kept = mine.where(F.col("_commit_version") != BEFORE_KEPT)
    later = kept.where(F.col("_change_type") == "insert").select(*SINK_ROW).distinct()
    older = (mine.where(F.col("_commit_version") == BEFORE_KEPT).dropDuplicates(SINK_ROW)
             .join(later, SINK_ROW, "left_anti").withColumn("_commit_version", F.lit(UNATTRIBUTED).cast("long")))
    return kept.unionByName(older)


def log_rows(log: DataFrame) -> DataFrame:
    """Each log row with the step from the previous offset and epoch of its partition."""
    w = Window.partitionBy("partition").orderBy("offset")
    return log.select(
        "partition", "offset", "leader_epoch", F.col("key").cast("string").alias("key"),
        F.lag("offset").over(w).alias("prev_offset"), F.lag("leader_epoch").over(w).alias("prev_epoch"),
    ).select("*", (F.col("offset") - F.col("prev_offset")).alias("gap"),
             (F.col("prev_epoch") - F.col("leader_epoch")).alias("epoch_drop"))


def delivered_rows(sink_changes: DataFrame, topic: str) -> DataFrame:
    """What the sink holds now for ``topic``: each row with its delivery version, copy number and
    the step from its key's previous sequence in delivery order (key as text, for the report).

    Net of deletes: a (partition, offset) deleted d times loses its d earliest deliveries. The
    order step is taken over first deliveries only, so a repeat counts as a duplicate, not as
    an order violation; unkeyed records have no per-key order. Rows delivered before the oldest
    kept commit (``BEFORE_KEPT``) are not judged for order among themselves: ordered by sequence,
    the highest is what the key's next delivery must follow; ``UNATTRIBUTED`` rows take no part.
    """
    adds = F.col("_change_type").isin("insert", "update_postimage")
    ident = Window.partitionBy("partition", "offset")
    older = F.col("_commit_version") == BEFORE_KEPT
    per_key = (Window.partitionBy("producer_id", "key")
               .orderBy("_commit_version", F.when(older, F.col("sequence")), "partition", "offset")
               .rowsBetween(Window.unboundedPreceding, -1))
    first = F.col("copy") == 1
    prev = F.last(F.when(first & (F.col("_commit_version") != UNATTRIBUTED), F.col("sequence")), ignorenulls=True).over(per_key)
    keyed = first & F.col("key").isNotNull() & F.col("producer_id").isNotNull() & (F.col("_commit_version") >= 0)
    return (
        sink_changes.where(F.col("topic") == topic)
        .withColumn("_removed", F.sum(F.when(adds, 0).otherwise(1)).over(ident))
        .where(adds)
        .withColumn("copy", F.row_number().over(ident.orderBy("_commit_version")) - F.col("_removed"))
        .where(F.col("copy") >= 1)
        .withColumn("prev_sequence", F.when(keyed, prev))
        .select("partition", "offset", F.col("key").cast("string").alias("key"), "sequence", "producer_id",
                "_commit_version", "copy", "prev_sequence",
                (F.col("sequence") - F.col("prev_sequence")).alias("sequence_step"))
    )


def missing_rows(produced: DataFrame, first_deliveries: DataFrame, retired: set[int],
                 views: list[DeliveryView] = ()) -> DataFrame:
    """Every record the sink's groups owe (every record ever appended, less the partitions
    retired before a group started), with the sink version that delivered it (null: never) and
    its ``outcome``: delivered, expired (its group reported it), or missing."""
    got = first_deliveries.select("partition", "offset", F.col("_commit_version").alias("delivered_in_version"))
    rows = produced.where(F.col("_change_type") == "insert")
    before = {p: end for v in views for p, end in v.before_view.items()}
    for p, end in before.items():
        rows = rows.where(~((F.col("partition") == p) & (F.col("offset") < end)))
    expired = F.lit(False)
    for r in (r for v in views for r in v.expired):
        expired = expired | ((F.col("partition") == r.partition) & (F.col("offset") >= r.first) & (F.col("offset") < r.end))
    return rows.select(
        "partition", "offset", F.col("key").cast("string").alias("key"), "sequence", "producer_id",
        F.col("partition").isin(sorted(retired)).alias("retired") if retired else F.lit(False).alias("retired"),
        expired.alias("expired"),
    ).join(got, ["partition", "offset"], "left").withColumn(
        "outcome", F.when(F.col("delivered_in_version").isNotNull(), "delivered")
        .when(F.col("expired"), "expired").otherwise("missing"))


