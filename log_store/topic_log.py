"""``TopicLog``: the facade over one topic's log table (delta-spark's DeltaTable style).

Layout: one Delta table per topic, Delta-partitioned by ``partition``; each Kafka partition is
one Delta partition of it (docs/design.md says why not one table per partition). The partition
metadata the protocol needs at append time lives in the table's own properties and each
partition's log end in a Delta application transaction version (``log_store.log_metadata``), so
the fenced append reads both inside its own transaction; its offsets are numbered by
``log_store.numbering``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow as pa
from delta.tables import DeltaTable
from pydantic import BaseModel, ConfigDict, Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from log_store.headers import HEADERS_TYPE, headers_as
from log_store.crash import crash_point
from log_store.dense_offsets import check_dense, use_one_task
from log_store.engine import DeltaTransaction
from log_store.delta_errors import is_conflict, retry_on_conflict
from log_store.errors import (
    leader_unavailable,
    ConcurrentAppendError,
    ConcurrentCommitError,
    InvalidConfigurationError,
    InvalidPartitionMetadataError,
    InvalidRecordError,
    StaleProducerSequenceError,
    StorageError,
    TableConfigError,
    UnknownTopicError,
)
from log_store.frames import rows_frame
from log_store.driver_rows import ROW_COLUMNS, check_marks, drop_committed, number_rows, producer_marks
from log_store.log_writers import write_arrival, write_arrival_rows, write_partitioned, write_partitioned_rows
from log_store.log_metadata import (
    ARRIVAL,
    LAYOUT_PROP,
    LAYOUTS,
    TOPIC_VERSION_PROP,
    LogSnapshot,
    Mode,
    TopicLogMetadata,
    check_leader,
    check_set_transactions_kept,
    layout_of,
    log_end,
    topic_id_of,
    log_starts,
)
from log_store.names import commit_metadata, log_end_app_id, producer_app_id
from log_store.numbering import map_lookup, offsets_column
from log_store.placed_offsets import Placement
from log_store.timestamp_types import LOG_APPEND_TIME, TimestampTypes, stamp_log_append_time
from log_store.read_ranges import batch_position, by_partition, ordering_keys, range_filter

RECORD_SCHEMA = StructType(
    [
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("leader_epoch", IntegerType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), False),
        StructField("headers", HEADERS_TYPE, True),
        StructField("timestamp", TimestampType(), True),
        StructField("producer_id", StringType(), True),
        StructField("sequence", LongType(), True),
    ]
)
# The columns Delta keeps statistics for in each written file: the append counts records and
# checks offsets and sequences from them, and reads skip files by offset, timestamp and epoch.
# Keys, values, headers and producer ids get none: collecting them cost about 12 % of a 1M-record
# write (BENCHMARKS.md, 2026-11-26), and no read filters on them.
STATS_COLUMNS = "offset,sequence,leader_epoch,timestamp"
DEFAULT_LAYOUT = os.environ.get("LAKELOG_LAYOUT", "partitioned")  # a new topic's, without a layout given
CHECKPOINT_INTERVAL = "100"  # commits between Delta checkpoints of a log (Delta's default: 10)
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


# What Delta's create-if-not-exists says when another process is creating the same table.
_CREATION_RACE = ("DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_TABLE_NOT_FOUND")


class TopicLog:
    """One topic's log table. Build with ``for_path`` or ``create``."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.path = path

    # -- factories -------------------------------------------------------------------------
    @classmethod
    def for_path(cls, spark: SparkSession, path: str) -> "TopicLog":
        if not DeltaTable.isDeltaTable(spark, path):
            raise UnknownTopicError(f"no topic log table at {path}")
        return cls(spark, path)

    @classmethod
    def at_leader(cls, spark: SparkSession, topic: str, path: str) -> "TopicLog":
        """A replicated topic's leader log at the location its record names. The record says the
        log is there, so a log that cannot be found or read means its root is lost for now:
        ``LeaderNotAvailableError``, which producers and consumers wait out (or an election ends)."""
        try:
            return cls.for_path(spark, path)
        except Exception as exc:
            raise leader_unavailable(topic, path, exc) from exc

    @classmethod
    def create(cls, spark: SparkSession, path: str, metadata: TopicLogMetadata, topic_version: int = 1,
               layout: str | None = None, properties: dict[str, str] | None = None) -> "TopicLog":
        """Create the log table with its initial metadata in one commit (no-op if it exists).
        ``topic_version``: the creating record's (above 1 for a topic created again after a deletion).
        ``layout``: ``partitioned`` (a Delta partition per log partition) or ``arrival`` (a file per
        write holding every partition it got, compacted into files per partition; docs/design.md).
        ``properties``: more table properties (a replica root's role and epoch)."""
        given, layout = layout, layout or DEFAULT_LAYOUT
        if layout not in LAYOUTS:
            where = "" if given else " (from LAKELOG_LAYOUT)"
            raise InvalidConfigurationError(f"unknown layout {layout!r}{where}: give one of {', '.join(LAYOUTS)}")
        arrival = layout == ARRIVAL
        builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(RECORD_SCHEMA)
        if arrival:
            builder = builder.property(LAYOUT_PROP, ARRIVAL)
        else:
            builder = builder.partitionedBy("partition")
        builder = (
            builder
            # The change feed keeps every record ever appended readable (``table_changes``)
            # after a retired partition's rows are deleted, for the ordering audit.
            .property("delta.enableChangeDataFeed", "true")
            .property("delta.dataSkippingStatsColumns", f"partition,{STATS_COLUMNS}" if arrival else STATS_COLUMNS)
            # Each checkpoint lists every file removed in the last week (compaction removes one
            # per produce and partition): one every 10 commits, Delta's default, made the log
            # folder of a soaked topic almost all checkpoints (BENCHMARKS.md, soak).
            .property("delta.checkpointInterval", CHECKPOINT_INTERVAL)
        )
        for key, value in metadata.to_properties().items():
            builder = builder.property(key, value)
        if topic_version != 1:
            builder = builder.property(TOPIC_VERSION_PROP, str(topic_version))
        for key, value in (properties or {}).items():
            builder = builder.property(key, value)

        def execute() -> None:
            try:
                builder.execute()
            except Exception as exc:
                if is_conflict(exc) or not any(sign in str(exc) for sign in _CREATION_RACE):
                    raise
                raise ConcurrentCommitError(
                    f"the log table's location {path} is not empty but holds no Delta table yet: another "
                    "process may still be creating it; if none is, remove what is there and create the topic again"
                ) from exc

        # Two processes creating one table race for its first commit: the loser sees the
        # winner's files before its commit, or the table half made, or loses the commit itself.
        # The retry finds the table made and does nothing; the caller compares its metadata.
        retry_on_conflict(execute, attempts=20)
        log = cls(spark, path)
        log.ensure_log_ends(list(metadata.partitions))
        return log

    def ensure_log_ends(self, partitions: list[int]) -> None:
        """Record log end 0 for partitions that have none yet (one commit; idempotent).

        Every partition has a log end from its creation on, so a missing one can only mean an
        expired set transaction, and the append refuses to guess (it would reuse offsets).
        """
        def attempt() -> None:
            txn = DeltaTransaction.start(self.spark, self.path)
            known = txn.snapshot_app_versions()
            missing = [p for p in partitions if log_end_app_id(p) not in known]
            if not missing:
                return
            for p in missing:
                txn.app_version(log_end_app_id(p))
            txn.commit({log_end_app_id(p): 0 for p in missing}, commit_metadata("log_ends", partitions=missing))

        retry_on_conflict(attempt)

    # -- metadata --------------------------------------------------------------------------
    def layout(self) -> str:
        """How the log's files are laid out (``TopicLog.create``)."""
        return layout_of(DeltaTransaction.start(self.spark, self.path).configuration())

    def metadata(self) -> TopicLogMetadata:
        return TopicLogMetadata.from_properties(self._start().configuration())

    def _start(self) -> DeltaTransaction:
        """A transaction on the log; StorageError if the table is gone (its root lost or unmounted)."""
        try:
            txn = DeltaTransaction.start(self.spark, self.path)
        except Exception as exc:  # Delta cannot read the log's own files
            raise StorageError(f"the topic log at {self.path} cannot be read: {str(exc).strip().splitlines()[0][:300]}") from exc
        if txn.read_version < 0:
            raise StorageError(f"no topic log at {self.path}: its root is lost or not mounted")
        return txn

    def table_id(self) -> str:
        """The log table's Delta id (the topic id: new for a topic created again with the name)."""
        txn = DeltaTransaction.start(self.spark, self.path)
        return topic_id_of(txn.configuration(), txn.table_id())

    def set_metadata(self, metadata: TopicLogMetadata) -> None:
        """Replace the partition metadata in one commit; conflicts with every concurrent append.

        New partitions get their log end in the same commit (the controller's apply does the
        same, with more bookkeeping).
        """
        txn = DeltaTransaction.start(self.spark, self.path)
        known = txn.snapshot_app_versions()
        txn.commit_properties(metadata.to_properties(), app_versions={
            log_end_app_id(p): pm.start_offset for p, pm in metadata.partitions.items() if log_end_app_id(p) not in known})

    # -- the fenced append -------------------------------------------------------------------
    def append(
        self,
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
            return self._append_once(records, expected_count, producer_id, rows, expected_mark, stamps, placed)

        try:
            result = retry_on_conflict(attempt, attempts=max_retries + 1, backoff_ms=backoff_ms)
        except ConcurrentCommitError as exc:
            raise ConcurrentAppendError(f"the append lost to concurrent commits {attempts[0]} times ({exc}); "
                                        f"raise producer.max_retries or produce again") from exc
        return result.model_copy(update={"attempts": attempts[0]})

    def append_rows(self, rows: pa.Table, expected_count: int, marks: Mapping[str, int | None] | None = None,
                    max_retries: int = 20, backoff_ms: int = 50,
                    stamps: dict[str, int] | None = None) -> AppendResult:
        """Append rows already in the driver (Arrow, ``driver_rows.ROW_COLUMNS``), fenced as ``append``
        is, with no Spark job: each partition's rows numbered in their order in ``rows``, written by
        pyarrow. Several producers may share the commit: ``marks`` holds, for every producer id in
        the rows, the mark its rows were numbered after; if the log holds another, nothing is
        written (StaleProducerSequenceError, with the log's marks). A mark of None: the producer's
        rows at or below its mark in the log are dropped as a retry's duplicates (as ``append``
        does without ``expected_mark``). A row of a partition that is not writable makes the append
        refuse with InvalidPartitionMetadataError naming it. ``stamps`` as for ``append``; the
        result's ``producer_mark`` is the one producer's mark after it, when there is one."""

        def attempt() -> AppendResult:
            txn, conf, meta, writable, known, bases = self._open_append(expected_count)
            expected = dict(marks or {})
            todo = drop_committed(rows, known, expected)
            check_marks(known, expected, meta.topic)
            new_marks = producer_marks(todo, expected)
            table = number_rows(stamp_log_append_time(todo.select(list(ROW_COLUMNS)), conf), bases,
                                {p: meta.partitions[p].leader_epoch for p in writable}, meta.topic)
            writer = write_arrival_rows if conf.get(LAYOUT_PROP) == ARRIVAL else write_partitioned_rows
            parts = writer(self.path, txn, table) if table.num_rows else []
            one = next(iter(expected)) if len(expected) == 1 else None
            result = self._commit_parts(txn, meta, parts, bases, known, writable, new_marks, expected_count,
                                        one, stamps)
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

    def _open_append(self, expected_count: int) -> tuple[DeltaTransaction, dict[str, str], TopicLogMetadata,
                                                         list[int], dict[str, int], dict[int, int]]:
        """An append's transaction and what it reads inside it: the table's properties, the partition
        metadata (refused if deleted, fenced as a follower, or counting other than ``expected_count``),
        the writable partitions, the application versions and each writable partition's log end."""
        txn = self._start()
        conf = txn.configuration()
        check_set_transactions_kept(conf, self.path)
        meta = TopicLogMetadata.from_properties(conf)
        meta.check_not_deleted()  # read in the transaction: a deletion's fence commit conflicts with it
        check_leader(conf, self.path)  # and so does an election's fence of a replica root
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

    def _append_once(self, records: DataFrame, expected_count: int, producer_id: str | None,
                     rows: int | None = None, expected_mark: int | None = None,
                     stamps: dict[str, int] | None = None, placed: Placement | None = None) -> AppendResult:
        """One attempt, one Spark job: read metadata and log ends in the transaction, write, check, commit.

        Offsets come from the log ends read inside the transaction; counts and sequence bounds
        per partition come back from the written files' Delta stats, so no extra pass is needed.
        """
        txn, conf, meta, writable, known, bases = self._open_append(expected_count)
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
            offsets = offsets_column(self.spark, data, bases, rows, mixed_files=conf.get(LAYOUT_PROP) == ARRIVAL)
        out = data.select(
            "partition", offsets.alias("offset"),
            F.coalesce(map_lookup({p: meta.partitions[p].leader_epoch for p in writable}, "partition"), F.lit(-1))
            .cast("int").alias("leader_epoch"),
            "key", "value", headers_as("headers", data.schema["headers"].dataType, txn.column_type("headers")),
            # LogAppendTime: the append's time, whatever the producer gave (as Kafka's broker stamps it)
            F.current_timestamp().alias("timestamp") if TimestampTypes.of(conf).current == LOG_APPEND_TIME
            else "timestamp", "producer_id", "sequence",
        )
        if conf.get(LAYOUT_PROP) == ARRIVAL:
            parts, max_seq = write_arrival(self.spark, self.path, txn, out, rows, producer_id, mark)
        else:
            parts, max_seq = write_partitioned(self.path, txn, out, rows, producer_id, mark)
        if placed is not None:
            placed.check(parts)
        result = self._commit_parts(txn, meta, parts, bases, known, writable, {producer_id: max_seq} if producer_id else {},
                                    expected_count, producer_id, stamps)
        return result.model_copy(update={"producer_mark": max_seq})

    def _commit_parts(self, txn: DeltaTransaction, meta: TopicLogMetadata, parts: list[tuple[int, int, int, int]],
                      bases: dict[int, int], known: dict[str, int], writable: list[int], marks: dict[str, int],
                      expected_count: int, producer_id: str | None = None,
                      stamps: dict[str, int] | None = None) -> AppendResult:
        """Commit the written files whose (partition, rows, first, last offset) are ``parts``: every
        partition writable, its offsets dense from its log end, and the log ends and the producers'
        new ``marks`` (producer id -> highest sequence) moved in the same commit, which fails if
        another writer moved them first. ``producer_id`` names the one producer in the commit's metadata."""
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
                f"the log end offset of partition {lost[0]} is missing from the Delta log of {self.path} (an expired "
                "set transaction?); appending would reuse offsets, so nothing was written. Restore the table's "
                "set transactions (docs/storage-format.md) before producing again"
            )
        check_dense(parts, bases)
        crash_point("produce:after_write")
        # the commit now fails if another writer moved these partitions, or these producers' marks
        txn.depend_on([log_end_app_id(p) for p in counts] + [producer_app_id(pid) for pid in marks] + list(stamps or {}))
        versions = {log_end_app_id(p): bases[p] + n for p, n in counts.items()}
        for pid, mark in marks.items():
            versions[producer_app_id(pid)] = mark
        versions.update(stamps or {})
        ranges = {p: (bases[p], bases[p] + n) for p, n in counts.items()}
        extra = {"producer_id": producer_id} if producer_id or not marks else {"producers": len(marks)}
        version = txn.commit(versions, commit_metadata(
            "append", **extra, undeleted_partition_count=expected_count,
            ranges={str(p): list(r) for p, r in sorted(ranges.items())}))
        crash_point("produce:after_commit")
        return AppendResult(version=version, ranges=ranges)

    # -- reads and offset queries ------------------------------------------------------------
    def table(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.path)

    def read(self, ranges: dict[int, tuple[int, int]], ordered: bool = True, version: int | None = None) -> DataFrame:
        """Records in [start, end) of each partition, ordered by partition and offset.

        ``version`` reads the log as of that Delta version (the snapshot a batch was planned
        on). ``ordered=False`` skips the sort (a shuffle) for callers that keep the offsets,
        such as a Delta sink. The order needs no sampling pass (log_store/read_ranges.py); a
        batch of up to ONE_TASK_ROWS records needs no shuffle either.
        """
        cond = range_filter(ranges)
        if cond is None:
            return rows_frame(self.spark, [], RECORD_SCHEMA)
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        found = reader.load(self.path).where(F.expr(cond))
        if not ordered:
            return found
        position = F.expr(batch_position(ranges))
        if use_one_task(sum(max(end - start, 0) for start, end in ranges.values())):
            # A small batch is sorted in one task: no shuffle, one stage (200 records:
            # 236 -> 146 ms; BENCHMARKS.md, 2026-11-26).
            return found.coalesce(1).sortWithinPartitions(position)
        keys, shuffle_partitions = ordering_keys(ranges, self.spark.sparkContext.defaultParallelism)
        return found.repartition(shuffle_partitions, F.expr(by_partition(keys))).sortWithinPartitions(position)

    def snapshot(self, ends: bool = True, txn: DeltaTransaction | None = None) -> LogSnapshot:
        """The log's latest version (or ``txn``'s), metadata and log ends, all from one Delta snapshot.

        ``ends=False`` skips the log ends (reading them costs a Spark job; the metadata does not).
        """
        txn = txn or self._start()
        conf = txn.configuration()
        check_set_transactions_kept(conf, self.path)
        meta = TopicLogMetadata.from_properties(conf)
        known = txn.snapshot_app_versions() if ends else {}
        return LogSnapshot(
            version=txn.read_version, topic_version=int(conf.get(TOPIC_VERSION_PROP, "1")), metadata=meta,
            log_ends={p: log_end(known, p, pm.start_offset) for p, pm in meta.partitions.items()},
            log_starts=log_starts(known, meta.partitions), layout=layout_of(conf),
            timestamp_types=TimestampTypes.of(conf),
        )

    def identified_snapshot(self) -> tuple[LogSnapshot, str, str]:
        """``snapshot()``, the topic id and the table's Delta id, all of one Delta snapshot."""
        txn = self._start()
        return self.snapshot(txn=txn), topic_id_of(txn.configuration(), txn.table_id()), txn.table_id()

    def log_end_offsets(self) -> dict[int, int]:
        """Next offset to be written, per partition (Kafka's log end offset)."""
        return self.snapshot().log_ends

    def earliest_offsets(self) -> dict[int, int]:
        """Kafka's log start offset of each partition: where its current incarnation began (0, or
        the old log end for a number reused after retirement), raised by retention and
        delete-records. A retired partition holds nothing: its log start is its log end."""
        return self.snapshot().earliest_offsets()

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> int | None:
        """Earliest offset whose timestamp is at or after ``timestamp_ms`` (ListOffsets)."""
        row = (
            self.table()
            .where((F.col("partition") == partition) & (F.col("timestamp") >= F.timestamp_millis(F.lit(timestamp_ms))))
            .agg(F.min("offset").alias("o"))
            .first()
        )
        return None if row is None or row["o"] is None else int(row["o"])

    def last_offset_of_epoch(self, partition: int, epoch: int) -> int:
        """Largest offset in ``partition`` with ``leader_epoch <= epoch``; -1 if none (rule 3)."""
        row = (
            self.table()
            .where((F.col("partition") == partition) & (F.col("leader_epoch") <= epoch))
            .agg(F.max("offset").alias("o"))
            .first()
        )
        return -1 if row is None or row["o"] is None else int(row["o"])
