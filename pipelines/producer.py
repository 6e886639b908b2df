"""The producer: DataFrames or files to a topic, partitioned exactly as Kafka would.

Each batch is one fenced append (one Delta commit across all its partitions). A rejection for
stale metadata makes the producer refresh the partition count, re-partition the batch and retry;
with a producer id, a retried batch lands exactly once (the log store drops committed sequences).
"""

from __future__ import annotations

import time
import uuid
from typing import Callable

from pydantic import BaseModel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType

from control_plane.topics import TopicAdmin
from pipelines.settings import ProducerSettings
from log_store.errors import InvalidPartitionMetadataError, InvalidRecordError
from log_store.partitioner import partition_column
from log_store.engine import app_versions
from log_store.topic_log import PRODUCER_COLUMNS, producer_app_id

ProgressFn = Callable[[int, int], None]


class ProduceResult(BaseModel):
    topic: str
    producer_id: str
    records: int
    appended: int
    duplicates: int
    batches: int
    metadata_refreshes: int
    commit_retries: int
    per_partition: dict[int, int]
    seconds: float


def _as_binary(df: DataFrame, name: str) -> DataFrame:
    if name not in df.columns:
        return df.withColumn(name, F.lit(None).cast("binary"))
    if isinstance(df.schema[name].dataType, BinaryType):
        return df
    if isinstance(df.schema[name].dataType, StringType):
        return df.withColumn(name, F.col(name).cast("binary"))
    return df.withColumn(name, F.to_json(F.col(name)).cast("binary")) if name == "value" else df.withColumn(
        name, F.col(name).cast("string").cast("binary")
    )


class Producer:
    """Produces to one topic. ``producer_id`` names an input stream: sequences are positions in it."""

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        topic: str,
        producer_id: str | None = None,
        settings: ProducerSettings | None = None,
    ) -> None:
        self.spark = spark
        self.admin = TopicAdmin(spark, root)
        self.topic = topic
        self.log = self.admin.log(topic)  # raises UnknownTopicError before anything is read
        self.producer_id = producer_id or f"producer-{uuid.uuid4()}"
        self.settings = settings or ProducerSettings()

    def next_sequence(self) -> int:
        """One past the highest sequence this producer id has committed."""
        return app_versions(self.spark, self.log.path).get(producer_app_id(self.producer_id), -1) + 1

    def normalize(self, records: DataFrame, sequence_start: int = 0) -> DataFrame:
        """Columns key/value as binary, headers, timestamp, sequence; value must be present."""
        if "value" not in records.columns:
            raise InvalidRecordError(f"records need a 'value' column; found {records.columns}")
        df = _as_binary(_as_binary(records, "key"), "value")
        if "headers" not in df.columns:
            df = df.withColumn("headers", F.lit(None).cast("map<string,binary>"))
        if "timestamp" not in df.columns:
            df = df.withColumn("timestamp", F.current_timestamp())
        if "sequence" not in df.columns:
            order = Window.orderBy(F.monotonically_increasing_id())
            df = df.withColumn("sequence", F.row_number().over(order) - 1)
        df = df.withColumn("sequence", (F.col("sequence") + F.lit(sequence_start)).cast("long"))
        return df.select(
            "key", "value", F.col("headers").cast("map<string,binary>").alias("headers"),
            F.col("timestamp").cast("timestamp").alias("timestamp"), "sequence",
        )

    def send(
        self,
        records: DataFrame,
        sequence_start: int | None = None,
        on_progress: ProgressFn | None = None,
    ) -> ProduceResult:
        """Produce every record of ``records``; returns counts, retries and timing.

        Records with a ``sequence`` column keep it (plus ``sequence_start``): re-sending them
        under the same producer id lands nothing twice. Records without one continue this
        producer's stream after its last committed sequence.
        """
        started = time.perf_counter()
        if sequence_start is None:
            sequence_start = 0 if "sequence" in records.columns else self.next_sequence()
        # Cache the normalized rows (counted, then written, maybe retried) unless they are only a
        # projection of rows the caller already cached: then caching them again is a full extra copy.
        reuse = records.is_cached and "sequence" in records.columns
        df = self.normalize(records, sequence_start)
        if not reuse:
            df = df.persist()
        try:
            stats = df.agg(
                F.count("*").alias("n"),
                F.sum(F.col("value").isNull().cast("int")).alias("null_values"),
                F.min("sequence").alias("lo"),
            ).first()
            if stats["null_values"]:
                raise InvalidRecordError(f"{stats['null_values']} records have no value; every record needs one")
            total = int(stats["n"])
            size = self.settings.batch_size
            n_batches = (total + size - 1) // size
            result = ProduceResult(
                topic=self.topic, producer_id=self.producer_id, records=total, appended=0, duplicates=0,
                batches=n_batches, metadata_refreshes=0, commit_retries=0, per_partition={}, seconds=0.0,
            )
            if n_batches > 1:
                df = df.withColumn("_batch", F.floor((F.col("sequence") - F.lit(stats["lo"])) / size))
            for b in range(n_batches):
                batch = df.where(F.col("_batch") == b).drop("_batch") if n_batches > 1 else df
                result = self._send_batch(batch, result, rows=min(size, total - b * size))
                if on_progress:
                    on_progress(b + 1, n_batches)
            return result.model_copy(update={
                "seconds": time.perf_counter() - started, "duplicates": total - result.appended,
            })
        finally:
            if not reuse:
                df.unpersist()

    def _send_batch(self, batch: DataFrame, result: ProduceResult, rows: int | None = None) -> ProduceResult:
        """One batch (about ``rows`` records) as one fenced append, re-partitioned on stale metadata."""
        for refresh in range(self.settings.max_retries + 1):
            count = self.log.metadata().undeleted_partition_count
            parted = batch.withColumn("partition", partition_column(self.spark, "key", "sequence", count))
            parted = parted.withColumn("producer_id", F.lit(self.producer_id)).select(*PRODUCER_COLUMNS)
            try:
                appended = self.log.append(
                    parted, count, self.producer_id,
                    max_retries=self.settings.max_retries, backoff_ms=self.settings.retry_backoff_ms, rows=rows,
                )
            except InvalidPartitionMetadataError:
                if refresh == self.settings.max_retries:
                    raise
                result = result.model_copy(update={"metadata_refreshes": result.metadata_refreshes + 1})
                continue
            per = dict(result.per_partition)
            for p, (lo, hi) in appended.ranges.items():
                per[p] = per.get(p, 0) + hi - lo
            return result.model_copy(update={
                "appended": result.appended + appended.appended,
                "commit_retries": result.commit_retries + appended.attempts - 1,
                "per_partition": per,
            })
        raise AssertionError("unreachable")
