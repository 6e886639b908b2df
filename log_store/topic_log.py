"""``TopicLog``: the facade over one topic's log table (delta-spark's DeltaTable style).

Layout: one Delta table per topic, Delta-partitioned by ``partition``; each Kafka partition is
one Delta partition of it (docs/design.md says why not one table per partition). The partition
metadata the protocol needs at append time lives in the table's own properties and each
partition's log end in a Delta application transaction version (``log_store.log_metadata``), so
the fenced append (``log_store.log_append``) reads both inside its own transaction.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

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

from log_store.headers import HEADERS_TYPE
from log_store.dense_offsets import use_one_task
from log_store.engine import DeltaTransaction
from log_store import commits, rs_reader
from log_store.object_store import delta_rs_reads
from log_store.rs_engine import RsTransaction
from log_store.delta_errors import retry_on_conflict
from log_store.table_create import create_table, table_exists
from log_store.errors import (
    leader_unavailable,
    InvalidConfigurationError,
    StorageError,
    UnknownTopicError,
)
from log_store.frames import parallelism, rows_frame
from log_store.log_append import PRODUCER_COLUMNS, AppendResult, append, append_rows  # noqa: F401 - the log's API
from log_store.log_metadata import (
    ARRIVAL,
    LAYOUT_PROP,
    LAYOUTS,
    TOPIC_VERSION_PROP,
    LogSnapshot,
    TopicLogMetadata,
    check_set_transactions_kept,
    cleaned_offsets,
    epoch_ends_of,
    kept_high_watermark,
    layout_of,
    log_end,
    log_starts,
    topic_id_of,
)
from log_store.names import log_end_app_id, commit_metadata
from log_store.timestamp_types import TIMESTAMP_TYPES_PROP, TimestampTypes, check_kind
from log_store.read_ranges import batch_position, by_partition, ordering_keys, range_filter
from log_store.txn_marks import CONTROL_COLUMN, marks_by_partition
from log_store.txn_reads import MARKER_COLUMNS, no_markers

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")

RECORD_SCHEMA = StructType(
    [
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("leader_epoch", IntegerType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),  # null: a tombstone, as Kafka's; NOT NULL in logs of earlier releases
        StructField("headers", HEADERS_TYPE, True),
        StructField("timestamp", TimestampType(), True),
        StructField("producer_id", StringType(), True),
        StructField("sequence", LongType(), True),
    ]
)
# A log's columns: its records' and ``control``, which tells a transaction's marker (a control
# record, docs/design.md, Transactions) from a record. A log has it from its creation; one of an
# earlier release gets it added by its first marker (``txn_markers.ensure_control_column``).
CONTROL_FIELD = StructField(CONTROL_COLUMN, StringType(), True)


def log_schema(records: StructType) -> StructType:
    """A new log's schema: the ``records`` columns, then ``control``."""
    return StructType([*records.fields, CONTROL_FIELD])


# The columns Delta keeps statistics for in each written file: the append counts records and
# checks offsets and sequences from them, and reads skip files by offset, timestamp and epoch.
# Keys, values, headers and producer ids get none: collecting them cost about 12 % of a 1M-record
# write (BENCHMARKS.md, 2026-11-26), and no read filters on them.
STATS_COLUMNS = "offset,sequence,leader_epoch,timestamp"
# A new log's: ``control`` too (its null count), so a search for markers skips the files holding
# none (300 files of records, one marker: 11 ms rather than 110 ms by delta-rs).
LOG_STATS_COLUMNS = f"{STATS_COLUMNS},{CONTROL_COLUMN}"
DEFAULT_LAYOUT = os.environ.get("LAKELOG_LAYOUT", "partitioned")  # a new topic's, without a layout given
CHECKPOINT_INTERVAL = "100"  # commits between Delta checkpoints of a log (Delta's default: 10)



class TopicLog:
    """One topic's log table. Build with ``for_path`` or ``create``."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.path = path

    # -- factories -------------------------------------------------------------------------
    @classmethod
    def for_path(cls, spark: SparkSession, path: str) -> "TopicLog":
        if not table_exists(spark, path):
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
        """Create the log table with its initial metadata (no-op if it exists; ``table_create``).
        ``topic_version``: the creating record's (above 1 for a topic created again after a deletion).
        ``layout``: ``partitioned`` (a Delta partition per log partition) or ``arrival`` (a file per
        write holding every partition it got, compacted into files per partition; docs/design.md).
        ``properties``: more table properties (a replica root's role and epoch)."""
        given, layout = layout, layout or DEFAULT_LAYOUT
        if layout not in LAYOUTS:
            where = "" if given else " (from LAKELOG_LAYOUT)"
            raise InvalidConfigurationError(f"unknown layout {layout!r}{where}: give one of {', '.join(LAYOUTS)}")
        arrival = layout == ARRIVAL
        properties = {
            # The change feed keeps every record ever appended readable (``table_changes``)
            # after a retired partition's rows are deleted, for the ordering audit.
            "delta.enableChangeDataFeed": "true",
            "delta.dataSkippingStatsColumns": f"partition,{LOG_STATS_COLUMNS}" if arrival else LOG_STATS_COLUMNS,
            # Each checkpoint lists every file removed in the last week (compaction removes one
            # per produce and partition): one every 10 commits, Delta's default, made the log
            # folder of a soaked topic almost all checkpoints (BENCHMARKS.md, soak).
            "delta.checkpointInterval": CHECKPOINT_INTERVAL,
            **({LAYOUT_PROP: ARRIVAL} if arrival else {}),
            **metadata.to_properties(),
            **({TOPIC_VERSION_PROP: str(topic_version)} if topic_version != 1 else {}),
            **(properties or {}),
        }
        # A racing creator's table is found made; the caller compares its metadata.
        create_table(spark, path, log_schema(RECORD_SCHEMA), properties, None if arrival else "partition",
                     "the log table")
        log = cls(spark, path)
        log.ensure_log_ends(list(metadata.partitions))
        return log

    def ensure_log_ends(self, partitions: list[int]) -> None:
        """Record log end 0 for partitions that have none yet (one commit; idempotent).

        Every partition has a log end from its creation on, so a missing one can only mean an
        expired set transaction, and the append refuses to guess (it would reuse offsets).
        """
        def attempt() -> None:
            txn = commits.start(self.spark, self.path, "the log table")
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
        return layout_of(self._read(lambda txn: txn.configuration()))

    def metadata(self) -> TopicLogMetadata:
        return TopicLogMetadata.from_properties(self._read(lambda txn: txn.configuration()))

    def keeps_null_values(self) -> bool:
        """Whether the log keeps a record with a null value (a tombstone): a log made by an earlier
        release of lakelog declares its value column NOT NULL."""
        return self._read(lambda txn: txn.column("value").nullable)

    def app_versions(self) -> dict[str, int]:
        """Every application version of the log's latest snapshot (log ends, producer marks)."""
        return self._read(lambda txn: txn.snapshot_app_versions())

    def _read(self, fn: Callable[["DeltaTransaction | RsTransaction"], T]) -> T:
        """``fn`` of a transaction that only reads (``rows_transaction``'s engine), then released."""
        txn = self.rows_transaction()
        try:
            return fn(txn)
        finally:
            txn.release()

    def transaction(self) -> "DeltaTransaction | RsTransaction":
        """A transaction on the log for an append of a Spark job's rows (``log_store.commits``'s
        engine); StorageError if the table is gone (its root lost or unmounted)."""
        try:
            txn = commits.start(self.spark, self.path, "the topic log")
        except StorageError:
            raise
        except Exception as exc:  # Delta cannot read the log's own files
            raise StorageError(f"the topic log at {self.path} cannot be read: {str(exc).strip().splitlines()[0][:300]}") from exc
        if txn.read_version < 0:
            raise StorageError(f"no topic log at {self.path}: its root is lost or not mounted")
        return txn

    def rows_transaction(self) -> "DeltaTransaction | RsTransaction":
        """A transaction for an append of rows already in the driver: delta-rs's (no JVM) on a local
        root and on S3, Delta's through Spark on other stores and for a log whose rules pyarrow's
        files would not keep (``log_store.commits``)."""
        return commits.start(self.spark, self.path, "the topic log")

    def table_id(self) -> str:
        """The log table's Delta id (the topic id: new for a topic created again with the name)."""
        return self._read(lambda txn: topic_id_of(txn.configuration(), txn.table_id()))

    def set_metadata(self, metadata: TopicLogMetadata) -> None:
        """Replace the partition metadata in one commit; conflicts with every concurrent append.

        New partitions get their log end in the same commit (the controller's apply does the
        same, with more bookkeeping).
        """
        txn = self.rows_transaction()
        known = txn.snapshot_app_versions()
        txn.commit_properties(metadata.to_properties(), app_versions={
            log_end_app_id(p): pm.start_offset for p, pm in metadata.partitions.items() if log_end_app_id(p) not in known})

    def switch_timestamp_type(self, kind: str) -> bool:
        """Switch the log to ``kind`` from its current log ends on, in one metadata commit that fails
        if an append moved a log end meanwhile (and which every open append then conflicts with);
        False if ``kind`` is already the log's."""
        check_kind(kind)

        def attempt() -> bool:
            txn = self.rows_transaction()
            conf = txn.configuration()
            known = txn.snapshot_app_versions()
            meta = TopicLogMetadata.from_properties(conf)
            switched = TimestampTypes.of(conf).switched(
                kind, {p: log_end(known, p, pm.start_offset) for p, pm in meta.partitions.items()})
            if switched is None:
                return False
            for p in meta.partitions:
                txn.app_version(log_end_app_id(p))
            txn.commit_properties({TIMESTAMP_TYPES_PROP: switched.to_property()})
            return True

        return retry_on_conflict(attempt)

    # -- the fenced append (log_store/log_append.py) -------------------------------------------
    append = append
    append_rows = append_rows

    # -- reads and offset queries ------------------------------------------------------------
    def table(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.path)

    def read(self, ranges: dict[int, tuple[int, int]], ordered: bool = True, version: int | None = None,
             records_only: bool = True, exclude: str | None = None) -> DataFrame:
        """Records in [start, end) of each partition, ordered by partition and offset.

        ``version`` reads the log as of that Delta version (the snapshot a batch was planned
        on). ``ordered=False`` skips the sort (a shuffle) for callers that keep the offsets,
        such as a Delta sink. The order needs no sampling pass (log_store/read_ranges.py); a
        batch of up to ONE_TASK_ROWS records needs no shuffle either. Transaction markers are
        left out, with the ``control`` column (``records_only=False``: every row, and the column
        where the log has it); ``exclude``: a Spark SQL predicate of records left out
        (``txn_reads.aborted_predicate``).
        """
        cond = range_filter(ranges)
        if cond is None:
            return rows_frame(self.spark, [], RECORD_SCHEMA)
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        found = reader.load(self.path).where(F.expr(cond))
        if exclude:
            found = found.where(~F.expr(exclude))
        if records_only and CONTROL_COLUMN in found.columns:
            found = found.where(F.col(CONTROL_COLUMN).isNull()).drop(CONTROL_COLUMN)
        if not ordered:
            return found
        position = F.expr(batch_position(ranges))
        if use_one_task(sum(max(end - start, 0) for start, end in ranges.values())):
            # A small batch is sorted in one task: no shuffle, one stage (200 records:
            # 236 -> 146 ms; BENCHMARKS.md, 2026-11-26).
            return found.coalesce(1).sortWithinPartitions(position)
        keys, shuffle_partitions = ordering_keys(ranges, parallelism(self.spark))
        return found.repartition(shuffle_partitions, F.expr(by_partition(keys))).sortWithinPartitions(position)

    def markers(self, ranges: dict[int, tuple[int, int]], version: int) -> "pa.Table":
        """The transaction markers (partition, offset, producer_id, control) in ``ranges`` as of
        ``version``: read by delta-rs where lakelog can, else by Spark; none in a log without the
        control column."""
        here, storage = delta_rs_reads(self.spark, self.path)
        if here:
            return rs_reader.log_markers(self.path, version, ranges, storage)
        rows = self.read(ranges, ordered=False, version=version, records_only=False)
        if CONTROL_COLUMN not in rows.columns:
            return no_markers()
        return rows.where(F.col(CONTROL_COLUMN).isNotNull()).select(*MARKER_COLUMNS).toArrow()

    def snapshot(self, ends: bool = True, txn: "DeltaTransaction | RsTransaction | None" = None) -> LogSnapshot:
        """The log's latest version (or ``txn``'s), metadata and log ends, all from one Delta snapshot.

        ``ends=False`` skips the log ends: every set transaction of the snapshot, which delta-rs's
        transaction reads from the commit files and the last checkpoint (no Spark job), and
        Delta's from its checksum, or else with a Spark job that rebuilds the snapshot's state
        (``DeltaTransaction.snapshot_app_versions``). The metadata costs neither.
        """
        if txn is None:
            return self._read(lambda own: self.snapshot(ends, own))
        conf = txn.configuration()
        check_set_transactions_kept(conf, self.path)
        meta = TopicLogMetadata.from_properties(conf)
        known = txn.snapshot_app_versions() if ends else {}
        return LogSnapshot(
            version=txn.read_version, topic_version=int(conf.get(TOPIC_VERSION_PROP, "1")), metadata=meta,
            log_ends={p: log_end(known, p, pm.start_offset) for p, pm in meta.partitions.items()},
            log_starts=log_starts(known, meta.partitions), cleaned=cleaned_offsets(known, meta.partitions),
            layout=layout_of(conf),
            timestamp_types=TimestampTypes.of(conf), **kept_high_watermark(known, meta.partitions),
            txn_marks=marks_by_partition(known) if ends else None, epoch_ends=epoch_ends_of(conf, meta.partitions),
        )

    def identified_snapshot(self) -> tuple[LogSnapshot, str, str]:
        """``snapshot()``, the topic id and the table's Delta id, all of one Delta snapshot."""
        return self._read(lambda txn: (self.snapshot(txn=txn), topic_id_of(txn.configuration(), txn.table_id()),
                                       txn.table_id()))

    def log_end_offsets(self) -> dict[int, int]:
        """Next offset to be written, per partition (Kafka's log end offset)."""
        return self.snapshot().log_ends

    def earliest_offsets(self) -> dict[int, int]:
        """Kafka's log start offset of each partition: where its current incarnation began (0, or
        the old log end for a number reused after retirement), raised by retention and
        delete-records. A retired partition holds nothing: its log start is its log end."""
        return self.snapshot().earliest_offsets()

    def offset_for_timestamp(self, partition: int, timestamp_ms: int, version: int | None = None,
                             start: int = 0) -> int | None:
        """Earliest offset at or above ``start`` whose timestamp is at or after ``timestamp_ms``
        (ListOffsets), as of ``version`` (default the latest); read by delta-rs where lakelog can
        (``delta_rs_reads``: a local or S3 root)."""
        here, storage = delta_rs_reads(self.spark, self.path)
        if here:
            return rs_reader.first_offset_at(self.path, version, partition, start, timestamp_ms, storage)
        table = self.table() if version is None else self.spark.read.format("delta").option("versionAsOf", version).load(self.path)
        row = (
            table
            .where((F.col("partition") == partition) & (F.col("offset") >= start)
                   & (F.col("timestamp") >= F.timestamp_millis(F.lit(timestamp_ms))))
            .agg(F.min("offset").alias("o"))
            .first()
        )
        return None if row is None or row["o"] is None else int(row["o"])

    def end_after_records(self, partition: int, start: int, end: int, records: int, version: int) -> int:
        """The offset after the first ``records`` records of ``partition`` from ``start`` as of
        ``version`` (``end`` if fewer lie below it): a read of ``records`` records where key
        compaction left gaps (one record per offset elsewhere). Read by delta-rs where lakelog can."""
        here, storage = delta_rs_reads(self.spark, self.path)
        if here:
            return rs_reader.end_after_records(self.path, version, partition, start, end, records, storage)
        offsets = self.read({partition: (start, end)}, ordered=False, version=version, records_only=False).select("offset")
        last, found = offsets.orderBy("offset").limit(records).agg(F.max("offset"), F.count("*")).first()
        return end if found < records else int(last) + 1

    def first_offsets(self, spans: list[tuple[int, int, int]], version: int) -> dict[int, int]:
        """For each (partition, start, end) of ``spans`` (one per partition): the first offset in
        [start, end) the log holds as of ``version`` (``end`` if none), where key compaction left
        gaps: one read for all the partitions. Read by delta-rs where lakelog can."""
        here, storage = delta_rs_reads(self.spark, self.path)
        if here:
            return rs_reader.first_offsets(self.path, version, spans, storage)
        ranges = {p: (s, e) for p, s, e in spans}
        rows = self.read(ranges, ordered=False, version=version, records_only=False).groupBy("partition").agg(F.min("offset")).collect()
        found = {int(r[0]): int(r[1]) for r in rows}
        return {p: found.get(p, e) for p, _s, e in spans}

    def last_offset_of_epoch(self, partition: int, epoch: int, version: int | None = None) -> int:
        """Largest offset in ``partition`` with ``leader_epoch <= epoch``; -1 if none (rule 3). As of
        ``version`` (default the latest); read by delta-rs where lakelog can."""
        here, storage = delta_rs_reads(self.spark, self.path)
        if here:
            return rs_reader.last_offset_of_epoch(self.path, partition, epoch, version, storage)
        table = self.table() if version is None else self.spark.read.format("delta").option("versionAsOf", version).load(self.path)
        row = (
            table
            .where((F.col("partition") == partition) & (F.col("leader_epoch") <= epoch))
            .agg(F.max("offset").alias("o"))
            .first()
        )
        return -1 if row is None or row["o"] is None else int(row["o"])
