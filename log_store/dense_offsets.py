"""Dense offsets without a shuffle: the arithmetic, and the check that fails closed.

A batch's rows are numbered per partition from the partition's log end, in sequence order.
Sorting all of them by (partition, sequence) is a shuffle of the whole batch. When the input
is already in sequence order (ascending within each Spark task, and each task's sequences above
the previous task's, per partition: what a file read or a ``range`` gives), a row's offset is

    log end + rows of its partition in earlier tasks + its index in its own task,

where the index is counted in the JVM as the rows stream by (``lakelog.OffsetIndex``). A first
pass counts rows per (task, partition) and finds out whether the order holds; otherwise the
caller numbers rows with a sorting window. Either way, ``check_dense`` proves from the written
files' statistics that the offsets are exactly [log end, log end + count) before the commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from log_store.errors import OffsetCheckError


@dataclass(frozen=True)
class TaskCount:
    """One Spark task's rows of one partition: how many, their sequence bounds, and whether the
    task saw them in sequence order (``lowest_index`` is -1 if not)."""

    task: int
    partition: int
    rows: int
    first_sequence: int
    last_sequence: int
    lowest_index: int


MIN_ROWS = 500_000  # below, the counting pass costs more than the shuffle it saves (BENCHMARKS.md)
MIN_ROWS_PER_FILE = 20_000  # each task writes a file per partition: fewer rows make small files
ONE_TASK_ROWS = 20_000  # up to here a batch is numbered and written in one task (BENCHMARKS.md, 2026-11-25)


def use_one_task(rows: int | None) -> bool:
    """Whether a batch of ``rows`` should be numbered and written in one Spark task: the sorting
    window then needs no shuffle (a single task already holds each partition's rows), which for
    a small batch costs more than the rows themselves (a job of its own)."""
    return rows is not None and rows <= ONE_TASK_ROWS


def use_task_counts(rows: int | None, tasks: int, partitions: int) -> bool:
    """Whether a batch of ``rows`` in ``tasks`` Spark tasks over ``partitions`` partitions should
    take offsets from per-task counts. Measured on 2 cores (BENCHMARKS.md, 2026-11-23): 1M rows
    into 8 partitions gained, into 64 (4 tasks: 256 small files) lost, 100-row batches lost the
    counting job's fixed cost, 10M into 8 took 0.64 of the window's time."""
    if rows is None or rows < MIN_ROWS:
        return False
    return rows / max(tasks * max(partitions, 1), 1) >= MIN_ROWS_PER_FILE


def task_starts(counts: Iterable[TaskCount], bases: Mapping[int, int]) -> dict[tuple[int, int], int] | None:
    """The first offset of each (task, partition), or None when the input is not in sequence order."""
    by_partition: dict[int, list[TaskCount]] = {}
    for c in counts:
        if c.lowest_index < 0:
            return None
        by_partition.setdefault(c.partition, []).append(c)
    starts: dict[tuple[int, int], int] = {}
    for p, tasks in by_partition.items():
        tasks.sort(key=lambda c: c.task)
        offset = bases.get(p, 0)
        previous = None
        for c in tasks:
            if previous is not None and c.first_sequence <= previous:
                return None
            starts[(c.task, p)] = offset
            offset += c.rows
            previous = c.last_sequence
    return starts


def starts_array(starts: Mapping[tuple[int, int], int], partitions: int) -> list[int]:
    """``starts`` laid out flat, index ``task * partitions + partition``, for an O(1) lookup per row."""
    tasks = max((t for t, _p in starts), default=-1) + 1
    flat = [0] * (tasks * partitions)
    for (t, p), start in starts.items():
        flat[t * partitions + p] = start
    return flat


def check_dense(files: Iterable[tuple[int, int, int, int]], bases: Mapping[int, int]) -> None:
    """Fail unless each partition's files (partition, rows, lowest offset, highest offset) tile
    [base, base + rows) exactly: every file a gap-free run of distinct offsets, no overlap, no gap."""
    runs: dict[int, list[tuple[int, int, int]]] = {}
    for p, rows, lo, hi in files:
        runs.setdefault(p, []).append((lo, hi, rows))
    for p, parts in runs.items():
        expected = bases.get(p, 0)
        for lo, hi, rows in sorted(parts):
            if lo != expected or hi - lo + 1 != rows:
                raise OffsetCheckError(
                    f"partition {p}: a written file holds offsets {lo}..{hi} in {rows} rows where the next dense "
                    f"offset is {expected}; nothing was committed. This is a bug in lakelog: please report it")
            expected = hi + 1
