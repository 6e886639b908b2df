"""The fenced append of a topic's log (``TopicLog.append`` and ``append_rows``): one Delta
commit that reads the partition metadata, the log ends and the producers' marks inside its own
transaction, refuses a stale partition count, a partition not writable or a producer's moved mark,
numbers the records densely from each partition's log end (``log_store.numbering``, or the counts
of a pass before: ``log_store.placed_offsets``) and moves the log ends and marks in the same
commit, so a concurrent writer's commit makes it retry, never double an offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.dense_offsets import check_dense, use_one_task
from log_store.driver_rows import (ROW_COLUMNS, check_marks, drop_committed, number_rows, producer_marks,
                                   transaction_marks)
from log_store.engine import DeltaTransaction
from log_store.errors import (
    NULL_VALUE_MARK,
    ConcurrentAppendError,
    ConcurrentCommitError,
    InvalidPartitionMetadataError,
    InvalidRecordError,
    NullValueRefusedError,
    StaleProducerSequenceError,
    TableConfigError,
    null_values_refused,
)
from log_store.headers import headers_as
from log_store.log_metadata import (
    ARRIVAL,
    LAYOUT_PROP,
    Mode,
    TopicLogMetadata,
    check_leader,
    check_set_transactions_kept,
    log_end,
)
from log_store.log_writers import write_arrival, write_arrival_rows, write_partitioned, write_partitioned_rows
from log_store.names import commit_metadata, log_end_app_id, producer_app_id
from log_store.numbering import map_lookup, offsets_column
from log_store.placed_offsets import Placement
from log_store.timestamp_types import LOG_APPEND_TIME, TimestampTypes, stamp_log_append_time

if TYPE_CHECKING:
    from log_store.rs_engine import RsTransaction
    from log_store.topic_log import TopicLog

# What a producer hands to ``append``: the record schema less what the append assigns.
PRODUCER_COLUMNS = ["partition", "key", "value", "headers", "timestamp", "producer_id", "sequence"]


class AppendResult(BaseModel):
    """Where an append landed: per partition, the [first, next) offsets it wrote."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    version: int | None
    ranges: dict[int, tuple[int, int]]
    attempts: int = 1
    producer_mark: int = -1  # the producer's highest committed sequence after the append (-1: none)
    # ``append_rows`` only: the rows as committed (numbered, stamped), the table's Delta id and
    # whether its records are LogAppendTime (what a server keeps of its own commits, serve/tail.py)
    written: pa.Table | None = Field(default=None, exclude=True, repr=False)
    table_id: str | None = Field(default=None, exclude=True, repr=False)
    log_append_time: bool = Field(default=False, exclude=True, repr=False)

    @property
    def appended(self) -> int:
        return sum(end - start for start, end in self.ranges.values())



def append(
    log: "TopicLog",
    records: DataFrame,
    expected_count: int,
    producer_id: str | None = None,
    max_retries: int = 20,
    backoff_ms: int = 50,
    rows: int | None = None,
    expected_mark: int | None = None,
    stamps: dict[str, int] | None = None,
    placed: Placement | None = None,
) -> AppendResult:
    """Append ``records`` (columns ``PRODUCER_COLUMNS``) with dense offsets, fenced.

    Raises InvalidPartitionMetadataError when ``expected_count`` is not the table's
    ``undeleted_partition_count`` or a target partition is not ReadWrite; the caller
    re-partitions and retries. Concurrent commits to the same partitions are retried here.
    With a ``producer_id``, records whose sequence was already committed for their partition
    are dropped, so a retried batch lands once. Pass a persisted DataFrame: a retry reads
    it again. ``rows`` (how many records, if known) lets large batches in sequence order take
    offsets without a shuffle. ``expected_mark``: the producer's highest committed sequence as
    the caller last saw it; if the log's differs, nothing is written (StaleProducerSequenceError).
    ``stamps``: more application versions to set in the same commit (a stream sink's record of
    which micro-batch landed), which make it fail if another writer moved them first.
    ``placed``: the rows' counts per Spark task and partition, from a pass before (each row's
    sequence its place in the write): offsets without a shuffle (log_store/placed_offsets.py).
    """
    missing = [c for c in PRODUCER_COLUMNS if c not in records.columns]
    if missing:
        raise InvalidRecordError(f"records lack columns {missing}; expected {PRODUCER_COLUMNS}")
    if records.columns != PRODUCER_COLUMNS:
        records = records.select(*PRODUCER_COLUMNS)
    attempts = [0]

    def attempt() -> AppendResult:
        attempts[0] += 1
        return _append_once(log, records, expected_count, producer_id, rows, expected_mark, stamps, placed)

    try:
        result = retry_on_conflict(attempt, attempts=max_retries + 1, backoff_ms=backoff_ms)
    except ConcurrentCommitError as exc:
        raise ConcurrentAppendError(f"the append lost to concurrent commits {attempts[0]} times ({exc}); "
                                    f"raise producer.max_retries or produce again") from exc
    return result.model_copy(update={"attempts": attempts[0]})

def append_rows(log: "TopicLog", rows: pa.Table, expected_count: int, marks: Mapping[str, int | None] | None = None,
                max_retries: int = 20, backoff_ms: int = 50,
                stamps: dict[str, int] | None = None, transactional: Mapping[str, int] | None = None) -> AppendResult:
    """Append rows already in the driver (Arrow, ``driver_rows.ROW_COLUMNS``), fenced as ``append``
    is, with no Spark job: each partition's rows numbered in their order in ``rows``, written by
    pyarrow. Several producers may share the commit: ``marks`` holds, for every producer id in
    the rows, the mark its rows were numbered after; if the log holds another, nothing is
    written (StaleProducerSequenceError, with the log's marks). A mark of None: the producer's
    rows at or below its mark in the log are dropped as a retry's duplicates (as ``append``
    does without ``expected_mark``). A row of a partition that is not writable makes the append
    refuse with InvalidPartitionMetadataError naming it. ``stamps`` as for ``append``; the
    result's ``producer_mark`` is the one producer's mark after it, when there is one.
    ``transactional``: producer id -> producer epoch of the producers whose rows here belong to
    their open transaction: each partition's transaction mark and epoch move in the same commit
    (``driver_rows.transaction_marks``; ProducerFencedError, nothing written, below the partition's epoch)."""

    def attempt() -> AppendResult:
        txn, conf, meta, writable, known, bases = open_append(log, expected_count, log.rows_transaction())
        expected = dict(marks or {})
        todo = drop_committed(rows, known, expected)
        if todo.column("value").null_count and not txn.column("value").nullable:
            raise null_values_refused(meta.topic, log.path)
        check_marks(known, expected, meta.topic)
        new_marks = producer_marks(todo, expected)
        table = number_rows(stamp_log_append_time(todo.select(list(ROW_COLUMNS)), conf), bases,
                            {p: meta.partitions[p].leader_epoch for p in writable}, meta.topic)
        txn_versions, txn_depends = transaction_marks(table, known, transactional or {}, meta.topic)
        writer = write_arrival_rows if conf.get(LAYOUT_PROP) == ARRIVAL else write_partitioned_rows
        parts = writer(log.path, txn, table) if table.num_rows else []
        one = next(iter(expected)) if len(expected) == 1 else None
        result = _commit_parts(log, txn, meta, parts, bases, known, writable, new_marks, expected_count,
                                    one, stamps, txn_versions, txn_depends)
        update = {"written": table, "table_id": txn.table_id(),
                  "log_append_time": TimestampTypes.of(conf).current == LOG_APPEND_TIME}
        if one is not None:
            update["producer_mark"] = new_marks.get(one, expected[one])
        return result.model_copy(update=update)

    try:
        return retry_on_conflict(attempt, attempts=max_retries + 1, backoff_ms=backoff_ms)
    except ConcurrentCommitError as exc:
        raise ConcurrentAppendError(f"the append lost to concurrent commits {max_retries + 1} times ({exc}); "
                                    "produce again") from exc

def open_append(log: "TopicLog", expected_count: int, txn: "DeltaTransaction | RsTransaction | None" = None
                ) -> tuple[DeltaTransaction, dict[str, str], TopicLogMetadata, list[int], dict[str, int], dict[int, int]]:
    """An append's transaction (``txn``, else one of Spark's Delta) and what it reads inside it:
    the table's properties, the partition metadata (refused if deleted, fenced as a follower, or
    counting other than ``expected_count``), the writable partitions, the application versions
    and each writable partition's log end."""
    txn = txn or log.transaction()
    conf = txn.configuration()
    check_set_transactions_kept(conf, log.path)
    meta = TopicLogMetadata.from_properties(conf)
    meta.check_not_deleted()  # read in the transaction: a deletion's fence commit conflicts with it
    check_leader(conf, log.path)  # and so does an election's fence of a replica root
    if meta.undeleted_partition_count != expected_count:
        raise InvalidPartitionMetadataError(
            f"stale partition count: producer has {expected_count}, topic {meta.topic} has "
            f"{meta.undeleted_partition_count}; refresh metadata and re-partition"
        )
    writable = [p for p, pm in meta.partitions.items() if pm.mode is Mode.READ_WRITE]
    # Read every partition's log end and the producer's mark without depending on them; after
    # the write, depend only on what the commit moves, so appends to other partitions never conflict.
    known = txn.snapshot_app_versions()
    bases = {p: log_end(known, p, meta.partitions[p].start_offset) for p in writable}
    return txn, conf, meta, writable, known, bases

def _append_once(log: "TopicLog", records: DataFrame, expected_count: int, producer_id: str | None,
                 rows: int | None = None, expected_mark: int | None = None,
                 stamps: dict[str, int] | None = None, placed: Placement | None = None) -> AppendResult:
    """One attempt, one Spark job: read metadata and log ends in the transaction, write, check, commit.

    Offsets come from the log ends read inside the transaction; counts and sequence bounds
    per partition come back from the written files' Delta stats, so no extra pass is needed.
    """
    txn, conf, meta, writable, known, bases = open_append(log, expected_count)
    data = records
    mark = -1
    if producer_id:
        mark = known.get(producer_app_id(producer_id), -1)
        if expected_mark is not None and mark != expected_mark:
            raise StaleProducerSequenceError(
                f"producer {producer_id} last committed sequence {expected_mark} as far as it knows, but the log "
                f"of {meta.topic} has {mark}: another process produced under the same id. Nothing was written; "
                "number the records after the log's mark")
        # A small batch's mark as a map literal: Spark writes number literals into the code it
        # generates, so each new mark compiled the write again (3.5 compiles, ~20 ms of a
        # 100-record produce); a map is passed by reference. A large batch keeps the number,
        # which Spark can push into the scan of its input. (-1: a partition without metadata,
        # refused below.)
        floor = (F.coalesce(map_lookup({p: mark for p in meta.partitions}, "partition"), F.lit(-1))
                 if use_one_task(rows) else F.lit(mark))
        data = data.where(F.col("sequence") > floor)
    if placed is not None:
        data = placed.with_index(data)
        offsets = placed.offsets_column(bases)
    else:
        if use_one_task(rows):
            data = data.coalesce(1)  # the window numbering a small batch then runs without a shuffle
        offsets = offsets_column(log.spark, data, bases, rows, mixed_files=conf.get(LAYOUT_PROP) == ARRIVAL)
    out = data.select(
        "partition", offsets.alias("offset"),
        F.coalesce(map_lookup({p: meta.partitions[p].leader_epoch for p in writable}, "partition"), F.lit(-1))
        .cast("int").alias("leader_epoch"),
        "key", value_as_kept(txn), headers_as("headers", data.schema["headers"].dataType, txn.column_type("headers")),
        # LogAppendTime: the append's time, whatever the producer gave (as Kafka's broker stamps it)
        F.current_timestamp().alias("timestamp") if TimestampTypes.of(conf).current == LOG_APPEND_TIME
        else "timestamp", "producer_id", "sequence",
    )
    try:
        if conf.get(LAYOUT_PROP) == ARRIVAL:
            parts, max_seq = write_arrival(log.spark, log.path, txn, out, rows, producer_id, mark)
        else:
            parts, max_seq = write_partitioned(log.path, txn, out, rows, producer_id, mark, len(meta.partitions))
    except NullValueRefusedError as exc:
        raise null_values_refused(meta.topic, log.path) from exc
    if placed is not None:
        placed.check(parts)
    result = _commit_parts(log, txn, meta, parts, bases, known, writable, {producer_id: max_seq} if producer_id else {},
                                expected_count, producer_id, stamps)
    return result.model_copy(update={"producer_mark": max_seq})

def value_as_kept(txn: "DeltaTransaction | RsTransaction"):
    """The ``value`` column for the table of ``txn``: as it is where the table keeps null values
    (tombstones); where its value column is NOT NULL (a log or sink of an earlier release), a null
    fails the write with ``NULL_VALUE_MARK``, which ``translate`` makes a NullValueRefusedError for
    the caller to name the table in."""
    if txn.column("value").nullable:
        return F.col("value")
    return F.coalesce("value", F.raise_error(F.lit(f"{NULL_VALUE_MARK}: a null value")).cast("binary")).alias("value")

def _commit_parts(log: "TopicLog", txn: DeltaTransaction, meta: TopicLogMetadata, parts: list[tuple[int, int, int, int]],
                  bases: dict[int, int], known: dict[str, int], writable: list[int], marks: dict[str, int],
                  expected_count: int, producer_id: str | None = None,
                  stamps: dict[str, int] | None = None, more: Mapping[str, int] | None = None,
                  depends: list[str] | None = None, kind: str = "append") -> AppendResult:
    """Commit the written files whose (partition, rows, first, last offset) are ``parts``: every
    partition writable, its offsets dense from its log end, and the log ends and the producers'
    new ``marks`` (producer id -> highest sequence) moved in the same commit, which fails if
    another writer moved them first. ``producer_id`` names the one producer in the commit's metadata.
    ``more``: other application versions the commit sets, and ``depends`` other ids it reads (the
    transactions' marks and epochs); ``kind`` names the commit in its metadata."""
    counts: dict[int, int] = {}
    for p, n, _a, _b in parts:
        counts[p] = counts.get(p, 0) + n
    not_writable = sorted(set(counts) - set(writable))
    if not_writable:  # the written files are never committed; VACUUM removes them
        p = not_writable[0]
        state = "does not exist" if p not in meta.partitions else f"is {meta.partitions[p].mode.value}"
        raise InvalidPartitionMetadataError(
            f"partition {p} of {meta.topic} {state}; refresh metadata and re-partition", partitions=not_writable)
    if not counts:
        return AppendResult(version=None, ranges={})
    lost = sorted(p for p in counts if log_end_app_id(p) not in known)
    if lost:
        raise TableConfigError(
            f"the log end offset of partition {lost[0]} is missing from the Delta log of {log.path} (an expired "
            "set transaction?); appending would reuse offsets, so nothing was written. Restore the table's "
            "set transactions (docs/storage-format.md) before producing again"
        )
    check_dense(parts, bases)
    crash_point("produce:after_write")
    # the commit now fails if another writer moved these partitions, or these producers' marks
    txn.depend_on([log_end_app_id(p) for p in counts] + [producer_app_id(pid) for pid in marks] + list(stamps or {})
                   + list(more or {}) + list(depends or []))
    versions = {log_end_app_id(p): bases[p] + n for p, n in counts.items()}
    for pid, mark in marks.items():
        versions[producer_app_id(pid)] = mark
    versions |= dict(more or {})
    ranges = {p: (bases[p], bases[p] + n) for p, n in counts.items()}
    extra = {"producer_id": producer_id} if producer_id or not marks else {"producers": len(marks)}
    version = txn.commit(versions, commit_metadata(
        kind, **extra, undeleted_partition_count=expected_count,
        ranges={str(p): list(r) for p, r in sorted(ranges.items())}), counters=stamps)
    crash_point("produce:after_commit")
    return AppendResult(version=version, ranges=ranges)
