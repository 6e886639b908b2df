"""Offsets of a write whose rows were counted per Spark task and partition before it ran.

A write without sequences numbers each row by its place: the rows of its first Spark task, in
their order, then the second task's, ... (``place_column``: Spark's ``monotonically_increasing_id``,
the task in its high bits and the row's index in the task in its low ones). A first pass counts
each task's rows per target partition (``pipelines.placed_send``); the write then numbers every
row as it streams by, with no shuffle and nothing staged:

    offset = log end + rows of the partition in earlier tasks + index among its task's rows there

(the index from ``lakelog_offset_index``, log_store/dense_offsets.py). That holds only if the
write reads the rows the first pass counted. Two checks make sure it did, and otherwise the
write fails with ``InputChangedError`` before anything is committed (the caller then caches the
rows and writes them the slow way): a task that meets more rows of a partition than counted fails
itself (``raise_error``), and the written files must hold exactly the counted rows of each
partition (``Placement.check``); with ``check_dense`` at the commit, each task then wrote exactly
its counted rows of each partition, at the offsets counted for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from log_store.errors import INPUT_CHANGED_MARK, InputChangedError
from log_store.partitioner import OFFSET_INDEX_FUNCTION

TASK_SHIFT = 33  # monotonically_increasing_id: the task's number above these bits, the row's index below
INDEX_MASK = (1 << TASK_SHIFT) - 1
MAX_SLOTS = 100_000  # (Spark tasks x partitions) beyond which the literals would outgrow the plan


def place_column() -> Column:
    """Each row's place: its Spark task above ``TASK_SHIFT`` bits, its index in the task below."""
    return F.monotonically_increasing_id()


def longs(values: Iterable[int]) -> Column:
    """An array of longs as one SQL literal (one call across py4j; ``F.lit`` of a list costs a few
    calls an element)."""
    return F.expr(f"array({', '.join(f'{int(v)}L' for v in values)})")


@dataclass(frozen=True)
class Placement:
    """A write's rows per (Spark task, partition), counted before it ran."""

    rows: Mapping[tuple[int, int], int]

    @property
    def width(self) -> int:
        return max((p for _t, p in self.rows), default=0) + 1

    @property
    def fits(self) -> bool:
        """Whether the lookups stay small enough to be literals in the plan (``MAX_SLOTS``)."""
        tasks = max((t for t, _p in self.rows), default=0) + 1
        return min(p for _t, p in self.rows) >= 0 and tasks * self.width <= MAX_SLOTS if self.rows else True

    def per_partition(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for (_t, p), n in self.rows.items():
            out[p] = out.get(p, 0) + n
        return out

    def starts(self, bases: Mapping[int, int]) -> dict[tuple[int, int], int]:
        """The first offset of each (task, partition): the partition's log end plus its rows in earlier tasks."""
        starts: dict[tuple[int, int], int] = {}
        ends = dict(bases)
        for t, p in sorted(self.rows):
            starts[(t, p)] = ends.get(p, 0)
            ends[p] = starts[(t, p)] + self.rows[(t, p)]
        return starts

    def with_index(self, data: DataFrame) -> DataFrame:
        """``data`` with ``_index``, each row's index among its task's rows of its partition, in a
        projection of its own (the function counts as it is called: once per row, in order)."""
        return data.withColumn("_index", F.call_function(OFFSET_INDEX_FUNCTION, F.col("partition"), F.col("sequence")))

    def offsets_column(self, bases: Mapping[int, int]) -> Column:
        """Each row's offset (over ``with_index``'s rows), or the task's failure naming ``INPUT_CHANGED_MARK``
        when the row is beyond the rows counted for its task and partition."""
        width, starts = self.width, self.starts(bases)
        tasks = max((t for t, _p in self.rows), default=0) + 1
        flat_starts, flat_rows = [0] * (tasks * width), [0] * (tasks * width)
        for (t, p), start in starts.items():
            flat_starts[t * width + p], flat_rows[t * width + p] = start, self.rows[(t, p)]
        # the task numbering the row is the one that read it: no shuffle lies between (else the counts
        # fail); a partition the first pass did not see has no slot (null: a row not counted)
        slot = F.when(F.col("partition").between(0, width - 1),
                      (F.spark_partition_id().cast("long") * width + F.col("partition") + 1).cast("int"))
        counted = F.coalesce(F.try_element_at(longs(flat_rows), slot), F.lit(0))
        index = F.col("_index")
        return F.when((index >= 0) & (index < counted), F.try_element_at(longs(flat_starts), slot) + index) \
            .otherwise(F.raise_error(F.lit(f"{INPUT_CHANGED_MARK}: a task met rows of a partition its first pass did not "
                                           "count")).cast("long")).cast("long")

    def check(self, parts: Iterable[tuple[int, int, int, int]]) -> None:
        """Fail unless the written files ((partition, rows, first, last offset) each) hold exactly
        the counted rows of each partition."""
        written: dict[int, int] = {}
        for p, n, _a, _b in parts:
            written[p] = written.get(p, 0) + n
        counted = {p: n for p, n in self.per_partition().items() if n}
        if written != counted:
            changed = sorted(p for p in set(written) | set(counted) if written.get(p, 0) != counted.get(p, 0))
            raise InputChangedError(
                f"the write read other rows than its first pass counted (partition {changed[0]}: "
                f"{counted.get(changed[0], 0)} counted, {written.get(changed[0], 0)} written); nothing was committed")
