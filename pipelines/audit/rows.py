"""The audit's questions as DataFrames, one window each: each log row with the step from the
previous offset and epoch; each delivered row with its copy number and the step from its key's
previous sequence; every owed record with its outcome; one group's share of a shared sink."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from control_plane.group.describe import DeliveryView
from log_store.read_ranges import by_partition
from pipelines.audit.feeds import BEFORE_KEPT, SINK_ROW, UNATTRIBUTED
from pipelines.audit.txn import MARKER


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


def log_rows(log: DataFrame, cleaned: Mapping[int, int] | None = None) -> DataFrame:
    """Each log row with the step from the previous offset and epoch of its partition. ``gap``
    is the step; ``dense_gap`` the step counted only above ``cleaned[partition]`` (key compaction's
    cleaned offsets: the offsets missing below were compacted away, not lost)."""
    w = Window.partitionBy("partition").orderBy("offset")
    step = F.col("offset") - F.col("prev_offset")
    compacted = F.col("offset") <= F.coalesce(F.expr(by_partition(cleaned, "L")), F.lit(0)) if cleaned else F.lit(False)
    return log.select(
        "partition", "offset", "leader_epoch", F.col("key").cast("string").alias("key"),
        F.lag("offset").over(w).alias("prev_offset"), F.lag("leader_epoch").over(w).alias("prev_epoch"),
    ).select("*", step.alias("gap"), F.when(compacted, F.least(step, F.lit(1))).otherwise(step).alias("dense_gap"),
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
                 views: list[DeliveryView] = (), owed: list[str] | None = None) -> DataFrame:
    """Every record the sink's groups owe (every record ever appended, less the partitions
    retired before a group started; ``owed``: only rows of these ``txn`` states, ``audit.txn``:
    never a marker), with the sink version that delivered it (null: never) and its ``outcome``:
    delivered, expired (its group reported it), or missing."""
    got = first_deliveries.select("partition", "offset", *_IDENTITY_AS("_d"),
                                  F.col("_commit_version").alias("delivered_in_version"))
    rows = produced.where(F.col("_change_type") == "insert")
    if owed is not None:
        rows = rows.where(F.col("txn").isin(owed))
    before = {p: end for v in views for p, end in v.before_view.items()}
    for p, end in before.items():
        rows = rows.where(~((F.col("partition") == p) & (F.col("offset") < end)))
    expired = F.lit(False)
    for r in (r for v in views for r in v.expired):
        expired = expired | ((F.col("partition") == r.partition) & (F.col("offset") >= r.first) & (F.col("offset") < r.end))
    owed = rows.select(
        "partition", "offset", F.col("key").cast("string").alias("key"), "sequence", "producer_id",
        F.col("partition").isin(sorted(retired)).alias("retired") if retired else F.lit(False).alias("retired"),
        expired.alias("expired"),
    )
    # delivered means this record at this offset: a row of another history there (a log truncated
    # under the group by an unclean election) does not count
    same = (owed["partition"] == got["partition"]) & (owed["offset"] == got["offset"]) & _same_record(owed, got, "_d")
    return owed.join(got, same, "left").select(owed["*"], "delivered_in_version").withColumn(
        "outcome", F.when(F.col("delivered_in_version").isNotNull(), "delivered")
        .when(F.col("expired"), "expired").otherwise("missing"))


_IDENTITY = ("key", "producer_id", "sequence")


def _IDENTITY_AS(suffix: str) -> list:
    return [F.col("key").cast("string").alias(f"key{suffix}"), F.col("producer_id").alias(f"producer_id{suffix}"),
            F.col("sequence").alias(f"sequence{suffix}")]


def _same_record(owed: DataFrame, got: DataFrame, suffix: str):
    """Null-safe equality of a record's key, producer id and sequence on both sides."""
    out = F.lit(True)
    for c in _IDENTITY:
        out = out & owed[c].eqNullSafe(got[f"{c}{suffix}"])
    return out


def foreign_rows(produced: DataFrame, first_deliveries: DataFrame,
                 forgotten: tuple[Mapping[int, int], set[int]] | None = None) -> DataFrame:
    """Each first delivery with its ``outcome``: ``in the log`` when the log appended that record
    at that offset (its key, producer id and sequence), ``a marker`` when that is a transaction's
    marker (no record: never delivered), else ``not in the log``: a record of a history the log no
    longer holds (truncated by an unclean election after the group read it); and the log row's
    ``txn`` state (``audit.txn``; null when not in the log).

    ``forgotten`` (log starts, retired partitions), when ``produced`` is only what the log still
    remembers (its old commits or VACUUMed files gone): a delivery below its partition's log start
    or in a retired partition, at an offset where the log remembers no record, is ``not judged``."""
    states = F.col("txn") if "txn" in produced.columns else F.lit(None).cast("string")
    log = (produced.where(F.col("_change_type") == "insert")
           .select("partition", "offset", *_IDENTITY_AS("_l"), states.alias("txn")).withColumn("_in_log", F.lit(True)))
    same = ((first_deliveries["partition"] == log["partition"]) & (first_deliveries["offset"] == log["offset"])
            & F.lit(True))
    for c in _IDENTITY:
        left = first_deliveries[c].cast("string") if c == "key" else first_deliveries[c]
        same = same & left.eqNullSafe(log[f"{c}_l"])
    out = first_deliveries.join(log, same, "left").select(first_deliveries["*"], F.col("_in_log"), log["txn"])
    unknown = F.lit(False)
    if forgotten is not None:
        starts, retired = forgotten
        below = F.lit(False)
        for p, start in starts.items():
            below = below | ((F.col("partition") == p) & (F.col("offset") < start))
        if retired:
            below = below | F.col("partition").isin(sorted(retired))
        at = (log.select(F.col("partition").alias("_p"), F.col("offset").alias("_o")).distinct()
              .withColumn("_held", F.lit(True)))
        out = (out.join(at, (out["partition"] == at["_p"]) & (out["offset"] == at["_o"]), "left").drop("_p", "_o"))
        unknown = below & F.col("_held").isNull()
    return out.withColumn("outcome", F.when(F.col("_in_log") & (F.col("txn") == MARKER), "a marker")
                          .when(F.col("_in_log"), "in the log").when(unknown, "not judged")
                          .otherwise("not in the log")).drop("_held")


