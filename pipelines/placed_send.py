"""A large produce without sequences in two passes over its rows, nothing cached or staged.

Each row's sequence is its place in the write (the rows of its first Spark task, in their order,
then the second task's, ...), so a key's rows land in the DataFrame's order. The first pass (one
Spark job, ``count_slots``) counts each task's rows per target partition, and the records without
a value; the second writes the log's files with each row's offset known as it streams by
(log_store/placed_offsets.py). Unkeyed rows go round-robin by sequence, which the first pass
cannot know before every task has counted: it counts them by their index in the task modulo the
partition count, which with the task's first place gives the partition.

The passes must read the same rows. An input whose plan is not deterministic takes the cached
path at once (``pipelines.producer``); one that changes between reads (a folder written to
meanwhile) makes the write fail with ``InputChangedError``, nothing committed, and the producer
then caches the rows and writes them the slow way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from log_store.errors import INPUT_CHANGED_MARK, InputChangedError
from log_store.frames import deterministic
from log_store.partitioner import jvm_offset_index, partition_column
from log_store.placed_offsets import INDEX_MASK, TASK_SHIFT, Placement, longs, place_column

Slot = tuple[int, int | None, int | None]  # (task, partition or None if unkeyed, index modulo the count if unkeyed)


def placeable(spark: SparkSession, records: DataFrame) -> bool:
    """Whether ``records`` may be written in two passes: its plan is deterministic (else the passes
    could read other rows, and the cached path is surer), and lakelog's JVM offset index is there."""
    return jvm_offset_index(spark) and deterministic(records)


@dataclass(frozen=True)
class SlotCounts:
    """The first pass's counts for one partition count: rows per ``Slot``, and records with a null value."""

    partitions: int
    slots: dict[Slot, int]
    null_values: int

    @property
    def total(self) -> int:
        return sum(self.slots.values())

    def task_rows(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for (t, _p, _r), n in self.slots.items():
            out[t] = out.get(t, 0) + n
        return out

    def firsts(self) -> dict[int, int]:
        """Each task's first place in the write: the rows of the tasks before it."""
        firsts, total = {}, 0
        for t, n in sorted(self.task_rows().items()):
            firsts[t], total = total, total + n
        return firsts

    def placement(self, sequence_start: int) -> Placement:
        """Rows per (task, partition) once the write's sequences start at ``sequence_start``: an
        unkeyed row's partition is its sequence modulo the count."""
        firsts, rows = self.firsts(), {}
        for (t, p, r), n in self.slots.items():
            part = p if p is not None else (sequence_start + firsts[t] + r) % self.partitions
            rows[(t, part)] = rows.get((t, part), 0) + n
        return Placement(rows)


@dataclass
class PlacedRows:
    """``records`` (no ``sequence`` column) with each row's place, counted per partition count."""

    spark: SparkSession
    records: DataFrame
    normalize: Callable[[DataFrame, int], DataFrame]  # the producer's: binary key and value, sequence + start
    counted: dict[int, SlotCounts] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # both passes read this plan: the place is numbered at the same point of it
        self.placed = self.records.withColumn("_place", place_column())
        self.first: SlotCounts | None = None

    def counts(self, partitions: int) -> SlotCounts:
        """The first pass for ``partitions`` (one Spark job; kept). A second count for another
        partition count that finds other tasks' totals means the input changed: InputChangedError."""
        if partitions not in self.counted:
            found = count_slots(self.spark, self.normalize(self.placed.withColumn("sequence", F.col("_place")), 0),
                                partitions)
            if self.first is not None and found.task_rows() != self.first.task_rows():
                raise InputChangedError("the rows changed between two counts of one write; nothing was committed")
            self.counted[partitions] = found
            self.first = self.first or found
        return self.counted[partitions]

    def sequenced(self, sequence_start: int) -> DataFrame:
        """The normalized rows, each with its sequence: ``sequence_start`` plus its place in the write
        (its task's first place plus its index in the task), by the first count's tasks."""
        assert self.first is not None, "counts() first"
        firsts = self.first.firsts()
        starts = [firsts.get(t, 0) for t in range(max(firsts, default=0) + 1)]
        task = (F.shiftright(F.col("_place"), TASK_SHIFT) + 1).cast("int")
        # A task the first count did not see (the input read in more tasks this time) has no first
        # place: its rows fail the write. A null sequence would not be counted anywhere: the
        # append's floor (``sequence > mark``) drops such a row without a word.
        first = F.coalesce(F.try_element_at(longs(starts), task), F.raise_error(F.lit(
            f"{INPUT_CHANGED_MARK}: a task the first pass did not count met rows")).cast("long"))
        place = first + F.col("_place").bitwiseAND(F.lit(INDEX_MASK))
        return self.normalize(self.placed.withColumn("sequence", place), sequence_start)


def count_slots(spark: SparkSession, normalized: DataFrame, partitions: int) -> SlotCounts:
    """The first pass: rows per ``Slot`` and null values, over ``normalized`` rows whose
    ``sequence`` is their place (``place_column``)."""
    place = F.col("sequence")
    keyed = F.when(F.col("key").isNotNull(), partition_column(spark, "key", "_zero", partitions))
    if "partition" in normalized.columns:  # the row's own, as the write takes it; else the key's
        keyed = F.coalesce(F.col("partition"), keyed)
    found = (normalized.withColumn("_zero", F.lit(0).cast("long"))
             .select(F.shiftright(place, TASK_SHIFT).alias("task"), keyed.alias("part"),
                     place.bitwiseAND(F.lit(INDEX_MASK)).alias("index"), F.col("value").isNull().alias("no_value"))
             .select("task", "part", F.when(F.col("part").isNull(), F.col("index") % partitions).alias("residue"),
                     "no_value")
             .groupBy("task", "part", "residue")
             .agg(F.count(F.lit(1)).alias("rows"), F.sum(F.col("no_value").cast("int")).alias("no_values"))
             .collect())
    slots = {(int(r["task"]), None if r["part"] is None else int(r["part"]),
              None if r["residue"] is None else int(r["residue"])): int(r["rows"]) for r in found}
    return SlotCounts(partitions, slots, sum(int(r["no_values"] or 0) for r in found))
