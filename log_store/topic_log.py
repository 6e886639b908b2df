"""``TopicLog``: the facade over one topic's log table (delta-spark's DeltaTable style).

Layout: one Delta table per topic, Delta-partitioned by ``partition``; each Kafka partition is
one Delta partition of it (see the README's design section for why not one table per partition).
The partition metadata the protocol needs at append time lives in the table's own properties:

- ``lakelog.undeleted_partition_count``
- ``lakelog.partition.<p>.leader_epoch`` and ``lakelog.partition.<p>.mode``

and each partition's log end offset is a Delta application transaction version
(``lakelog.log_end.<p>``), so the fenced append reads both inside its own transaction.
"""

from __future__ import annotations

import json
import random
import time
from enum import Enum

from delta.tables import DeltaTable
from pydantic import BaseModel, ConfigDict
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from log_store.delta_txn import DeltaTransaction, app_versions
from log_store.errors import (
    ConcurrentAppendError,
    InvalidPartitionMetadataError,
    InvalidRecordError,
    UnknownTopicError,
)

RECORD_SCHEMA = StructType(
    [
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("leader_epoch", IntegerType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), False),
        StructField("headers", MapType(StringType(), BinaryType()), True),
        StructField("timestamp", TimestampType(), True),
        StructField("producer_id", StringType(), True),
        StructField("sequence", LongType(), True),
    ]
)
# What a producer hands to ``append``: the record schema less what the append assigns.
PRODUCER_COLUMNS = ["partition", "key", "value", "headers", "timestamp", "producer_id", "sequence"]

_PREFIX = "lakelog."
COUNT_PROP = "lakelog.undeleted_partition_count"
TOPIC_PROP = "lakelog.topic"


class Mode(str, Enum):
    """Partition status modes (rule 6): who may write and read the partition."""

    READ_WRITE = "ReadWrite"
    READ_ONLY = "ReadOnly"
    NONE = "None"


class PartitionMetadata(BaseModel):
    model_config = ConfigDict(frozen=True)

    partition: int
    leader_epoch: int = 0
    mode: Mode = Mode.READ_WRITE


class TopicLogMetadata(BaseModel):
    """What the controller sets on a topic's log table and every append checks."""

    model_config = ConfigDict(frozen=True)

    topic: str
    undeleted_partition_count: int
    partitions: dict[int, PartitionMetadata]

    @classmethod
    def initial(cls, topic: str, count: int) -> "TopicLogMetadata":
        return cls(
            topic=topic,
            undeleted_partition_count=count,
            partitions={p: PartitionMetadata(partition=p) for p in range(count)},
        )

    def to_properties(self) -> dict[str, str]:
        props = {TOPIC_PROP: self.topic, COUNT_PROP: str(self.undeleted_partition_count)}
        for p, meta in self.partitions.items():
            props[f"lakelog.partition.{p}.leader_epoch"] = str(meta.leader_epoch)
            props[f"lakelog.partition.{p}.mode"] = meta.mode.value
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "TopicLogMetadata":
        fields: dict[int, dict] = {}
        for key, value in props.items():
            parts = key.split(".")
            if len(parts) == 4 and key.startswith("lakelog.partition."):
                fields.setdefault(int(parts[2]), {"partition": int(parts[2])})[parts[3]] = value
        return cls(
            topic=props.get(TOPIC_PROP, ""),
            undeleted_partition_count=int(props.get(COUNT_PROP, "0")),
            partitions={p: PartitionMetadata(**f) for p, f in sorted(fields.items())},
        )


class AppendResult(BaseModel):
    """Where an append landed: per partition, the [first, next) offsets it wrote."""

    version: int | None
    ranges: dict[int, tuple[int, int]]
    attempts: int = 1

    @property
    def appended(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


def log_end_app_id(partition: int) -> str:
    return f"lakelog.log_end.{partition}"


def producer_app_id(producer_id: str, partition: int) -> str:
    return f"lakelog.producer.{producer_id}.{partition}"


def _map_lookup(mapping: dict[int, int], column: str) -> Column:
    pairs = [F.lit(x) for kv in mapping.items() for x in kv]
    return F.element_at(F.create_map(*pairs), F.col(column))


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
    def create(cls, spark: SparkSession, path: str, metadata: TopicLogMetadata) -> "TopicLog":
        """Create the log table with its initial metadata in one commit (no-op if it exists)."""
        builder = (
            DeltaTable.createIfNotExists(spark)
            .location(path)
            .addColumns(RECORD_SCHEMA)
            .partitionedBy("partition")
            # The change feed keeps every record ever appended readable (``table_changes``)
            # after a retired partition's rows are deleted, for the ordering audit.
            .property("delta.enableChangeDataFeed", "true")
        )
        for key, value in metadata.to_properties().items():
            builder = builder.property(key, value)
        builder.execute()
        return cls(spark, path)

    # -- metadata --------------------------------------------------------------------------
    def metadata(self) -> TopicLogMetadata:
        return TopicLogMetadata.from_properties(DeltaTransaction.start(self.spark, self.path).configuration())

    def set_metadata(self, metadata: TopicLogMetadata) -> None:
        """Replace the partition metadata in one commit; conflicts with every concurrent append."""
        props = ", ".join(f"'{k}' = '{v}'" for k, v in metadata.to_properties().items())
        self.spark.sql(f"ALTER TABLE delta.`{self.path}` SET TBLPROPERTIES ({props})")

    # -- the fenced append -------------------------------------------------------------------
    def append(
        self,
        records: DataFrame,
        expected_count: int,
        producer_id: str | None = None,
        max_retries: int = 20,
        backoff_ms: int = 50,
    ) -> AppendResult:
        """Append ``records`` (columns ``PRODUCER_COLUMNS``) with dense offsets, fenced.

        Raises InvalidPartitionMetadataError when ``expected_count`` is not the table's
        ``undeleted_partition_count`` or a target partition is not ReadWrite; the caller
        re-partitions and retries. Concurrent commits to the same partitions are retried here.
        With a ``producer_id``, records whose sequence was already committed for their partition
        are dropped, so a retried batch lands once. Pass a persisted DataFrame: a retry reads
        it again.
        """
        missing = [c for c in PRODUCER_COLUMNS if c not in records.columns]
        if missing:
            raise InvalidRecordError(f"records lack columns {missing}; expected {PRODUCER_COLUMNS}")
        records = records.select(*PRODUCER_COLUMNS)
        for attempt in range(1, max_retries + 2):
            try:
                result = self._append_once(records, expected_count, producer_id)
                return result.model_copy(update={"attempts": attempt})
            except ConcurrentAppendError:
                if attempt > max_retries:
                    raise
                time.sleep(backoff_ms / 1000 * (1 + random.random()) * min(attempt, 10))
        raise AssertionError("unreachable")

    def _append_once(self, records: DataFrame, expected_count: int, producer_id: str | None) -> AppendResult:
        """One attempt, one Spark job: read metadata and log ends in the transaction, write, check, commit.

        Offsets come from the log ends read inside the transaction; counts and sequence bounds
        per partition come back from the written files' Delta stats, so no extra pass is needed.
        """
        txn = DeltaTransaction.start(self.spark, self.path)
        meta = TopicLogMetadata.from_properties(txn.configuration())
        if meta.undeleted_partition_count != expected_count:
            raise InvalidPartitionMetadataError(
                f"stale partition count: producer has {expected_count}, topic {meta.topic} has "
                f"{meta.undeleted_partition_count}; refresh metadata and re-partition"
            )
        writable = [p for p, pm in meta.partitions.items() if pm.mode is Mode.READ_WRITE]
        # Read every partition's log end and sequence without depending on them; after the
        # write, depend only on the partitions written, so appends to others never conflict.
        known = txn.snapshot_app_versions()
        bases = {p: max(known.get(log_end_app_id(p), 0), 0) for p in writable}
        data = records
        if producer_id:
            last_seq = {p: known.get(producer_app_id(producer_id, p), -1) for p in writable}
            data = data.where(F.col("sequence") > F.coalesce(_map_lookup(last_seq, "partition"), F.lit(-1)))
        order = Window.partitionBy("partition").orderBy("sequence")
        out = data.select(
            "partition",
            (F.coalesce(_map_lookup(bases, "partition"), F.lit(0)) + F.row_number().over(order) - 1).cast("long").alias("offset"),
            F.coalesce(_map_lookup({p: meta.partitions[p].leader_epoch for p in writable}, "partition"), F.lit(-1))
            .cast("int").alias("leader_epoch"),
            "key", "value", "headers", "timestamp", "producer_id", "sequence",
        )
        counts: dict[int, int] = {}
        max_seq: dict[int, int] = {}
        for f in txn.write(out):
            p = int(f.partition_values["partition"])
            counts[p] = counts.get(p, 0) + f.num_records
            max_seq[p] = max(max_seq.get(p, -1), int(f.max_values.get("sequence", -1)))
        not_writable = sorted(set(counts) - set(writable))
        if not_writable:  # the written files are never committed; VACUUM removes them
            p = not_writable[0]
            state = "does not exist" if p not in meta.partitions else f"is {meta.partitions[p].mode.value}"
            raise InvalidPartitionMetadataError(
                f"partition {p} of {meta.topic} {state}; refresh metadata and re-partition"
            )
        if not counts:
            return AppendResult(version=None, ranges={})
        for p in counts:  # the commit now fails if another writer moved these partitions
            txn.app_version(log_end_app_id(p))
            if producer_id:
                txn.app_version(producer_app_id(producer_id, p))
        versions = {log_end_app_id(p): bases[p] + n for p, n in counts.items()}
        if producer_id:
            versions.update({producer_app_id(producer_id, p): max_seq[p] for p in counts})
        ranges = {p: (bases[p], bases[p] + n) for p, n in counts.items()}
        info = {"lakelog": "append", "producer_id": producer_id, "undeleted_partition_count": expected_count,
                "ranges": {str(p): list(r) for p, r in sorted(ranges.items())}}
        version = txn.commit(versions, json.dumps(info))
        return AppendResult(version=version, ranges=ranges)

    # -- reads and offset queries ------------------------------------------------------------
    def table(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.path)

    def read(self, ranges: dict[int, tuple[int, int]], ordered: bool = True) -> DataFrame:
        """Records in [start, end) of each partition, ordered by partition and offset.

        ``ordered=False`` skips the sort (a shuffle) for callers that keep the offsets, such as
        a Delta sink.
        """
        if not ranges:
            return self.spark.createDataFrame([], RECORD_SCHEMA)
        cond = None
        for p, (start, end) in ranges.items():
            c = (F.col("partition") == p) & (F.col("offset") >= start) & (F.col("offset") < end)
            cond = c if cond is None else cond | c
        found = self.table().where(cond)
        return found.orderBy("partition", "offset") if ordered else found

    def log_end_offsets(self) -> dict[int, int]:
        """Next offset to be written, per partition (Kafka's log end offset)."""
        versions = app_versions(self.spark, self.path)
        meta = self.metadata()
        return {p: max(versions.get(log_end_app_id(p), 0), 0) for p in meta.partitions}

    def earliest_offsets(self) -> dict[int, int]:
        """First offset still in the log, per partition (log end when empty)."""
        ends = self.log_end_offsets()
        rows = self.table().groupBy("partition").agg(F.min("offset").alias("lo")).collect()
        found = {r["partition"]: r["lo"] for r in rows}
        return {p: found.get(p, end) for p, end in ends.items()}

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
