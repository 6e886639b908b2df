"""Numbering an append's records: each row's offset is its partition's log end plus its rank there
by sequence, as a Spark column, three ways by the batch's size (the rules are
``log_store.dense_offsets``; this module turns them into the column the append writes):

- a small batch (``use_one_task``): in one task, a window over the partition ordered by sequence;
- a large batch in sequence order within each task (``use_task_counts``): a counting pass per
  task, then each task's first offset per partition plus the row's index, no shuffle;
- otherwise: a window over each partition ordered by sequence (a shuffle).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from log_store.dense_offsets import MIN_ROWS, TaskCount, starts_array, task_starts, use_task_counts
from log_store.partitioner import OFFSET_INDEX_FUNCTION, jvm_offset_index

MAX_STARTS = 100_000  # (Spark tasks x partitions) beyond which offsets are numbered by a sorting window


def map_lookup(mapping: dict[int, int], column: str) -> Column:
    """``mapping[column]`` (null where absent) as one SQL expression: one call across py4j,
    where a literal per key and value cost a call each."""
    if not mapping:
        return F.lit(None).cast("long")
    pairs = ", ".join(f"{int(k)}L, {int(v)}L" for k, v in mapping.items())
    return F.expr(f"try_element_at(map({pairs}), `{column}`)")




def offsets_column(spark: SparkSession, data: DataFrame, bases: dict[int, int], rows: int | None,
                   mixed_files: bool = False) -> Column:
    """Each row's offset: its partition's log end plus its rank there by sequence; without a
    shuffle when the rows already come in sequence order (log_store/dense_offsets.py) and
    the batch is large enough for the counting pass to pay and for each task's files to be
    of a useful size (``use_task_counts``)."""
    # planning only, no job; without the index function (Spark Connect) a sorting window numbers them
    tasks = data.rdd.getNumPartitions() if rows and rows >= MIN_ROWS and jvm_offset_index(spark) else 1
    # A task writes a file per partition it holds, unless the log's files mix partitions.
    if use_task_counts(rows, tasks, 1 if mixed_files else len(bases)):
        counted = counted_offsets(spark, data, bases)
        if counted is not None:
            return counted
    order = Window.partitionBy("partition").orderBy("sequence")
    return (F.coalesce(map_lookup(bases, "partition"), F.lit(0)) + F.row_number().over(order) - 1).cast("long")


def counted_offsets(spark: SparkSession, data: DataFrame, bases: dict[int, int]) -> Column | None:
    """Offsets from per-task counts: one counting job, then each row's offset is its task's first
    offset in its partition plus its index there, with no shuffle. None when the rows are not in
    sequence order within and across tasks, or the JVM's index function is missing."""
    if not jvm_offset_index(spark):
        return None
    index = F.call_function(OFFSET_INDEX_FUNCTION, F.col("partition"), F.col("sequence"))
    counts = (data.select(F.spark_partition_id().alias("task"), "partition", "sequence", index.alias("index"))
              .groupBy("task", "partition")
              .agg(F.count("*").alias("rows"), F.min("sequence").alias("first_sequence"),
                   F.max("sequence").alias("last_sequence"), F.min("index").alias("lowest_index"))
              .collect())
    starts = task_starts([TaskCount(**r.asDict()) for r in counts], bases)
    width = max((p for _t, p in starts or {}), default=0) + 1
    flat = starts_array(starts, width) if starts else []
    if not 0 < len(flat) <= MAX_STARTS:  # beyond, the literal would outgrow the plan
        return None
    slot = F.spark_partition_id().cast("long") * width + F.col("partition") + 1
    # One SQL literal, one call across py4j (``F.lit`` of a list costs a few calls an element).
    starts_literal = F.expr(f"array({', '.join(f'{int(v)}L' for v in flat)})")
    return (F.element_at(starts_literal, slot.cast("int")) + index).cast("long")


def place_rows(df: DataFrame, column: str = "sequence") -> tuple[DataFrame, DataFrame]:
    """``df`` with each row's place in it in ``column`` (from 0: the rows of its first Spark task in
    their order, then the second task's, ...), and the cache holding the rows, which the caller
    unpersists. One job counts each task's rows; the rows are not shuffled (a window over all of
    them runs in one task)."""
    tagged = df.withColumn("_place", F.monotonically_increasing_id()).persist()
    counts = {int(t): int(n) for t, n in tagged.groupBy(F.shiftright("_place", 33)).count().collect()}
    starts, total = {}, 0
    for task in sorted(counts):
        starts[task], total = total, total + counts[task]
    pairs = ", ".join(f"{t}L, {s}L" for t, s in starts.items())
    start = F.expr(f"try_element_at(map({pairs}), shiftright(_place, 33))") if starts else F.lit(0)
    return tagged.withColumn(column, (start + F.expr("_place & 8589934591")).cast("long")).drop("_place"), tagged
